"""The leader algorithm: replacement shards, schema registration, rewrite deltas, the catalog
switch with the finalization queue in one fenced transaction, then retraction of stale entries."""

from __future__ import annotations

import time
from collections.abc import Mapping

import attrs
import structlog

from catalog.consensus import Fence
from catalog.environment import (
    CONTAINER_KEYS,
    MIGRATION_SHARD_ID,
    CatalogState,
    CollectionRef,
    Finalized,
    catalog_write_op,
    kept_schema_ops,
    read_catalog,
    retired_schema_ops,
)
from catalog.errors import (
    MigrationRefusedError,
)
from catalog.migration import MigrationEntry
from catalog.pending import PendingUpgrade, ReplacedCollection, pending_write_op, read_pending
from catalog.release import (
    Mechanism,
    Version,
    plan,
)
from catalog.shard import ShardState
from orchestrator.election import Leadership
from orchestrator.events import drop_events_of
from orchestrator.migrate.cleanup import queue_ops
from orchestrator.migrate.context import (
    PHASE_FINALIZING,
    PHASE_REPLACEMENTS,
    PHASE_SWITCH,
    LeaderResult,
    MigrationContext,
)
from orchestrator.migrate.durable import (
    catalog_snapshot,
    read_shard_states,
    refuse_fenced_or_older,
)
from orchestrator.migrate.evolution import contract_all, expand_all, keeps_release_schema
from orchestrator.migrate.finalization import complete_finalization, request_finalization
from orchestrator.migrate.replacements import copy_rewrites, ensure_shards, replacement_targets
from orchestrator.migrate.rollback import inverse_chain, rollback_as_leader

log = structlog.get_logger(__name__)


def _bootstrap(ctx: MigrationContext, leadership: Leadership, started: float) -> LeaderResult:
    """An empty environment: create the migration shard, every builtin's shard, the catalog."""
    ctx.consensus.ensure(*CONTAINER_KEYS)
    migration = ctx.migration_shard()
    migration.ensure(fence=leadership.fence)
    ctx.on_phase(PHASE_REPLACEMENTS)
    shards = ensure_shards(
        ctx, {b.global_id: b.schema for b in ctx.release.builtins}, None, fence=leadership.fence
    )
    state = CatalogState(
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        blob_uri=ctx.blob.uri,
        collections={
            b.global_id: CollectionRef(b.global_id, b.name, shards[b.global_id], b.fingerprint)
            for b in ctx.release.builtins
        },
        updated_at=time.time(),
        finalized=Finalized(leadership.deploy_generation, time.time(), "bootstrap"),
        version_generation=leadership.deploy_generation,
        generation_release=str(ctx.version),
    )
    ctx.on_phase(PHASE_SWITCH)
    ctx.consensus.commit([catalog_write_op(state, -1)], fence=leadership.fence)
    ctx.on_switched()
    log.info("bootstrapped", collections=len(state.collections), version=str(ctx.version))
    return LeaderResult(
        bootstrap=True,
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        replaced=shards,
        seconds=time.monotonic() - started,
    )


def migrate_as_leader(ctx: MigrationContext, leadership: Leadership) -> LeaderResult:
    """Step 5 of docs/design-upgrade.md: everything a promoted leader does; idempotent and
    fenced by the epoch."""
    started = time.monotonic()
    found = read_catalog(ctx.consensus)
    if found is None:
        return _bootstrap(ctx, leadership, started)
    catalog, catalog_version = found
    pending_found = read_pending(ctx.consensus)
    pending = None if pending_found is None else pending_found[0]
    if refuse_fenced_or_older(ctx, catalog, pending):
        return rollback_as_leader(ctx, leadership, catalog, catalog_version, started)
    finalized_first = None
    if pending is not None and pending.version != str(ctx.version):
        # A newer release promoted while an upgrade is pending (``promote`` refuses that; a
        # promotion that got past it): the pending upgrade is finalized first.
        request_finalization(
            ctx.consensus, requested_by=ctx.process_id, reason=f"promotion of {ctx.version}"
        )
        complete_finalization(ctx, leadership.fence)
        finalized_first, pending = pending.version, None
        found = read_catalog(ctx.consensus)
        assert found is not None
        catalog, catalog_version = found
    shards = read_shard_states(ctx, catalog.shard_ids())
    plan_ = plan(catalog_snapshot(catalog, shards), ctx.release)
    fence = leadership.fence

    wanted = replacement_targets(ctx, plan_)
    wanted.update({b.global_id: b.schema for b in plan_.new_builtins})
    if wanted:
        ctx.on_phase(PHASE_REPLACEMENTS)
    # A suspended or superseded leader stops before each step; the fence stops it within one.
    leadership.check()
    prepared: dict[str, ShardState] = {}  # the replacement shards' states, as ensured
    replacements = ensure_shards(ctx, wanted, catalog, fence=fence, seen=prepared)
    leadership.check()
    known = dict(shards)  # the states as last read or written: every later step starts here
    evolved = expand_all(
        ctx,
        [m for m in plan_.migrations if m.mechanism is Mechanism.EVOLUTION],
        catalog,
        fence,
        known,
    )
    leadership.check()
    copy_rewrites(ctx, plan_, catalog, replacements, fence=fence)
    for m in plan_.migrations:  # their copies moved these shards' uppers
        if m.mechanism is Mechanism.REWRITE:
            prepared.pop(replacements[m.global_id], None)
    leadership.check()

    # One transaction: the switch and the finalization queue of what it un-references.
    ctx.on_phase(PHASE_SWITCH)
    new_state = _switched_catalog(ctx, leadership, catalog, replacements, known)
    unreferenced, pending = _switch(
        ctx, leadership, (catalog, catalog_version), new_state, replacements, prepared, pending
    )
    log.info(
        "catalog_switched",
        version=new_state.version,
        deploy_generation=new_state.deploy_generation,
        replaced=len(replacements),
        evolved=len(evolved),
    )
    leadership.check()
    if pending is None:
        # No upgrade pending: contractions of aborted upgrades are cleared (a final version's
        # own were registered when it was finalized).
        contract_all(ctx, new_state, fence, known)
    leadership.check()
    retracted, more_queued = _retract_stale_entries(ctx, new_state, fence)
    finalized = _finalize_if_decided(ctx, leadership, known) or finalized_first
    return LeaderResult(
        pending=pending is not None and finalized != pending.version,
        finalized=finalized,
        bootstrap=False,
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        evolved=tuple(evolved),
        replaced=replacements,
        queued_for_finalization=tuple(sorted({*unreferenced, *more_queued})),
        retracted_entries=retracted,
        seconds=time.monotonic() - started,
    )


