"""Consolidation by runs of one numeric key (catalog.consolidate.consolidate_by_runs) and the
chunk-wise gather and range-slicing filter under it, against the hash reference."""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.consolidate import (
    DIFF,
    TS,
    consolidate,
    consolidate_by_runs,
    consolidate_hashed,
    consolidate_sorted,
    gather,
)
from catalog.consolidate import columns as tuning
from support.shards import as_bits

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("at", pa.timestamp("ms", tz="UTC")),
        pa.field(TS, pa.uint64()),
        pa.field(DIFF, pa.int64()),
    ]
)
ROW = st.fixed_dictionaries(
    {
        "id": st.one_of(st.none(), st.integers(0, 60)),
        "name": st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab"])),
        "score": st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, math.nan])),
        "at": st.one_of(st.none(), st.integers(0, 2)),
        TS: st.integers(0, 2),
        DIFF: st.sampled_from([1, -1, 2, 0]),
    }
)


@st.composite
def histories(draw: st.DrawFn) -> pa.Table:
    """Rows with the shapes a shard's history has: unique rows, a row and its retraction
    (pairs), updates (a key's old row retracted and a new one inserted: runs of three or
    more), pairs equal on the key only; in several chunks, some empty."""
    rows: list[dict[str, Any]] = draw(st.lists(ROW, max_size=40))
    for index in draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=15)):
        if not rows:
            break
        twin = dict(rows[index])
        kind = draw(st.sampled_from(["retract", "again", "update", "key-only"]))
        if kind == "retract":
            twin[DIFF] = -twin[DIFF]
        elif kind == "update":
            rows.append({**twin, DIFF: -twin[DIFF]})
            twin["name"] = draw(st.sampled_from(["c", None]))
        elif kind == "key-only":
            twin["score"] = 7.0
        rows.append(twin)
    order = draw(st.permutations(range(len(rows))))
    table = pa.Table.from_pylist([rows[i] for i in order], schema=SCHEMA)
    cuts = sorted(draw(st.lists(st.integers(0, table.num_rows), max_size=4)))
    bounds = [0, *cuts, table.num_rows]
    return pa.concat_tables([table.slice(a, b - a) for a, b in itertools.pairwise(bounds)])


@settings(max_examples=400, deadline=None)
@given(table=histories(), threads=st.booleans(), slices=st.booleans())
def test_runs_consolidation_equals_hash_consolidation(
    table: pa.Table, threads: bool, slices: bool
) -> None:
    """Whatever path each run takes (single, pair, long run), on one or two threads, copied
    or sliced: the same rows and diffs as hash consolidation, bitwise, and the same schema."""
    expected = as_bits(consolidate_hashed(table))
    with (
        mock.patch.object(tuning, "RUNS_MIN_ROWS", 0),
        mock.patch.object(tuning, "PARALLEL_MIN_ROWS", 0 if threads else 1 << 40),
        mock.patch.object(tuning, "SLICE_MIN_ROWS", 1 if slices else 1 << 40),
    ):
        by_runs = consolidate_by_runs(table)
        if by_runs is not None:
            assert by_runs.schema == table.schema
            assert as_bits(by_runs) == expected
        assert as_bits(consolidate(table)) == expected


def test_a_null_key_and_a_zero_key_stay_apart() -> None:
    """The key's NumPy view maps null to 0; the pair is compared on the key itself."""
    table = pa.Table.from_pylist(
        [
            {"id": None, "name": "a", "score": 1.0, "at": 0, TS: 0, DIFF: 1},
            {"id": 0, "name": "a", "score": 1.0, "at": 0, TS: 0, DIFF: -1},
            *({"id": i, "name": "x", "score": 0.0, "at": 0, TS: 0, DIFF: 1} for i in range(1, 9)),
        ],
        schema=SCHEMA,
    )
    out = consolidate_by_runs(table)
    assert out is not None
    assert out.num_rows == 10
    assert as_bits(out) == as_bits(consolidate_hashed(table))


