"""The data pipeline: snapshot with lazy migration, compaction, and the REWRITE copy (DESIGN §7).

Every job exists on two engines behind one interface, :class:`Engine`:

* :class:`ArrowEngine` runs in process with pyarrow (the shard module's own read and compaction
  paths), for shards that fit in memory;
* :class:`SparkEngine` runs the same jobs as PySpark DataFrames over the same Parquet blobs (the
  blob store's URI; a local directory is read by absolute ``file://`` path), so shards larger
  than one machine's memory can be read, compacted and copied.

``engine="auto"`` picks Spark when a shard holds more than :data:`AUTO_SPARK_ROWS` rows. Both
engines give identical results: batches are migrated lazily from their own schema id to the
reader's schema (added fields as typed nulls, deleted fields dropped, at any depth), then
consolidated (identical ``(row, _ts)`` have their ``_diff`` summed, zeros dropped).

REWRITE (:func:`copy_transformed`): the target shard's ``upper`` records how far the source has
been copied, so a copy reads only the source updates with ``_ts`` in ``[target.upper,
source.upper)``, runs the release's transforms on them and compare-and-appends the result with
``expected_upper=target.upper, new_upper=source.upper``. Run read-only, it copies the source as
of its current upper; run again by the promoted leader (whose epoch fences the old writer), it
copies only the delta, so cutover costs the delta, not the shard. A lost append race re-reads and
copies what is still missing, so concurrent copies never duplicate a row.

Spark specifics (see :class:`SparkSessionProvider`): one session per process, quiet logs, UTC
session time zone, Arrow transfer on. Arrow types Spark lacks are mapped on the way in (unsigned
integers widen, ``_ts`` is read as ``decimal(20,0)`` and carried as a long) and restored exactly
on the way out, so a transform sees the same Arrow types on both engines. Spark cannot group by
map columns: consolidation groups such columns by their JSON text (``to_json``, injective for a
fixed schema and order-preserving like the arrow engine's value ids) and keeps the map itself
with ``first``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from catalog.consensus import Fence
from catalog.errors import BadInputError, ShardError
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, BatchRef, Shard, ShardState, consolidate

__all__ = [
    "AUTO_SPARK_ROWS",
    "ENGINES",
    "ArrowEngine",
    "Engine",
    "Transform",
    "copy_transformed",
]

log = structlog.get_logger(__name__)

#: A REWRITE transformation (``catalog.release.Transform``): one batch to one batch, row for row.
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]

ENGINES = ("arrow", "spark", "auto")
#: ``auto`` runs a job on Spark when the shard holds more rows than this.
AUTO_SPARK_ROWS = 20_000_000
# A copy re-reads and retries when another process moved the target's upper first.
_COPY_ATTEMPTS = 20


class Engine(Protocol):
    """What both engines do; results are identical whichever runs them."""

    @property
    def name(self) -> str:
        """``arrow`` or ``spark``."""
        ...

    def snapshot(
        self, shard: Shard, as_of: int | None = None, reader_schema: pa.Schema | None = None
    ) -> pa.Table:
        """The shard as of ``as_of`` in ``reader_schema``, consolidated (``Shard.snapshot``)."""
        ...

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
    ) -> int:
        """See :func:`copy_transformed`."""
        ...


# --- transforms -------------------------------------------------------------------------------


def transform_name(transform: Transform) -> str:
    """How errors name a transform: its module and qualified name."""
    module = getattr(transform, "__module__", None)
    name = getattr(transform, "__qualname__", None) or repr(transform)
    return f"{module}.{name}" if module else name


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, what: str) -> pa.RecordBatch:
    """``batch`` relabelled as exactly ``schema``, or ShardError (reason ``transform-output``).

    Column names and order must match and types must be equal (list element names aside); a
    column with nulls under a non-nullable field is refused. ``what`` names the producer.
    """
    if batch.schema.names != schema.names:
        raise ShardError(
            f"{what} returned columns {batch.schema.names}, the new schema has {schema.names}",
            reason="transform-output",
            transform=what,
            columns=batch.schema.names,
            expected=schema.names,
        )
    columns = []
    for field, column in zip(schema, batch.columns, strict=True):
        if column.type != field.type:
            raise ShardError(
                f"{what} returned column {field.name} as {column.type}, the new schema has "
                f"{field.type}",
                reason="transform-output",
                transform=what,
                column=field.name,
                type=str(column.type),
                expected=str(field.type),
            )
        if not field.nullable and column.null_count:
            raise ShardError(
                f"{what} returned nulls in non-nullable column {field.name}",
                reason="transform-output",
                transform=what,
                column=field.name,
            )
        # Equal types may still differ in list element names, which from_arrays rejects.
        columns.append(column if column.type.equals(field.type) else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def apply_transforms(
    batch: pa.RecordBatch, transforms: Sequence[Transform], new_schema: pa.Schema
) -> pa.RecordBatch:
    """Run ``transforms`` in order on an update batch; ``_ts``/``_diff`` pass through untouched.

    ``batch`` holds the source's live columns plus ``_ts`` and ``_diff``; each transform gets a
    RecordBatch of the data columns only and must return one with as many rows. The last output
    must match ``new_schema`` (:func:`conform_batch`). Errors name the offending transform.
    """
    names = [n for n in batch.schema.names if n not in (TS, DIFF)]
    data = batch.select(names)
    for transform in transforms:
        what = transform_name(transform)
        rows = data.num_rows
        try:
            out = transform(data)
        except Exception as exc:  # the user's code: report which transform failed and why
            raise ShardError(
                f"transform {what} failed: {type(exc).__name__}: {exc}",
                reason="transform-failed",
                transform=what,
            ) from exc
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else _empty_batch(out.schema)
        if not isinstance(out, pa.RecordBatch):
            raise ShardError(
                f"transform {what} returned {type(out).__name__}, not a pyarrow.RecordBatch",
                reason="transform-output",
                transform=what,
            )
        if out.num_rows != rows:
            raise ShardError(
                f"transform {what} returned {out.num_rows} rows for {rows}: a REWRITE transform "
                "maps each row to one row",
                reason="transform-output",
                transform=what,
                rows=out.num_rows,
                expected_rows=rows,
            )
        data = out
    last = transform_name(transforms[-1]) if transforms else "the identity transform"
    data = conform_batch(data, new_schema, last)
    return pa.RecordBatch.from_arrays(
        [*data.columns, batch.column(TS), batch.column(DIFF)],
        schema=pa.schema([*new_schema, batch.schema.field(TS), batch.schema.field(DIFF)]),
    )


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


# --- arrow engine -----------------------------------------------------------------------------


def _overlaps(ref: BatchRef, lower: int, upper: int) -> bool:
    return ref.lower < upper and ref.upper > lower


def read_updates(
    shard: Shard, state: ShardState, lower: int, upper: int, schema: pa.Schema | None = None
) -> pa.Table:
    """The shard's updates with ``lower <= _ts < upper``, unconsolidated, in ``schema``.

    ``schema`` defaults to the state's latest live schema; batches are read one schema id at a
    time (in parallel) and migrated from it. Batches entirely outside the range are not read.
    """
    target = state.live_schema if schema is None else schema
    groups: dict[int, list[BatchRef]] = {}
    for ref in shard.batches(state):
        if _overlaps(ref, lower, upper):
            groups.setdefault(ref.schema_id, []).append(ref)
    tables = []
    for schema_id, refs in sorted(groups.items()):
        table = shard.blob.get_batches(
            [r.key(shard.shard_id) for r in refs], expected_rows=[r.rows for r in refs]
        )
        if any(r.lower < lower or r.upper > upper for r in refs):
            ts = table.column(TS)
            keep = pc.and_(
                pc.greater_equal(ts, pa.scalar(lower, pa.uint64())),
                pc.less(ts, pa.scalar(upper, pa.uint64())),
            )
            table = table.filter(keep)
        tables.append(migrate_batch(table, state.live(schema_id), target))
    out_schema = _update_schema(target)
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables([t.select(out_schema.names) for t in tables]).cast(out_schema)


def _update_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus nullable ``_ts``/``_diff`` (what a copy passes to compare_and_append)."""
    return pa.schema([*schema, pa.field(TS, pa.uint64()), pa.field(DIFF, pa.int64())])