def _switched_catalog(
    ctx: MigrationContext,
    leadership: Leadership,
    catalog: CatalogState,
    replacements: dict[str, str],
    known: dict[str, ShardState],
) -> CatalogState:
    """The catalog the switch writes: every builtin of the release on its replacement or its
    shard, at this leadership's generation."""
    collections: dict[str, CollectionRef] = {}
    for b in ctx.release.builtins:
        old = catalog.collections.get(b.global_id)
        shard_id = replacements.get(b.global_id) or (old.shard_id if old else None)
        if shard_id is None:  # pragma: no cover - plan guarantees new builtins are wanted
            raise MigrationRefusedError(f"no shard for builtin {b.name}", collection=b.name)
        collections[b.global_id] = CollectionRef(b.global_id, b.name, shard_id, b.fingerprint)
    # A release schema registered only inside a wider one (registration_schema) is kept in
    # the catalog, so plans start from it.
    release_schemas = {b.global_id: b.schema for b in ctx.release.builtins}
    kept = [gid for gid in collections if gid not in replacements]
    for gid in kept:
        ref = collections[gid]
        if keeps_release_schema(ctx, known[ref.shard_id], release_schemas[gid]):
            collections[gid] = attrs.evolve(ref, schema=release_schemas[gid])
    same_version = catalog.version == str(ctx.version)
    return CatalogState(
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        blob_uri=catalog.blob_uri,
        collections=collections,
        updated_at=time.time(),
        finalized=catalog.finalized if same_version else None,
        version_generation=(
            catalog.version_generation if same_version else leadership.deploy_generation
        ),
        generation_release=str(ctx.version),
    )


def _switch(
    ctx: MigrationContext,
    leadership: Leadership,
    read: tuple[CatalogState, int],
    new_state: CatalogState,
    replacements: dict[str, str],
    prepared: dict[str, ShardState],
    pending: PendingUpgrade | None,
) -> tuple[list[str], PendingUpgrade | None]:
    """Write ``new_state`` over the catalog ``read`` (with its version) in one fenced
    transaction, with the finalization queue of the shards it no longer names; a switch to a
    new version leaves the upgrade pending, in the same transaction. The shards it
    un-references, and the upgrade pending now."""
    catalog, catalog_version = read
    fence = leadership.fence
    referenced = new_state.shard_ids() | {MIGRATION_SHARD_ID}
    unreferenced = sorted(catalog.shard_ids() - referenced)
    # The unreferenced shards are queued, but finalized only once the upgrade is final.
    queued = queue_ops(ctx, unreferenced)
    if catalog.version != new_state.version:
        pending = _pending_upgrade(ctx, leadership, catalog, replacements, prepared)
        queued.append(pending_write_op(pending, -1))
    # Kept schemas live in their own nodes: written before the switch that names them, and
    # those it no longer names retired after it (catalog.environment).
    schema_nodes = kept_schema_ops(ctx.consensus, new_state)
    if schema_nodes:
        ctx.consensus.commit_chunked(schema_nodes, fence=fence)
    if new_state.to_json() | {"updated_at": 0} != catalog.to_json() | {"updated_at": 0}:
        ctx.consensus.commit([catalog_write_op(new_state, catalog_version), *queued], fence=fence)
    elif queued:
        ctx.consensus.commit(queued, fence=fence)
    ctx.on_switched()
    retired = retired_schema_ops(
        ctx.consensus, new_state, *(() if pending is None else (pending.previous,))
    )
    if retired:
        ctx.consensus.commit_chunked(retired, fence=fence)
    return unreferenced, pending


