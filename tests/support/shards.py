"""Helpers for shard tests: update tables and an order-free view of snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from catalog.shard import DIFF, TS, update_schema


def updates(
    schema: pa.Schema,
    rows: Sequence[Mapping[str, Any]],
    ts: int | Sequence[int],
    diff: int | Sequence[int] = 1,
) -> pa.Table:
    """A batch of ``rows`` (dicts by column) of ``schema`` at time(s) ``ts``, diff(s) ``diff``."""
    count = len(rows)
    times = [ts] * count if isinstance(ts, int) else list(ts)
    diffs = [diff] * count if isinstance(diff, int) else list(diff)
    data: dict[str, list[Any]] = {f.name: [r.get(f.name) for r in rows] for f in schema}
    data[TS] = times
    data[DIFF] = diffs
    return pa.Table.from_pydict(data, schema=update_schema(schema))


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def canonical(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as hashable tuples, sorted (snapshots have no defined order)."""
    rows = [tuple(_hashable(row[n]) for n in table.column_names) for row in table.to_pylist()]
    return sorted(rows, key=repr)


def contents(table: pa.Table) -> dict[Any, int]:
    """A snapshot as {row without _ts/_diff: diff}."""
    names = [n for n in table.column_names if n not in (TS, DIFF)]
    out: dict[Any, int] = {}
    for row in table.to_pylist():
        key = tuple(_hashable(row[n]) for n in names)
        out[key] = out.get(key, 0) + row[DIFF]
    return out


def as_bits(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows with floats as their bit patterns, in a canonical order (the multiset of rows)."""
    columns = []
    for column in table.columns:
        if pa.types.is_floating(column.type):
            width = pa.int64() if column.type.bit_width == 64 else pa.int32()
            column = pa.chunked_array([c.view(width) for c in column.chunks], width)
        columns.append(column.to_pylist())
    return sorted(zip(*columns, strict=True), key=repr)