def transform_table(
    table: pa.Table, transforms: Sequence[Transform], new_schema: pa.Schema
) -> pa.Table:
    """:func:`apply_transforms` over every batch of ``table``."""
    batches = [
        apply_transforms(b, transforms, new_schema) for b in table.to_batches() if b.num_rows
    ]
    return pa.Table.from_batches(batches, schema=_update_schema(new_schema))


@attrs.frozen
class _CopyPlan:
    """One attempt of a copy: the frontiers read and whether times are still distinguishable."""

    source: ShardState
    target: ShardState

    @property
    def lower(self) -> int:
        return self.target.upper

    @property
    def upper(self) -> int:
        return self.source.upper

    @property
    def by_diff(self) -> bool:
        """True when compaction advanced source times past the target's upper.

        Rows already copied may then carry a time at or above ``lower``, so the delta cannot be
        selected by time: it is the transformed source minus what the target holds.
        """
        return self.lower > 0 and self.source.since > self.lower


def _plan_copy(source: Shard, target: Shard) -> _CopyPlan | None:
    """The next copy attempt, or None when the target has seen all of the source."""
    plan = _CopyPlan(source=source.state(), target=target.state())
    if plan.lower > plan.upper:
        raise ShardError(
            f"shard {target.shard_id} is ahead of its source {source.shard_id} "
            f"({plan.lower} > {plan.upper}): it is not a copy of it",
            reason="target-ahead",
            shard=target.shard_id,
            source=source.shard_id,
            upper=plan.lower,
            source_upper=plan.upper,
        )
    return None if plan.lower == plan.upper else plan


