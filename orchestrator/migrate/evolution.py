"""Evolutions in two halves (docs/design-upgrade.md, step 5): expand before the switch,
contract after it.

Before its catalog switch a leader registers on each evolved shard only the *expansion*: the
shard's latest schema plus the fields its release adds (:func:`catalog.schema.expand.expansion`),
recording in the same write the *contraction* it owes (its release's schema, with deletions and
relaxed nullability). A crash before the switch so leaves every older release its fields, values
and nullability. Once the upgrade is finalized (``orchestrator.migrate.finalization``: until
then the previous release may be promoted back, and needs its fields) the leader registers the
recorded contractions of that version and clears the records of aborted upgrades to other
versions; a leader that took over (a restart, or a later generation) redoes it from the records,
since the switched catalog no longer says what the release deleted.
"""

from __future__ import annotations

import pyarrow as pa
import structlog

from catalog.consensus import Fence, Op
from catalog.environment import CatalogState
from catalog.errors import FencedError, SchemaIncompatibleError
from catalog.release import PlannedMigration
from catalog.schema.expand import expansion
from catalog.shard import (
    Contraction,
    ShardState,
    clear_contraction_op,
    contract_op,
    evolve_op,
    expand_op,
    find_schema_id,
)
from orchestrator.migrate.context import PHASE_SCHEMAS, MigrationContext
from orchestrator.migrate.durable import read_shard_states, registration_schema

__all__ = ["contract_all", "expand_all", "keeps_release_schema"]

log = structlog.get_logger(__name__)


def _expand_op(
    ctx: MigrationContext, m: PlannedMigration, state: ShardState
) -> tuple[Op | None, ShardState]:
    """The write registering ``m``'s expansion (and recording its contraction), if one is due,
    and the state it leaves."""
    target = registration_schema(state, m.old_schema, m.new_schema)
    if state.schema_id in (find_schema_id(state, m.new_schema), find_schema_id(state, target)):
        return None, state  # contracted already
    # An older registered schema equal to the release's (a field added, then deleted again) is
    # registered anew: the shard's latest schema is the release's, as if the path were a jump.
    expanded = expansion(state.live_schema, m.new_schema)
    try:
        if expanded.equals(target):  # only additions: one half is the whole evolution
            return evolve_op(state, target)
        owed = Contraction(str(ctx.version), ctx.deploy_generation, target)
        return expand_op(state, expanded, owed)
    except SchemaIncompatibleError as exc:
        # The shard moved to a schema ours is not compatible with: halt (fenced).
        raise FencedError(
            f"collection {m.name}: shard {state.shard_id} holds a schema newer than this "
            f"release can evolve ({exc.message})",
            collection=m.name,
            shard_id=state.shard_id,
        ) from exc


def _states(
    ctx: MigrationContext, shard_ids: set[str], known: dict[str, ShardState], fresh: bool
) -> dict[str, ShardState]:
    """The states of ``shard_ids``: those the leader last read or wrote (``known``, kept up to
    date), the others read; all read when ``fresh`` (a retry after a lost race)."""
    missing = shard_ids if fresh else shard_ids - known.keys()
    if missing:
        known.update(read_shard_states(ctx, missing))
    return {sid: known[sid] for sid in shard_ids}


def expand_all(
    ctx: MigrationContext,
    evolutions: list[PlannedMigration],
    catalog: CatalogState,
    fence: Fence,
    known: dict[str, ShardState],
) -> list[str]:
    """Register each evolution's expansion on its shard, batched; the evolved collections.

    ``known``: shard states as last read (every op is version-checked, so a stale one only
    costs a retry, which reads); updated with the states the expansion leaves."""
    pending = {m.global_id: m for m in evolutions}
    done: list[str] = []
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        ids = {catalog.collections[gid].shard_id for gid in pending}
        states = _states(ctx, ids, known, fresh=attempts > 1)
        ops: list[Op] = []
        written: list[ShardState] = []
        for gid, m in list(pending.items()):
            op, new = _expand_op(ctx, m, states[catalog.collections[gid].shard_id])
            if op is not None:
                ops.append(op)
                written.append(new)
        if ops:
            ctx.consensus.commit_chunked(ops, fence=fence)
        known.update({s.shard_id: s for s in written})
        done.extend(pending.pop(gid).name for gid in list(pending))

    if pending:
        ctx.on_phase(PHASE_SCHEMAS)
        ctx.retry(attempt)
    return sorted(done)


def keeps_release_schema(ctx: MigrationContext, state: ShardState, schema: pa.Schema) -> bool:
    """Whether the switched catalog must keep the release's ``schema`` for this shard: it is
    not registered as such, nor will its owed contraction register exactly it (the shard
    keeps fields an aborted newer leader added: see registration_schema)."""
    owed = state.contraction
    if owed is not None and owed.of(str(ctx.version)):
        return not owed.schema.equals(schema)
    return find_schema_id(state, schema) is None


def contract_all(
    ctx: MigrationContext,
    catalog: CatalogState,
    fence: Fence,
    known: dict[str, ShardState],
    *,
    version: str | None = None,
) -> int:
    """At finalization: register the contractions owed by ``version`` (the finalized upgrade's;
    default this leader's) and drop the records of others (aborted upgrades to other
    versions); the shards contracted. ``known`` as for :func:`expand_all`."""
    me = str(ctx.version) if version is None else version
    contracted = 0
    attempts = 0

    def attempt() -> None:
        nonlocal contracted, attempts
        attempts += 1
        states = _states(ctx, catalog.shard_ids(), known, fresh=attempts > 1)
        owed = [s for s in states.values() if s.contraction is not None]
        if not owed:
            return
        ctx.on_phase(PHASE_SCHEMAS)
        ops: list[Op] = []
        mine = 0
        for state in owed:
            assert state.contraction is not None
            if state.contraction.of(me):
                op = contract_op(state)[0]
                mine += 1
            else:
                op = clear_contraction_op(state)[0]
            if op is not None:
                ops.append(op)
        ctx.consensus.commit_chunked(ops, fence=fence)
        contracted = mine

    ctx.retry(attempt)
    if contracted:
        log.info("schemas_contracted", shards=contracted, version=me)
    return contracted
