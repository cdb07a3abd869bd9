"""The read-only algorithm: check evolutions against whole histories, prepare replacement shards
keyed by the process's own ``(version, generation)``; nothing another release reads."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import structlog

from catalog.consensus import Fence
from catalog.environment import (
    CatalogState,
    read_catalog,
)
from catalog.release import (
    Mechanism,
    Plan,
    plan,
)
from orchestrator.migrate.context import (
    PHASE_CHECKING,
    PHASE_REPLACEMENTS,
    PHASE_REWRITE,
    CheckResult,
    MigrationContext,
)
from orchestrator.migrate.durable import _read_shard_states, _refuse_fenced_or_older, _snapshot

log = structlog.get_logger(__name__)


def _replacement_targets(ctx: MigrationContext, plan_: Plan) -> dict[str, pa.Schema]:
    """Collections that need a shard keyed by this process's (version, generation)."""
    wanted = {
        m.global_id: m.new_schema
        for m in plan_.migrations
        if m.mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE)
    }
    return wanted


def _ensure_shards(
    ctx: MigrationContext,
    wanted: Mapping[str, pa.Schema],
    *,
    fence: Fence | None,
) -> dict[str, str]:
    if not wanted:
        return {}
    return ctx.migration_shard().ensure_replacement_shards(
        str(ctx.version),
        ctx.deploy_generation,
        dict(wanted),
        fence=fence,
    )


def check_read_only(ctx: MigrationContext) -> CheckResult:
    """Step 4: plan and sanity-check; write only shards keyed by our own (version, generation)."""
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
    _refuse_fenced_or_older(ctx, catalog)
    shards = _read_shard_states(ctx, catalog.shard_ids())
    plan_ = plan(_snapshot(catalog, shards), ctx.release)
    wanted = _replacement_targets(ctx, plan_)
    if wanted:
        ctx.on_phase(PHASE_REPLACEMENTS)
    replacements = _ensure_shards(ctx, wanted, fence=None)
    _copy_rewrites(ctx, plan_, catalog, replacements, fence=None)
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
    )


def _copy_rewrites(
    ctx: MigrationContext,
    plan_: Plan,
    catalog: CatalogState,
    replacements: Mapping[str, str],
    *,
    fence: Fence | None,
) -> None:
    """Copy each rewritten collection's source updates the target has not seen yet.

    The target shard's upper is the source time copied up to: in read-only mode this copies the
    source as of its current upper; after promotion the source is fenced (its old leader cannot
    append any more), so the leader's run copies only the delta since.
    """
    rewrites = [m for m in plan_.migrations if m.mechanism is Mechanism.REWRITE]
    if not rewrites:
        return
    ctx.on_phase(PHASE_REWRITE)
    from catalog.pipeline import CarryEvolutions, copy_transformed

    for m in rewrites:
        source = ctx.shard(catalog.collections[m.global_id].shard_id)
        target = ctx.shard(replacements[m.global_id])
        transforms = list(m.transforms)
        last_rewrite = max(i.version for i in m.instructions if i.mechanism is Mechanism.REWRITE)
        if any(
            i.mechanism is Mechanism.EVOLUTION and i.version > last_rewrite for i in m.instructions
        ):
            transforms.append(CarryEvolutions(m.new_schema))
        copied = copy_transformed(
            source, target, transforms, m.new_schema, fence=fence, engine=ctx.engine,
            spark=ctx.spark,
        )  # fmt: skip
        log.info("rewrite_copied", collection=m.name, rows=copied)