def test_float_keys_compare_as_values_on_every_algorithm() -> None:
    """0.0 equals -0.0 and every NaN equals every NaN (sign and payload bits aside), on all
    three algorithms; the kept rows hold the normalized value (0.0, the canonical NaN)."""
    schema = pa.schema([pa.field("f", pa.float64()), pa.field(DIFF, pa.int64())])
    other_nan = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]
    values = [0.0, -0.0, math.nan, other_nan, -0.0, -0.0, *range(1, 9)]
    diffs = [1, -1, 1, -1, 1, 1, *[1] * 8]
    table = pa.table({"f": values, DIFF: diffs}, schema=schema)
    by_runs = consolidate_by_runs(table)
    assert by_runs is not None
    for out in (by_runs, consolidate_sorted(table), consolidate_hashed(table)):
        rows = {
            struct.pack(">d", v).hex(): d for v, d in zip(*out.to_pydict().values(), strict=True)
        }
        assert rows.pop("0000000000000000") == 2  # the -0.0 pair, as 0.0
        assert len(rows) == 8 and not any(math.isnan(float(v)) for v in out.column("f").to_pylist())


def test_float_normalization_reaches_nested_values() -> None:
    """A struct, a list and a map value holding -0.0 consolidate with the same row at 0.0."""
    dtype = pa.struct(
        [
            pa.field("x", pa.float32()),
            pa.field("l", pa.list_(pa.float64())),
            pa.field("m", pa.map_(pa.string(), pa.float64())),
        ]
    )
    schema = pa.schema([pa.field("s", dtype), pa.field(DIFF, pa.int64())])
    plus = {"x": 0.0, "l": [0.0, math.nan], "m": [("k", 0.0)]}
    minus = {"x": -0.0, "l": [-0.0, -math.nan], "m": [("k", -0.0)]}
    table = pa.table({"s": [plus, minus], DIFF: [1, -1]}, schema=schema)
    assert consolidate(table).num_rows == 0
    kept = consolidate(table.slice(1)).column("s").to_pylist()[0]
    assert math.copysign(1, kept["x"]) == 1 and math.copysign(1, kept["l"][0]) == 1


@pytest.mark.parametrize("nested", [False, True])
def test_a_large_table_normalizes_its_floats_once_for_every_path(nested: bool) -> None:
    """Past RUNS_MIN_ROWS, consolidate normalizes the floats once and tells the flat
    algorithms so (the nested stand-ins and the fallback to sorting included): -0.0 still
    cancels 0.0 and NaN cancels NaN, as hash grouping has it, and the kept floats are
    normalized."""
    count = tuning.RUNS_MIN_ROWS * 2
    ids = np.arange(count) // 2  # every id twice: a row and its retraction, at -0.0 / NaN
    floats = np.where(ids % 3 == 0, np.nan, 0.0)
    signed = np.where(np.arange(count) % 2 == 0, floats, -floats)
    signed[-4:] = -0.0  # two rows kept at -0.0: they come out as 0.0
    diffs = np.where(np.arange(count) % 2 == 0, 1, -1)
    diffs[-4:] = 1
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "f": pa.array(signed)}
    if nested:
        columns["s"] = pa.StructArray.from_arrays([pa.array(signed)], names=["x"])
    columns[DIFF] = pa.array(diffs, pa.int64())
    table = pa.table(columns)
    out = consolidate(table)
    assert as_bits(out.select(["id", "f", DIFF])) == as_bits(
        consolidate_hashed(table).select(["id", "f", DIFF])
    )
    assert out.num_rows == 2
    assert all(math.copysign(1, v) == 1 for v in out.column("f").to_pylist())
    if nested:
        assert all(math.copysign(1, v["x"]) == 1 for v in out.column("s").to_pylist())


def test_a_repetitive_key_falls_back_to_sorting() -> None:
    """No key column separates the rows (every numeric column is nearly constant): None,
    and consolidate still gives the hash result."""
    count = 10_000
    table = pa.table(
        {
            "flag": pa.array(np.arange(count) % 2, pa.int8()),
            "name": pa.array([f"n{i % 700}" for i in range(count)]),
            DIFF: pa.array(np.where(np.arange(count) % 3 == 0, -1, 1), pa.int64()),
        }
    )
    assert consolidate_by_runs(table) is None
    assert as_bits(consolidate(table)) == as_bits(consolidate_hashed(table))


