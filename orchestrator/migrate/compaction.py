"""Compaction scheduled by the serving leader: shards whose batch lists grew long, or that still
hold data under an old schema, are compacted a few at a time in its maintenance sweep.

Without it every read of a busy collection reads every batch ever appended, and old schemas
never retire. The sweep runs on the leader's maintenance thread after the frontiers moved (so
compaction consolidates across times) and the garbage was collected; it picks at most ``limit``
shards per sweep, the longest batch lists first, and leaves those too large to compact in this
process (more than ``max_rows`` stored rows) to ``catalog-upgrade compact --engine spark``.
Compaction is fenced like every leader write, and what it replaces is left to the garbage
collection (readers may still be on it).
"""

from __future__ import annotations

import structlog

from catalog.consensus import Fence
from catalog.environment import CatalogState
from catalog.errors import ShardError, VersionMismatchError
from catalog.shard import ShardState, read_states
from orchestrator.migrate.context import MigrationContext

__all__ = ["COMPACT_MAX_ROWS", "COMPACT_MIN_BATCHES", "compact_due"]

log = structlog.get_logger(__name__)

# A shard is due once it lists this many batches (inline and rolled up), or holds any batch
# under an old schema and at least a few batches.
COMPACT_MIN_BATCHES = 64
COMPACT_MAX_ROWS = 5_000_000
_OLD_SCHEMA_MIN_BATCHES = 2


def compaction_due(state: ShardState, min_batches: int) -> bool:
    if state.finalized or state.sealed or state.batch_count < _OLD_SCHEMA_MIN_BATCHES:
        return False
    if state.batch_count >= min_batches:
        return True
    # Old-schema batches inline are visible without reading rollups; enough to retire them.
    return any(b.schema_id != state.schema_id for b in state.batches)


def compact_due(
    ctx: MigrationContext,
    catalog: CatalogState,
    fence: Fence | None,
    *,
    min_batches: int = COMPACT_MIN_BATCHES,
    max_rows: int = COMPACT_MAX_ROWS,
    limit: int = 2,
) -> list[str]:
    """Compact up to ``limit`` due shards of ``catalog``'s collections; the shard ids done."""
    if min_batches <= 0 or limit <= 0:
        return []
    states = read_states(ctx.consensus, sorted(catalog.shard_ids()))
    due = sorted(
        (s for s in states.values() if s is not None and compaction_due(s, min_batches)),
        key=lambda s: (-s.batch_count, s.shard_id),
    )
    names = {ref.shard_id: ref.name for ref in catalog.collections.values()}
    done: list[str] = []
    for state in due:
        if len(done) >= limit:
            break
        if state.row_count > max_rows:
            log.info("compaction_left_to_spark", shard=state.shard_id, rows=state.row_count)
            continue
        ctx.pacer.begin("compaction", names.get(state.shard_id, state.shard_id))
        try:
            result = ctx.shard(state.shard_id).compact(fence=fence, pacer=ctx.pacer)
        except (ShardError, VersionMismatchError) as exc:
            log.info("scheduled_compaction_skipped", shard=state.shard_id, reason=repr(exc))
            continue
        finally:
            ctx.pacer.end()
        if result.applied:
            done.append(state.shard_id)
            log.info(
                "scheduled_compaction", shard=state.shard_id, inputs=result.inputs,
                rows=sum(b.rows for b in result.outputs),
            )  # fmt: skip
    return done
