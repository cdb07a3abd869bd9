"""catalog.pipeline's sort-based consolidation against the shard module's hash consolidation."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.pipeline import consolidate_sorted
from catalog.shard import DIFF, TS, consolidate

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
    """Same rows and diffs as catalog.shard.consolidate (nulls and NaN equal to themselves)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    if chunks > 1 and table.num_rows:
        step = max(table.num_rows // chunks, 1)
        table = pa.Table.from_batches(table.to_batches(max_chunksize=step), schema=SCHEMA)
    assert as_multiset(consolidate_sorted(table)) == as_multiset(consolidate(table))


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
