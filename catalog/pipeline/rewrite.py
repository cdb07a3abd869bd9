"""The REWRITE copy on the arrow engine: source updates since the target's upper, transformed and
compare-and-appended a slice at a time (:mod:`catalog.pipeline.checkpoints`), so a second copy,
or a copy restarted after a crash, moves only what the target has not seen."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from catalog.consensus import Fence
from catalog.consolidate import repeated
from catalog.errors import (
    BlobMissingError,
    CorruptBlobError,
    ShardError,
)
from catalog.pipeline.checkpoints import next_checkpoint, slice_rows
from catalog.pipeline.pacing import Pacer
from catalog.pipeline.transforms import Transform, apply_transforms
from catalog.pipeline.updates import (
    PACED_BATCHES,
    PACED_ROWS,
    copy_schema,
    expected_rows,
    read_updates,
    update_chunks,
)
from catalog.retry import Retry
from catalog.shard import (
    DIFF,
    TS,
    BatchRef,
    Carry,
    Shard,
    ShardState,
    consolidate,
)
from catalog.shard.updates import checked_batch, time_bounds

log = structlog.get_logger(__name__)


# A copy re-reads and retries when another process moved the target's upper first.
_COPY_ATTEMPTS = 20


def transform_table(
    table: pa.Table,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
    *,
    project: bool = False,
) -> pa.Table:
    """:func:`apply_transforms` over every batch of ``table``."""
    batches = [
        apply_transforms(b, transforms, new_schema, project=project)
        for b in table.to_batches()
        if b.num_rows
    ]
    return pa.Table.from_batches(batches, schema=copy_schema(new_schema))


class _AppendRaced(Exception):
    """Another copier moved the target's upper first."""


class SourceMoved(Exception):
    """A Spark read failed and the source state moved meanwhile (its batches were replaced)."""


@attrs.frozen
class CopyPlan:
    """One attempt of a copy: the frontiers read and whether times are still distinguishable."""

    source: ShardState
    target: ShardState
    #: The source time this attempt copies up to (a checkpoint); None: the source's upper.
    end: int | None = None
    #: The batches the copy read below ``lower`` are all still in the source: none of their
    #: rows was moved by compaction, so times still tell what the target holds.
    unmoved: bool = False

    @property
    def lower(self) -> int:
        return self.target.upper

    @property
    def upper(self) -> int:
        return self.source.upper if self.end is None else self.end

    @property
    def by_diff(self) -> bool:
        """True when compaction may have advanced copied source times to the target's upper.

        Compaction moves times below ``since`` to ``since``: once ``since >= lower``, rows
        already copied may carry a time at or above ``lower``, so the delta cannot be selected
        by time: it is the transformed source minus what the target holds.
        """
        return self.lower > 0 and self.source.since >= self.lower and not self.unmoved


def _plan_copy(source: Shard, target: Shard, goal: int | None = None) -> CopyPlan | None:
    """The next copy attempt, up to the source time ``goal`` (None: the source's upper), or
    None when the target has seen all of that."""
    plan = CopyPlan(source=source.state(), target=target.state())
    if goal is not None and plan.lower >= goal:
        return None
    if plan.lower > plan.upper:
        raise ShardError(
            f"shard {target.shard_id} is ahead of its source {source.shard_id} "
            f"({plan.lower} > {plan.upper}): it is not a copy of it",
            reason="target-ahead",
            shard_id=target.shard_id,
            source=source.shard_id,
            upper=plan.lower,
            source_upper=plan.upper,
        )
    if plan.lower == plan.upper:
        return None
    return plan if goal is None else attrs.evolve(plan, end=goal)


def diff_delta(
    source: Shard,
    target: Shard,
    plan: CopyPlan,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
    *,
    pacer: Pacer | None = None,
) -> pa.Table:
    """The delta as ``transform(source) - target``, all at time ``upper - 1`` (see by_diff)."""
    source_updates = read_updates(source, plan.source, 0, plan.upper, pacer=pacer)
    full = transform_table(source_updates, transforms, new_schema)
    held = read_updates(target, plan.target, 0, plan.lower, new_schema)
    held = held.set_column(held.schema.get_field_index(DIFF), DIFF, pc.negate(held.column(DIFF)))
    both = pa.concat_tables([full, held.cast(full.schema)])
    at = repeated(plan.upper - 1, pa.uint64(), both.num_rows)
    both = both.set_column(both.schema.get_field_index(TS), TS, at)
    return consolidate(both)


def write_transformed(
    source: Shard,
    target: Shard,
    plan: CopyPlan,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
    pacer: Pacer | None = None,
) -> list[BatchRef]:
    """The delta ``[lower, upper)`` transformed a chunk at a time, each chunk written as a batch
    of the target (its blob only: the caller commits the references in one compare-and-append,
    which deletes them if it does not land). Memory holds one chunk, not the copy; a paced copy
    advances (and is held while paused) between chunks, so a paused copy writes nothing. The
    rows the step expects are the copy's (:func:`copy_shard`), not this slice's."""
    schema_id = plan.target.schema_id
    live = plan.target.live(schema_id)
    refs: list[BatchRef] = []
    chunks = update_chunks(
        source, plan.source, plan.lower, plan.upper, batches=PACED_BATCHES, rows=PACED_ROWS
    )
    try:
        for table, rows in chunks:
            out = transform_table(table, transforms, new_schema)
            if out.num_rows:
                stored = checked_batch(out, live, plan.lower, plan.upper, target.shard_id)
                lower, upper = time_bounds(stored)
                ref = BatchRef(uuid.uuid4().hex, schema_id, stored.num_rows, lower, upper)
                target.blob.put_batch(ref.key(target.shard_id), stored)
                refs.append(ref)
            if pacer is not None:
                pacer.advance(rows, table.nbytes)
    except BaseException:
        target.blob.delete_many([r.key(target.shard_id) for r in refs])
        raise
    return refs


