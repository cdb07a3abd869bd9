"""Sort-based consolidation against hash consolidation (catalog.consolidate)."""

from __future__ import annotations

import json
import math
import struct
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.consolidate import consolidate, consolidate_hashed, consolidate_sorted, is_sortable
from catalog.shard import DIFF, TS
from support.shards import as_bits

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
        pa.field(TS, pa.uint64()),
        pa.field(DIFF, pa.int64()),
    ]
)
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.one_of(st.none(), st.integers(-1, 1)),
            "s": st.one_of(st.none(), st.sampled_from(["a", "b", ""])),
            "f": st.one_of(st.none(), st.sampled_from([0.5, 2.0, math.nan])),
            TS: st.integers(0, 2),
            DIFF: st.sampled_from([1, -1, 2]),
        }
    ),
    max_size=40,
)


def encoded(table: pa.Table) -> list[str]:
    """Rows as JSON in table order (NaN spelled out, so NaN rows compare equal)."""
    return [
        json.dumps({k: "nan" if v != v else v for k, v in row.items()}, sort_keys=True)
        for row in table.to_pylist()
    ]


def as_multiset(table: pa.Table) -> list[str]:
    return sorted(encoded(table))


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, chunks=st.integers(1, 3))
def test_sort_consolidation_equals_hash_consolidation(
    rows: list[dict[str, Any]], chunks: int
) -> None:
    """Same rows and diffs as hash consolidation (nulls and NaN equal to themselves)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    if chunks > 1 and table.num_rows:
        step = max(table.num_rows // chunks, 1)
        table = pa.Table.from_batches(table.to_batches(max_chunksize=step), schema=SCHEMA)
    assert as_multiset(consolidate_sorted(table)) == as_multiset(consolidate_hashed(table))


@given(rows=ROWS)
def test_sort_consolidation_output_is_sorted_and_keeps_the_schema(
    rows: list[dict[str, Any]],
) -> None:
    """The output is sorted by every column (what compaction marks ``ordered``)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    out = consolidate_sorted(table)
    assert out.schema == table.schema
    keys = [(n, "ascending") for n in out.column_names]
    assert encoded(out) == encoded(out.sort_by(keys))
    assert all(d != 0 for d in out.column(DIFF).to_pylist())


def _epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
FLAT: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "b": (pa.bool_(), st.booleans()),
    "i8": (pa.int8(), st.integers(-1, 1)),
    "u32": (pa.uint32(), st.integers(0, 2)),
    "f64": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5, math.nan, -math.nan, NAN_PAYLOAD])),
    "f32": (pa.float32(), st.sampled_from([0.0, -0.0, math.nan])),
    "dec": (pa.decimal128(5, 2), st.sampled_from([Decimal("0.00"), Decimal("1.25")])),
    "s": (pa.string(), st.sampled_from(["", "a", "ab"])),
    "ls": (pa.large_string(), st.sampled_from(["", "a"])),
    "bin": (pa.binary(), st.sampled_from([b"", b"\x00", b"x"])),
    "fsb": (pa.binary(2), st.sampled_from([b"\x00\x00", b"xy"])),
    "d": (pa.date32(), st.sampled_from([date(2024, 1, 1), date(1970, 1, 1)])),
    "t": (pa.timestamp("us", tz="UTC"), st.sampled_from([0, 1]).map(_epoch)),
    "dur": (pa.duration("ms"), st.sampled_from([timedelta(0), timedelta(seconds=1)])),
}


@st.composite
def flat_tables(draw: st.DrawFn) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(FLAT)), min_size=0, max_size=4, unique=True))
    schema = pa.schema(
        [pa.field(n, FLAT[n][0]) for n in names]
        + [pa.field(TS, pa.uint64()), pa.field(DIFF, pa.int64())]
    )
    count = draw(st.integers(0, 30))
    data: dict[str, list[Any]] = {
        n: [draw(st.one_of(st.none(), FLAT[n][1])) for _ in range(count)] for n in names
    }
    data[TS] = [draw(st.integers(0, 1)) for _ in range(count)]
    data[DIFF] = [draw(st.sampled_from([1, -1, 2])) for _ in range(count)]
    table = pa.Table.from_pydict(data, schema=schema)
    split = draw(st.integers(0, count))
    return pa.concat_tables([table.slice(0, split), table.slice(split)])


@settings(max_examples=300, deadline=None)
@given(table=flat_tables())
def test_sorted_and_hashed_consolidation_agree_on_flat_types(table: pa.Table) -> None:
    """Every sortable flat type: the sorted path and the hash path give the same rows, bitwise."""
    keys = [n for n in table.column_names if n != DIFF]
    assert all(is_sortable(table.schema.field(k).type) for k in keys)
    hashed = consolidate_hashed(table)
    for result in (consolidate_sorted(table), consolidate(table)):
        assert result.schema == table.schema
        assert as_bits(result) == as_bits(hashed)
    ordered = consolidate_sorted(table)
    if not any(pa.types.is_floating(table.schema.field(k).type) for k in keys):
        assert ordered.equals(ordered.sort_by([(k, "ascending") for k in keys]))
