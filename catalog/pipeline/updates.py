"""Reading a shard's updates in a time range, migrated to one schema (what a copy moves)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from catalog.pipeline.pacing import Pacer
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


#: Batches read together (in parallel) as one chunk of a paced read.
PACED_BATCHES = 4


def read_updates(
    shard: Shard,
    state: ShardState,
    lower: int,
    upper: int,
    schema: pa.Schema | None = None,
    *,
    pacer: Pacer | None = None,
) -> pa.Table:
    """The shard's updates with ``lower <= _ts < upper``, unconsolidated, in ``schema``.

    ``schema`` defaults to the state's latest live schema; batches are read one schema id at a
    time (in parallel) and migrated from it. Batches entirely outside the range are not read.
    With ``pacer``, the read is a step's: it expects the batches' rows and advances by chunks
    of :data:`PACED_BATCHES` batches (throttled, held while paused).
    """
    if pacer is not None:
        pacer.expect(expected_rows(shard, state, lower, upper))
    tables = []
    chunks = update_chunks(
        shard, state, lower, upper, schema, batches=None if pacer is None else PACED_BATCHES
    )
    for table, rows in chunks:
        tables.append(table)
        if pacer is not None:
            pacer.advance(rows, table.nbytes)
    out_schema = copy_schema(state.live_schema if schema is None else schema)
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables(tables)


def expected_rows(shard: Shard, state: ShardState, lower: int, upper: int) -> int:
    """The rows of the batches a read of ``[lower, upper)`` reads (before the cut to it)."""
    return sum(r.rows for r in shard.batches(state) if overlaps(r, lower, upper))


def update_chunks(
    shard: Shard,
    state: ShardState,
    lower: int,
    upper: int,
    schema: pa.Schema | None = None,
    *,
    batches: int | None = None,
) -> Iterator[tuple[pa.Table, int]]:
    """The updates of :func:`read_updates`, a chunk of ``batches`` batches at a time (None: the
    batches of one schema id together), each in ``copy_schema(schema)``, with the rows of the
    batches it read (what a paced step counts)."""
    target = state.live_schema if schema is None else schema
    out_schema = copy_schema(target)
    groups = by_writer([r for r in shard.batches(state) if overlaps(r, lower, upper)])
    for (schema_id, _), every in sorted(groups.items()):
        step = batches or len(every)
        for start in range(0, len(every), step):
            refs = every[start : start + step]
            table = _read(shard, state, refs, schema_id, lower, upper, target)
            yield table.select(out_schema.names).cast(out_schema), sum(r.rows for r in refs)


def _read(
    shard: Shard,
    state: ShardState,
    refs: list[BatchRef],
    schema_id: int,
    lower: int,
    upper: int,
    target: pa.Schema,
) -> pa.Table:
    """``refs`` (written under ``schema_id``) read, cut to ``[lower, upper)``, in ``target``."""
    source = state.live(schema_id)
    table = read_batches(shard.blob, shard.shard_id, refs, source, update_schema(source).names)
    if any(r.lower < lower or r.upper > upper for r in refs):
        ts = table.column(TS)
        keep = pc.and_(
            pc.greater_equal(ts, pa.scalar(lower, pa.uint64())),
            pc.less(ts, pa.scalar(upper, pa.uint64())),
        )
        table = table.filter(keep)
    return migrate_batch(table, source, target)


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