def test_large_history_takes_the_runs_path_on_two_threads() -> None:
    """A history like the benchmark's, big enough for threads and slicing by default."""
    batches = []
    rows = 300_000
    for index in range(6):
        numbers = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
        inserted = {
            "id": numbers,
            "name": pa.array([f"object_{n}" for n in numbers]),
            DIFF: np.ones(rows, dtype=np.int64),
        }
        batches.append(pa.table(inserted))
        if index:
            back = numbers[: rows // 10] - rows
            retracted = {
                "id": back,
                "name": pa.array([f"object_{n}" for n in back]),
                DIFF: -np.ones(len(back), dtype=np.int64),
            }
            batches.append(pa.table(retracted))
    table = pa.concat_tables(batches)
    assert table.num_rows >= tuning.PARALLEL_MIN_ROWS
    out = consolidate_by_runs(table)
    assert out is not None
    assert out.num_rows == 6 * rows - 5 * (rows // 10)
    assert pa.compute.min(out.column(DIFF)).as_py() == 1
    assert len(set(out.column("id").to_pylist())) == out.num_rows


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=4),
    data=st.data(),
)
def test_gather_equals_take(values: list[str | None], cuts: list[int], data: st.DataObject) -> None:
    bounds = [0, *sorted(min(c, len(values)) for c in cuts), len(values)]
    column = pa.chunked_array(
        [pa.array(values[a:b], pa.string()) for a, b in itertools.pairwise(bounds)],
        pa.string(),
    )
    indices = np.array(
        data.draw(st.lists(st.integers(0, max(len(values) - 1, 0)), max_size=20)) if values else [],
        dtype=np.int64,
    )
    assert gather.gather_column(column, indices).to_pylist() == [values[i] for i in indices]


@settings(max_examples=300, deadline=None)
@given(table=histories(), data=st.data())
def test_pairs_compare_alike_by_numpy_and_by_arrow(table: pa.Table, data: st.DataObject) -> None:
    """equal_pairs on key columns as compared_as makes them (a numeric view and validity, or
    nothing when all null) says what Arrow's gather says, and what the rows' values say:
    nulls equal to nulls only, floats bitwise."""
    count = table.num_rows
    row = st.integers(0, max(count - 1, 0))
    pairs = data.draw(st.lists(st.tuples(row, row), max_size=30)) if count else []
    left = np.array([a for a, _ in pairs], dtype=np.int64)
    right = np.array([b for _, b in pairs], dtype=np.int64)
    columns = [table.column(n) for n in ("id", "score", "at")]
    columns.append(pa.chunked_array([pa.nulls(count, pa.int64())]))  # every value null
    by_numpy = gather.equal_pairs([gather.compared_as(c, 1 << 40) for c in columns], left, right)
    by_arrow = gather.equal_pairs([gather.compared_as(c, 0) for c in columns], left, right)
    rows = list(zip(*[_bits(c) for c in columns], strict=True))
    expected = [rows[a] == rows[b] for a, b in zip(left, right, strict=True)]
    assert by_numpy.tolist() == by_arrow.tolist() == expected


def _bits(column: pa.ChunkedArray) -> list[Any]:
    """A column's values, floats as their bits (None for null)."""
    values = column.to_pylist()
    if pa.types.is_floating(column.type):
        return [None if v is None else struct.pack("<d", v) for v in values]
    return values


@settings(max_examples=200, deadline=None)
@given(keep=st.lists(st.booleans(), max_size=40), sliced=st.booleans())
def test_select_equals_filter(keep: list[bool], sliced: bool) -> None:
    table = pa.table({"n": pa.array(range(len(keep)), pa.int64())})
    mask = np.array(keep, dtype=bool)
    with mock.patch.object(tuning, "SLICE_MIN_ROWS", 1 if sliced else 1 << 40):
        assert gather.select_rows(table, mask).column("n").to_pylist() == [
            i for i, k in enumerate(keep) if k
        ]


@pytest.mark.parametrize("count", [0, 1, 2])
def test_tiny_tables(count: int) -> None:
    table = pa.table(
        {"id": pa.array(range(count), pa.int64()), DIFF: pa.array([1] * count, pa.int64())}
    )
    by_runs = consolidate_by_runs(table)
    if count < 2:
        assert by_runs is None
    else:
        assert by_runs is not None and by_runs.equals(table)
    assert consolidate(table).num_rows == count
