"""The read-only algorithm: check evolutions against whole histories, prepare replacement shards
keyed by the process's own ``(version, generation)``; nothing another release reads."""

from __future__ import annotations

import structlog

from catalog.environment import (
    read_catalog,
)
from catalog.pending import read_pending
from catalog.release import (
    plan,
)
from orchestrator.drift import environment_drifts
from orchestrator.migrate.context import (
    PHASE_CHECKING,
    PHASE_REPLACEMENTS,
    CheckResult,
    MigrationContext,
)
from orchestrator.migrate.durable import catalog_snapshot, read_shard_states, refuse_fenced_or_older
from orchestrator.migrate.replacements import copy_rewrites, ensure_shards, replacement_targets
from orchestrator.migrate.rollback import plan_rollback

log = structlog.get_logger(__name__)


def check_read_only(ctx: MigrationContext) -> CheckResult:
    """Step 3 of docs/design-upgrade.md: plan and sanity-check; write only shards keyed by
    our own (version, generation).

    The release a pending upgrade came from plans its rollback instead (reads only)."""
    ctx.on_phase(PHASE_CHECKING)
    found = read_catalog(ctx.consensus)
    if found is None:
        log.info("environment_empty", version=str(ctx.version))
        return CheckResult(
            bootstrap=True,
            catalog_version=None,
            catalog_generation=None,
            plan=None,
            release_version=str(ctx.version),
        )
    catalog, _ = found
    pending = read_pending(ctx.consensus)
    if refuse_fenced_or_older(ctx, catalog, None if pending is None else pending[0]):
        assert pending is not None
        rollback = plan_rollback(ctx, pending[0])
        log.info("rollback_check_done", **rollback.summary())
        return CheckResult(
            bootstrap=False,
            catalog_version=catalog.version,
            catalog_generation=catalog.deploy_generation,
            plan=None,
            release_version=str(ctx.version),
            rollback=rollback,
        )
    shards = read_shard_states(ctx, catalog.shard_ids())
    drifts = environment_drifts(catalog, shards, None if pending is None else pending[0])
    if drifts:
        log.warning(
            "environment_drift",
            count=len(drifts),
            drifts=[f"{d.kind}: {d.collection}" for d in drifts[:10]],
            hint="catalog-upgrade drift --release FILE names every difference",
        )
    plan_ = plan(catalog_snapshot(catalog, shards), ctx.release)
    wanted = replacement_targets(ctx, plan_)
    if wanted:
        ctx.on_phase(PHASE_REPLACEMENTS)
    replacements = ensure_shards(ctx, wanted, catalog, fence=None)
    copy_rewrites(ctx, plan_, catalog, replacements, fence=None)
    log.info(
        "read_only_check_done",
        catalog_version=catalog.version,
        migrations=len(plan_.migrations),
        replacements=len(replacements),
    )
    return CheckResult(
        bootstrap=False,
        catalog_version=catalog.version,
        catalog_generation=catalog.deploy_generation,
        plan=plan_,
        replacement_shards=replacements,
        release_version=str(ctx.version),
        drifts=drifts,
    )
