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


#: Batches read together (in parallel) as one chunk of a paced read, and the most rows a
#: chunk goes on with (a larger one is cut): how often a paced step reports, is throttled and
#: may be held.
PACED_BATCHES = 4
PACED_ROWS = 65_536


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
        shard, state, lower, upper, schema,
        batches=None if pacer is None else PACED_BATCHES,
        rows=None if pacer is None else PACED_ROWS,
    )  # fmt: skip
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
    rows: int | None = None,
) -> Iterator[tuple[pa.Table, int]]:
    """The updates of :func:`read_updates`, a chunk of ``batches`` batches at a time (None: the
    batches of one schema id together), cut into pieces of at most ``rows`` rows, each in
    ``copy_schema(schema)``, with the stored rows it stands for (what a paced step counts: the
    last piece of a chunk also counts the rows the cut to ``[lower, upper)`` left out)."""
    target = state.live_schema if schema is None else schema
    out_schema = copy_schema(target)
    groups = by_writer([r for r in shard.batches(state) if overlaps(r, lower, upper)])
    for (schema_id, _), every in sorted(groups.items()):
        step = batches or len(every)
        for start in range(0, len(every), step):
            refs = every[start : start + step]
            table = _read(shard, state, refs, schema_id, lower, upper, target)
            table = table.select(out_schema.names).cast(out_schema)
            stored = sum(r.rows for r in refs)
            size = rows or max(1, table.num_rows)
            pieces = [table.slice(at, size) for at in range(0, table.num_rows, size)] or [table]
            for piece in pieces[:-1]:
                stored -= piece.num_rows
                yield piece, piece.num_rows
            yield pieces[-1], stored


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
