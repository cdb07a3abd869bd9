"""catalog.shard consolidation: vectorized, nested types included, equal to a plain reference."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import ShardError
from catalog.shard import DIFF, TS, advance_times, consolidate, update_schema

STRUCT = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
COLUMNS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "i": (pa.int64(), [None, 0, 1]),
    "s": (pa.string(), [None, "", "x"]),
    "st": (STRUCT, [None, {"a": None, "b": None}, {"a": 0, "b": None}, {"a": 0, "b": "x"}]),
    "ls": (pa.list_(pa.int64()), [None, [], [None], [0], [0, 1], [1, 0]]),
    "lls": (pa.large_list(pa.string()), [None, [], ["a"], ["a", None]]),
    "fx": (pa.list_(pa.int64(), 2), [None, [0, 0], [0, None], [None, 0]]),
    "m": (pa.map_(pa.string(), pa.int64()), [None, [], [("k", 1)], [("k", None)], [("j", 1)]]),
    "nested": (
        pa.list_(STRUCT),
        [None, [], [None], [{"a": None, "b": None}], [{"a": 1, "b": "y"}, None]],
    ),
    "deep": (
        pa.struct([pa.field("l", pa.list_(pa.int64())), pa.field("t", STRUCT)]),
        [None, {"l": None, "t": None}, {"l": [], "t": None}, {"l": [1], "t": {"a": 1, "b": "q"}}],
    ),
}


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def reference(table: pa.Table) -> dict[Any, int]:
    """Plain-Python consolidation: sum diffs per distinct (row, _ts), drop zeros."""
    names = [n for n in table.column_names if n != DIFF]
    out: dict[Any, int] = {}
    for row in table.to_pylist():
        key = tuple(_hashable(row[n]) for n in names)
        out[key] = out.get(key, 0) + row[DIFF]
    return {k: v for k, v in out.items() if v}


def as_dict(table: pa.Table) -> dict[Any, int]:
    names = [n for n in table.column_names if n != DIFF]
    keys = [tuple(_hashable(row[n]) for n in names) for row in table.to_pylist()]
    assert len(set(keys)) == len(keys), "consolidated output repeats a row"
    return dict(zip(keys, table.column(DIFF).to_pylist(), strict=True))


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=3, unique=True))
    schema = pa.schema([pa.field(n, COLUMNS[n][0]) for n in names])
    count = draw(st.integers(0, 40))
    data: dict[str, Any] = {
        n: [draw(st.sampled_from(COLUMNS[n][1])) for _ in range(count)] for n in names
    }
    data[TS] = [draw(st.integers(0, 1)) for _ in range(count)]
    data[DIFF] = [draw(st.sampled_from([1, -1, 2])) for _ in range(count)]
    table = pa.Table.from_pydict(data, schema=update_schema(schema))
    split = draw(st.integers(0, count))  # several chunks and sliced arrays
    return pa.concat_tables([table.slice(0, split), table.slice(split)])


@settings(max_examples=300, deadline=None)
@given(table=tables())
def test_consolidate_matches_the_reference(table: pa.Table) -> None:
    """For flat and nested columns, chunked and sliced, consolidate equals the reference."""
    result = consolidate(table)
    assert result.schema.equals(table.schema)
    assert as_dict(result) == reference(table)


def test_null_struct_differs_from_struct_of_nulls() -> None:
    """A null struct and a struct whose fields are all null are different rows."""
    schema = update_schema(pa.schema([pa.field("st", STRUCT)]))
    table = pa.Table.from_pydict(
        {"st": [None, {"a": None, "b": None}], TS: [0, 0], DIFF: [1, 1]}, schema=schema
    )
    assert consolidate(table).num_rows == 2


def test_null_list_differs_from_empty_list() -> None:
    """A null list and an empty list are different rows; equal lists merge."""
    schema = update_schema(pa.schema([pa.field("ls", pa.list_(pa.int64()))]))
    table = pa.Table.from_pydict(
        {"ls": [None, [], [], None], TS: [0, 0, 0, 0], DIFF: [1, 1, 1, -1]}, schema=schema
    )
    assert as_dict(consolidate(table)) == {((), 0): 2}


def test_times_keep_rows_apart_until_advanced() -> None:
    """Identical rows at different times stay apart; advancing below since merges them."""
    schema = update_schema(pa.schema([pa.field("i", pa.int64())]))
    table = pa.Table.from_pydict({"i": [1, 1, 1], TS: [1, 2, 5], DIFF: [1, 1, 1]}, schema=schema)
    assert consolidate(table).num_rows == 3
    advanced = consolidate(advance_times(table, 3))
    assert as_dict(advanced) == {(1, 3): 2, (1, 5): 1}


def test_only_diff_and_time_columns() -> None:
    """A schema without columns still consolidates by time."""
    table = pa.Table.from_pydict(
        {TS: [0, 0, 1], DIFF: [1, -1, 3]}, schema=update_schema(pa.schema([]))
    )
    assert as_dict(consolidate(table)) == {(1,): 3}


def test_union_columns_are_refused() -> None:
    """Types consolidation cannot key on are refused with a clear reason."""
    union = pa.array([1], pa.int64())
    dense = pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [union])
    table = pa.table({"u": dense, TS: pa.array([0], pa.uint64()), DIFF: pa.array([1], pa.int64())})
    table = pa.concat_tables([table, table])
    with pytest.raises(ShardError) as info:
        consolidate(table)
    assert info.value.details["reason"] == "unsupported-type"
