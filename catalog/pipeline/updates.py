"""Reading a shard's updates in a time range, migrated to one schema (what a copy moves)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from catalog.schema import migrate_batch
from catalog.shard import (
    DIFF,
    TS,
    BatchRef,
    Shard,
    ShardState,
    update_schema,
)
from catalog.shard.read import by_writer, read_batches


def overlaps(ref: BatchRef, lower: int, upper: int) -> bool:
    return ref.lower < upper and ref.upper > lower


def read_updates(
    shard: Shard, state: ShardState, lower: int, upper: int, schema: pa.Schema | None = None
) -> pa.Table:
    """The shard's updates with ``lower <= _ts < upper``, unconsolidated, in ``schema``.

    ``schema`` defaults to the state's latest live schema; batches are read one schema id at a
    time (in parallel) and migrated from it. Batches entirely outside the range are not read.
    """
    target = state.live_schema if schema is None else schema
    groups = by_writer([r for r in shard.batches(state) if overlaps(r, lower, upper)])
    tables = []
    for (schema_id, _), refs in sorted(groups.items()):
        source = state.live(schema_id)
        table = read_batches(shard.blob, shard.shard_id, refs, source, update_schema(source).names)
        if any(r.lower < lower or r.upper > upper for r in refs):
            ts = table.column(TS)
            keep = pc.and_(
                pc.greater_equal(ts, pa.scalar(lower, pa.uint64())),
                pc.less(ts, pa.scalar(upper, pa.uint64())),
            )
            table = table.filter(keep)
        tables.append(migrate_batch(table, state.live(schema_id), target))
    out_schema = copy_schema(target)
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables([t.select(out_schema.names) for t in tables]).cast(out_schema)


def copy_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus nullable ``_ts``/``_diff`` (what a copy passes to compare_and_append)."""
    return pa.schema([*schema, pa.field(TS, pa.uint64()), pa.field(DIFF, pa.int64())])


def estimated_bytes(state: ShardState) -> int:
    """The shard's data in memory, estimated from its row count and latest schema."""
    return state.row_count * (sum(_width(f.type) for f in state.live_schema) + 16)


def _width(dtype: pa.DataType) -> int:
    if pa.types.is_struct(dtype):
        return sum(_width(f.type) for f in dtype) + 1
    if pa.types.is_map(dtype):
        return 4 * (_width(dtype.key_type) + _width(dtype.item_type)) + 4
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return 4 * _width(dtype.value_type) + 8
    try:
        return max(1, dtype.bit_width // 8)
    except ValueError:  # variable width: strings, binary
        return 32