def copy_shard(
    source: Shard,
    target: Shard,
    fence: Fence | None,
    produce: Callable[[CopyPlan], pa.Table | Sequence[BatchRef]],
    engine: str,
    pacer: Pacer | None = None,
    *,
    slice_batches: int = 1,
) -> int:
    """The copy loop both engines share: plan a slice, produce it (a table, or the refs of
    batches already written to the target's blobs), compare-and-append it, repeat.

    The copy goes up to the source's upper as first read (a source that goes on growing is
    not chased), a slice at a time (:mod:`catalog.pipeline.checkpoints`; each of at least
    ``slice_batches`` batches): each commit is a checkpoint a restarted copy resumes from.
    With ``pacer`` the step expects the source's rows up to that upper and starts from those
    below the target's (a resumed copy's progress starts at its checkpoint). A ``by_diff``
    delta is one slice: the times below the target's upper no longer tell what it holds. A
    lost append race (another copier of the same version and generation moved the target
    first) re-plans from the new upper, so each source update
    lands exactly once.
    """
    first = _plan_copy(source, target)
    if first is None:
        return 0
    goal = first.upper
    if pacer is not None and not first.by_diff:
        total = expected_rows(source, first.source, 0, goal)
        pacer.expect(total, done=expected_rows(source, first.source, 0, first.lower))
    if first.lower:
        log.info("copy_resumed", source=source.shard_id, target=target.shard_id, at=first.lower)
    copy = _ShardCopy(
        source,
        target,
        fence,
        produce,
        engine,
        goal=goal,
        rows=slice_rows(expected_rows(source, first.source, first.lower, goal)),
        slice_batches=slice_batches,
    )
    retry = Retry(
        retryable=(_AppendRaced, SourceMoved, CorruptBlobError),
        max_attempts=_COPY_ATTEMPTS,
        deadline=None,
        base_delay=0.0,
        should_retry=copy.replan,
    )
    total = 0
    try:
        while (copied := retry(copy.next_slice)) is not None:
            total += copied
    except _AppendRaced:
        raise ShardError(
            f"copying {source.shard_id} into {target.shard_id} kept losing append races",
            reason="contended",
            shard_id=target.shard_id,
            source=source.shard_id,
        ) from None
    return total


@attrs.define
class _ShardCopy:
    """One copy's slices up to its goal (:func:`copy_shard`): what it read, its last plan."""

    source: Shard
    target: Shard
    fence: Fence | None
    produce: Callable[[CopyPlan], pa.Table | Sequence[BatchRef]]
    engine: str
    goal: int
    #: The rows a slice holds at least (catalog.pipeline.checkpoints).
    rows: int
    slice_batches: int
    plan: CopyPlan | None = None
    #: The source batches this copy's slices read.
    read: set[str] = attrs.field(factory=set)

    def next_slice(self) -> int | None:
        """Plan, produce and append the next slice: its rows, or None at the goal.
        _AppendRaced when another copier moved the target first."""
        plan = self.plan = _plan_copy(self.source, self.target, self.goal)
        if plan is None:
            return None
        if self.read and self.read <= {r.name for r in self.source.batches(plan.source)}:
            # Every batch the earlier slices read is still there: compaction moved no row
            # they copied, whatever ``since`` says.
            plan = self.plan = attrs.evolve(plan, unmoved=True)
        if not plan.by_diff:
            refs = self.source.batches(plan.source)
            end = next_checkpoint(refs, plan.lower, self.goal, self.rows, self.slice_batches)
            plan = self.plan = attrs.evolve(plan, end=end)
            self.read.update(r.name for r in refs if r.lower < end and r.upper > plan.lower)
        return self._append(plan, self.produce(plan))

    def _append(self, plan: CopyPlan, out: pa.Table | Sequence[BatchRef]) -> int:
        # The source's write ledger travels with its data: an append whose answer was lost
        # before the switch is still recognised by its id on the replacement shard.
        carry = Carry(plan.source.writes, self.source.keys)
        if isinstance(out, pa.Table):
            copied = out.num_rows
            result = self.target.compare_and_append(
                out, plan.lower, plan.upper, fence=self.fence, carry=carry
            )
        else:  # batches the executors wrote: their references, in one append
            copied = sum(r.rows for r in out)
            result = self.target.compare_and_append_batches(
                out, plan.lower, plan.upper, fence=self.fence, carry=carry
            )
        log.info(
            "rewrite_append",
            engine=self.engine,
            source=self.source.shard_id,
            target=self.target.shard_id,
            lower=plan.lower,
            upper=plan.upper,
            goal=self.goal,
            rows=copied,
            by_diff=plan.by_diff,
            ok=result.ok,
        )
        if not result.ok:
            raise _AppendRaced()
        return copied

    def replan(self, exc: Exception) -> bool:
        """A lost append race, or compaction replacing the batches under the read: plan again
        from the new state (never when the source did not move: that error is real)."""
        if isinstance(exc, _AppendRaced):
            return True
        vanished = isinstance(exc, (SourceMoved, BlobMissingError))
        plan = self.plan
        if not vanished or plan is None or self.source.state().revision == plan.source.revision:
            return False
        log.info("rewrite_source_moved", source=self.source.shard_id, target=self.target.shard_id)
        return True