def _pending_upgrade(
    ctx: MigrationContext,
    leadership: Leadership,
    catalog: CatalogState,
    replacements: dict[str, str],
    prepared: Mapping[str, ShardState],
) -> PendingUpgrade:
    """What the switch from ``catalog`` records: the upgrade stays reversible until final.
    ``prepared``: replacement shards' states known to be current (the rest are read)."""
    now = time.time()
    moved = {gid: sid for gid, sid in replacements.items() if gid in catalog.collections}
    unknown = {sid for sid in moved.values() if sid not in prepared}
    uppers = {**prepared, **(read_shard_states(ctx, unknown) if unknown else {})}
    since = Version.parse(catalog.version)
    replaced = {
        gid: ReplacedCollection(
            global_id=gid,
            name=catalog.collections[gid].name,
            from_shard=catalog.collections[gid].shard_id,
            to_shard=sid,
            upper=uppers[sid].upper,
            inverse=inverse_chain(ctx.release, catalog.collections[gid].name, since) is not None,
        )
        for gid, sid in moved.items()
    }
    return PendingUpgrade(
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        from_version=catalog.version,
        from_generation=catalog.upgraded_at_generation,
        since=now,
        previous=catalog,
        replaced=replaced,
        finalize_at=None if ctx.finalize_after is None else now + ctx.finalize_after,
    )


def _finalize_if_decided(
    ctx: MigrationContext, leadership: Leadership, known: dict[str, ShardState]
) -> str | None:
    """Finalize now when this leader's window is 0 or a decision was taken already (a leader
    killed while finalizing); the version finalized."""
    found = read_pending(ctx.consensus)
    if found is None:
        return None
    pending, version = found
    if pending.finalizing is None:
        if ctx.finalize_after != 0:
            _keep_window(ctx, leadership, pending, version)
            return None
        request_finalization(ctx.consensus, requested_by=ctx.process_id, reason="immediately")
    done = complete_finalization(ctx, leadership.fence, known)
    return None if done is None else done.version


def _keep_window(
    ctx: MigrationContext, leadership: Leadership, pending: PendingUpgrade, version: int
) -> None:
    """A leader serving a pending upgrade (a restart, a later generation of its release) with
    another ``--finalize-after`` moves the automatic finalization to its own setting."""
    at = None if ctx.finalize_after is None else pending.since + ctx.finalize_after
    if at != pending.finalize_at:
        moved = attrs.evolve(pending, finalize_at=at)
        ctx.consensus.commit([pending_write_op(moved, version)], fence=leadership.fence)


def _retract_stale_entries(
    ctx: MigrationContext, catalog: CatalogState, fence: Fence
) -> tuple[int, list[str]]:
    """Retract entries of earlier versions and of this version at lower generations.

    Also retracted: our own entries the catalog does not use (the same version was promoted
    before at a lower generation). Entries of later versions stay (an aborted upgrade to a newer
    release may be retried). The shards they name are queued for finalization unless the
    catalog names them: an entry of an earlier, promoted upgrade names the collection's
    *current* shard.
    """
    migration = ctx.migration_shard()
    me = (ctx.version, ctx.deploy_generation)
    current = catalog.shard_ids()
    stale: list[MigrationEntry] = []
    for entry in migration.entries():
        key = (Version.parse(entry.version), entry.deploy_generation)
        older = key[0] < me[0] or (key[0] == me[0] and key[1] < me[1])
        # Our own entries the switched catalog does not use: the catalog was already at our
        # version (promoted at a lower generation), so our read-only shards were never needed.
        unused_own = key == me and entry.shard_id not in current
        if older or unused_own:
            stale.append(entry)
    if not stale:
        return 0, []
    ctx.on_phase(PHASE_FINALIZING)
    referenced = catalog.shard_ids() | {MIGRATION_SHARD_ID}
    retracting = set(stale)
    remaining = {e.shard_id for e in migration.entries() if e not in retracting}
    to_queue = sorted({e.shard_id for e in stale} - referenced - remaining)
    queued = queue_ops(ctx, to_queue)
    # Queue first (fenced), then retract: a crash in between leaves entries a re-run retracts.
    if queued:
        ctx.consensus.commit_chunked(queued, fence=fence)
    migration.retract(stale, fence=fence)
    migration.compact_if_needed(fence=fence)
    own = (str(ctx.version), ctx.deploy_generation)
    retracted = {(e.version, e.deploy_generation) for e in stale} - {own}
    drop_events_of(ctx.consensus, retracted, fence=fence)
    log.info("entries_retracted", entries=len(stale), queued=len(to_queue))
    return len(stale), to_queue
