"""Compaction: many batches merged into one in the latest schema, committed by one CAS."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

import pyarrow as pa
import structlog

from catalog.consensus import (
    Fence,
)
from catalog.consolidate import (
    DIFF,
    consolidate_hashed,
    consolidate_sorted,
    is_sortable,
)
from catalog.errors import (
    ConnectionLostError,
    VersionMismatchError,
)
from catalog.schema.restore import fill_hidden_nulls
from catalog.shard import read
from catalog.shard.ops import finalized_error
from catalog.shard.shard_access import ShardAccess
from catalog.shard.state import (
    BatchRef,
    CompactionResult,
    ShardState,
)
from catalog.shard.updates import (
    advance_times,
    sort_rows,
    time_bounds,
)

log = structlog.get_logger(__name__)


def compaction_inputs(shard: ShardAccess) -> tuple[ShardState, list[BatchRef]]:
    """The state and the batches a compaction merges (both engines); a finalized shard is
    refused."""
    state = shard.state()
    if state.finalized:
        raise finalized_error(state)
    return state, shard.batches(state)


class Paced(Protocol):
    """What a compaction tells a long step's pacer (catalog.pipeline.pacing.Pacer is one):
    the rows it will read, then each part read. The shard names it, not the pipeline above."""

    def expect(self, rows: int) -> None: ...

    def advance(self, rows: int, nbytes: int = 0) -> None: ...


T = TypeVar("T")


class Work(Protocol):
    """Runs ``function`` (the first half of a compaction) and returns what it returned, where
    the caller wants it run (e.g. a thread of lower priority)."""

    def __call__(self, function: Callable[[], T]) -> T: ...


def compact(
    shard: ShardAccess,
    *,
    fence: Fence | None = None,
    pacer: Paced | None = None,
    select: Callable[[Sequence[BatchRef]], Sequence[BatchRef]] | None = None,
    turn: Callable[[], AbstractContextManager[object]] | None = None,
    consolidate: bool = True,
    work: Work | None = None,
) -> CompactionResult:
    """Merge every batch into one, in the latest schema, times below since advanced.

    ``select``: merge only the batches it picks of the state's (a merge of the write path,
    :func:`catalog.shard.merges.merge_plan`); fewer than two picked merge nothing. ``turn``:
    held around the commit only (the shard's writer's turn, so the commit never races its
    appends), which then starts from a state read inside it. Without ``consolidate`` the
    batches are only concatenated (times kept, nothing sorted: a merge of the write path,
    whose reads consolidate anyway), at a fraction of the cost. ``work``: runs the reading and
    the writing of the output (everything before the commit) where the caller says, e.g. in a
    thread of lower priority; by default in this one.

    The output is consolidated; it is sorted and marked ``ordered`` when every column is
    sortable. The blob is written, then the state CAS replaces exactly the input batches;
    appends that landed meanwhile are kept. When the inputs were replaced by another
    compaction first, the output is deleted and ``applied`` is False.

    ``pacer``: a long step (catalog.pipeline.pacing) whose rows are the inputs', counted as
    each schema's batches are read; a throttle or a pause holds it before anything is written.
    """
    state, inputs = compaction_inputs(shard)
    if select is not None:
        inputs = list(select(inputs))
        if len(inputs) < 2:
            return CompactionResult(False, 0, None, state)
    if not inputs:
        return CompactionResult(True, 0, None, state)
    if pacer is not None:
        pacer.expect(sum(b.rows for b in inputs))

    def output() -> _Output:
        return _written(shard, state, inputs, pacer=pacer, consolidate=consolidate)

    rows, ordered, output_ref = output() if work is None else work(output)
    outputs = [output_ref] if output_ref else []
    if turn is None:
        result = commit_compaction(shard, state, inputs, outputs, fence=fence)
    else:
        with turn():
            result = commit_compaction(shard, shard.state(), inputs, outputs, fence=fence)
    if result.applied:
        shard.log.info("compacted", inputs=len(inputs), rows=rows, ordered=ordered)
    return result


#: What the first half of a compaction leaves: the output's rows, whether it is sorted, and
#: the batch written (None: the inputs cancel out).
_Output = tuple[int, bool, BatchRef | None]


def _written(
    shard: ShardAccess,
    state: ShardState,
    inputs: Sequence[BatchRef],
    *,
    pacer: Paced | None,
    consolidate: bool,
) -> _Output:
    """Reads ``inputs``, merges them in the latest schema and writes the output's blob."""
    target = state.live_schema
    tables = read.load(
        shard, state, inputs, target, on_group=None if pacer is None else pacer.advance
    )
    if not consolidate:
        merged, ordered, consolidated = pa.concat_tables(tables), False, False
    else:
        merged, consolidated = advance_times(pa.concat_tables(tables), state.since), True
        if all(is_sortable(f.type) for f in merged.schema if f.name != DIFF):
            merged, ordered = consolidate_sorted(merged), True
        else:
            merged, ordered = sort_rows(consolidate_hashed(merged))
    output: BatchRef | None = None
    if merged.num_rows:
        lower, upper = time_bounds(merged)
        output = BatchRef(
            uuid.uuid4().hex,
            state.schema_id,
            merged.num_rows,
            lower,
            upper,
            ordered=ordered,
            consolidated=consolidated,
        )
        # Consolidation flattens structs: values go back under null parents before Parquet.
        merged = fill_hidden_nulls(merged)
        shard.blob.put_batch(output.key(shard.shard_id), merged)
    return merged.num_rows, ordered, output