def _diff_delta(
    source: Shard,
    target: Shard,
    plan: _CopyPlan,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
) -> pa.Table:
    """The delta as ``transform(source) - target``, all at time ``upper - 1`` (see by_diff)."""
    at = pa.scalar(plan.upper - 1, pa.uint64())
    full = transform_table(read_updates(source, plan.source, 0, plan.upper), transforms, new_schema)
    held = read_updates(target, plan.target, 0, plan.lower, new_schema)
    held = held.set_column(held.schema.get_field_index(DIFF), DIFF, pc.negate(held.column(DIFF)))
    both = pa.concat_tables([full, held.cast(full.schema)])
    both = both.set_column(both.schema.get_field_index(TS), TS, pa.repeat(at, both.num_rows))
    return consolidate(both)


def copy_arrow(
    source: Shard,
    target: Shard,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
    *,
    fence: Fence | None,
) -> int:
    """:func:`copy_transformed` in process."""
    for _ in range(_COPY_ATTEMPTS):
        plan = _plan_copy(source, target)
        if plan is None:
            return 0
        if plan.by_diff:
            out = _diff_delta(source, target, plan, transforms, new_schema)
        else:
            updates = read_updates(source, plan.source, plan.lower, plan.upper)
            out = transform_table(updates, transforms, new_schema)
        result = _append_copy(target, plan, out, fence)
        if result:
            return out.num_rows
    raise ShardError(
        f"copying {source.shard_id} into {target.shard_id} kept losing append races",
        reason="contended",
        shard=target.shard_id,
        source=source.shard_id,
    )


def _append_copy(target: Shard, plan: _CopyPlan, out: pa.Table, fence: Fence | None) -> bool:
    """Compare-and-append one copy attempt; False when another copier moved the target first."""
    result = target.compare_and_append(out, plan.lower, plan.upper, fence=fence)
    log.info(
        "rewrite_append",
        source=plan.source.shard_id,
        target=target.shard_id,
        lower=plan.lower,
        upper=plan.upper,
        rows=out.num_rows,
        by_diff=plan.by_diff,
        ok=result.ok,
    )
    return result.ok


@attrs.frozen
class ArrowEngine:
    """The in-process engine: the shard module's own pyarrow paths."""

    name: str = "arrow"

    def snapshot(
        self, shard: Shard, as_of: int | None = None, reader_schema: pa.Schema | None = None
    ) -> pa.Table:
        return shard.snapshot(as_of, reader_schema)

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
    ) -> int:
        return copy_arrow(source, target, transforms, new_schema, fence=fence)


# --- entry points -----------------------------------------------------------------------------


def copy_transformed(
    source: Shard,
    target: Shard,
    transforms: Sequence[Callable[[pa.RecordBatch], pa.RecordBatch]],
    new_schema: pa.Schema,
    *,
    fence: Fence | None,
    engine: str = "auto",
) -> int:
    """Copy the source updates the target has not seen yet, transformed; return the row count.

    Reads the source's updates with ``_ts`` in ``[target.upper, source.upper)`` (each batch
    migrated from its schema id to the source's latest live schema), runs ``transforms`` in order
    on their columns (``_ts``/``_diff`` carried alongside untouched), checks the result against
    ``new_schema`` (ShardError naming the transform otherwise) and compare-and-appends it to
    ``target`` moving its upper to the source's, fenced by ``fence``. Idempotent: when the target's
    upper already equals the source's it returns 0. Transforms must be deterministic and map each
    row to one row.
    """
    chosen = _resolve_engine(engine, source)
    return chosen.copy_transformed(source, target, transforms, new_schema, fence=fence)


def _resolve_engine(engine: str, shard: Shard) -> Engine:
    if engine not in ENGINES:
        raise BadInputError(
            f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}", engine=engine
        )
    return ArrowEngine()
