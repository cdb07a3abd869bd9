"""The serving leader drives each collection's read frontier (``since``) forward.

Compaction advances every time below ``since`` to ``since``, so only a ``since`` that moves lets
it consolidate updates of different times (and lets a REWRITE copy run ``by_diff``, the delta as
"transformed source minus target", once the source was compacted past the target's upper).
Nothing else moves it, so the leader does, on its garbage-collection cadence: to the latest
complete time (``upper - 1``: reads of the latest state never need older times), held back by
every reader lease to the time that reader reads at. A read at an explicit older time started
after ``since`` passed it is refused with a clear error (the history below ``since`` is gone).

A copy prepared from a shard (a replacement whose origin is that shard, named by a live
migration entry) holds it too: ``since`` stays below the copy's upper, its checkpoint
(:mod:`catalog.pipeline.checkpoints`). So a copy restarted after a crash, and the leader's delta
copy at promotion, go on by time from there, not ``by_diff`` over the whole source.
"""

from __future__ import annotations

import structlog

from catalog.consensus import Fence
from catalog.environment import CatalogState
from catalog.errors import ShardError
from catalog.shard import read_states
from orchestrator.migrate.context import MigrationContext

__all__ = ["advance_frontiers"]

log = structlog.get_logger(__name__)


def advance_frontiers(ctx: MigrationContext, catalog: CatalogState, fence: Fence | None) -> int:
    """Move ``since`` of every shard the catalog names forward as far as its leases allow;
    the number of shards moved."""
    states = read_states(ctx.consensus, sorted(catalog.shard_ids()))
    copies = _copied_up_to(ctx, set(states))
    moved = 0
    for shard_id, state in states.items():
        if state is None or state.finalized or state.upper <= 1:
            continue
        target = state.upper - 1
        if target <= state.since:
            continue
        shard = ctx.shard(shard_id)
        held = shard.held_since()
        if held is not None:
            target = min(target, held)
        if shard_id in copies:
            target = min(target, copies[shard_id] - 1)
        if target <= state.since:
            continue
        try:
            shard.advance_since(target, fence=fence)
        except ShardError:
            continue  # finalized or sealed meanwhile: nothing left to read forward
        moved += 1
    if moved:
        log.info("frontiers_advanced", shards=moved)
    return moved


def _copied_up_to(ctx: MigrationContext, sources: set[str]) -> dict[str, int]:
    """For each of ``sources`` that a prepared copy was made from: the lowest upper of those
    copies (0 for one not started: it holds ``since`` where it is)."""
    prepared = sorted({e.shard_id for e in ctx.migration_shard().entries()})
    copies: dict[str, int] = {}
    for state in read_states(ctx.consensus, prepared).values():
        if state is None or state.finalized or state.sealed:
            continue
        source = state.origin.source if state.origin is not None else None
        if source in sources:
            copies[source] = min(copies.get(source, state.upper), state.upper)
    return copies