def commit_compaction(
    shard: ShardAccess,
    state: ShardState,
    inputs: Sequence[BatchRef],
    outputs: Sequence[BatchRef],
    *,
    fence: Fence | None = None,
) -> CompactionResult:
    """Replace exactly ``inputs`` (batches of ``state``) by ``outputs``, already written.

    The second half of :meth:`compact`, public for compactions computed elsewhere (the
    Spark engine of ``catalog.pipeline``): ``outputs`` hold the inputs' consolidated
    contents in the latest schema of ``state``. Appends that landed meanwhile are kept;
    when the inputs were replaced first, the outputs are deleted and ``applied`` is False.
    """
    input_names = {b.name for b in inputs}
    output_names = {b.name for b in outputs}
    output_keys = [b.key(shard.shard_id) for b in outputs]
    pending = [state]
    written: list[str] = []

    def attempt() -> ShardState | None:
        current = pending.pop() if pending else shard.state()
        if current.finalized:
            raise finalized_error(current)
        batches = shard.batches(current)
        names = {b.name for b in batches}
        if output_names and output_names <= names:
            return current  # an earlier attempt landed although its answer was lost
        if not input_names <= names:
            return None
        kept = [b for b in batches if b.name not in input_names]
        new, rollup_keys = shard.packed(current, [*outputs, *kept])
        try:
            result = shard.cas(current, new, fence)
        except VersionMismatchError:
            shard.blob.delete_many(rollup_keys)
            raise
        written[:] = [r.key(shard.shard_id) for r in current.rollups]
        return result

    try:
        result = shard.retry()(attempt)
    except ConnectionLostError:
        raise  # the outcome is unknown: the output may be referenced, gc_orphans decides
    except BaseException:
        shard.blob.delete_many(output_keys)
        raise
    if result is None:
        shard.blob.delete_many(output_keys)
        shard.log.info("compaction_lost_race", inputs=len(inputs))
        return CompactionResult(False, len(inputs), None, shard.state())
    # The inputs (and rollups the new state no longer lists) are left to the leader's
    # garbage collection: a reader that listed them before this CAS may still be reading
    # them, and the collection deletes them only after the grace, never under a lease.
    shard.log.debug("compaction_inputs_left_to_gc", inputs=len(inputs), rollups=len(written))
    only = outputs[0] if len(outputs) == 1 else None
    return CompactionResult(True, len(inputs), only, result, tuple(outputs))
