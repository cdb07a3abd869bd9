"""Checkpoints of a long copy: where a REWRITE copy commits what it copied so far.

A copy moves the source's updates with ``_ts`` in ``[target.upper, goal)`` into the target
shard. It does so in slices that end at a source batch's upper, each committed with one
compare-and-append that moves the target's upper to the slice's end. The target's upper is the
checkpoint: durable, part of the prepared shard (which belongs to one source shard, see
:mod:`catalog.shard.origin`), and the place a restarted copy resumes from, so no row is copied
or counted twice and at most one slice is redone.

A slice holds about :func:`slice_rows` rows: at least :data:`CHECKPOINT_MIN_ROWS` (each commit
costs a ZooKeeper transaction, and on Spark a job) and otherwise a :data:`CHECKPOINT_FRACTION`
of the copy, which bounds what a crash makes a restart redo. The serving leader keeps the
source's ``since`` below every prepared copy's upper (:mod:`orchestrator.migrate.frontiers`),
so compaction moves no copied row past a checkpoint and a restart resumes by time (one
whose source ``since`` had passed its first checkpoint before the hold copies by difference:
:attr:`catalog.pipeline.rewrite.CopyPlan.by_diff`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from catalog.shard import BatchRef

__all__ = ["CHECKPOINT_FRACTION", "CHECKPOINT_MIN_ROWS", "next_checkpoint", "slice_rows"]

#: The largest part of a copy one slice holds: what a restart redoes at most.
CHECKPOINT_FRACTION: Final = 0.05
#: The fewest rows a slice holds (a smaller copy is one slice).
CHECKPOINT_MIN_ROWS: Final = 100_000


def slice_rows(total: int) -> int:
    """The rows one slice of a copy of ``total`` rows holds, about."""
    return max(CHECKPOINT_MIN_ROWS, math.ceil(total * CHECKPOINT_FRACTION))


def next_checkpoint(
    refs: Iterable[BatchRef], lower: int, goal: int, rows: int, batches: int = 1
) -> int:
    """Where the slice starting at ``lower`` ends, in ``(lower, goal]``: about ``rows`` rows of
    the batches overlapping ``[lower, goal)`` in, and at least ``batches`` of those batches
    (an engine that runs a batch per task keeps its cores busy), taken in order of their
    uppers; ``goal`` when they hold fewer.

    A batch's rows are taken as spread evenly over its times, so a batch that spans many times
    (compaction's output) is cut inside: the slice reads it, cut to its own times, and the
    next slice reads the rest. Rows that share one time are never split (a cut is a time)."""
    held, counted = 0.0, 0
    for ref in sorted(refs, key=lambda r: (r.upper, r.lower)):
        start, stop = max(ref.lower, lower), min(ref.upper, goal)
        if start >= stop or ref.upper <= ref.lower:
            continue
        counted += 1
        per_time = ref.rows / (ref.upper - ref.lower)
        share = per_time * (stop - start)
        if held + share >= rows and counted >= batches:
            if held >= rows or not per_time:  # in for its count: the whole of it
                return stop
            return min(stop, start + max(1, math.ceil((rows - held) / per_time)))
        held += share
    return goal
