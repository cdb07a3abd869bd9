"""Replacement shards: which collections need one, creating them, copying rewrites.

Steps both the read-only check (``orchestrator.migrate.read_only``: everything keyed by the
process's own ``(version, generation)``, no fence) and the leader (``orchestrator.migrate.leader``:
the delta since, fenced) take.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import structlog

from catalog.consensus import Fence
from catalog.environment import CatalogState
from catalog.release import Mechanism, Plan
from orchestrator.migrate.context import PHASE_REWRITE, MigrationContext

log = structlog.get_logger(__name__)


def replacement_targets(ctx: MigrationContext, plan_: Plan) -> dict[str, pa.Schema]:
    """Collections that need a shard keyed by this process's (version, generation)."""
    wanted = {
        m.global_id: m.new_schema
        for m in plan_.migrations
        if m.mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE)
    }
    return wanted


def ensure_shards(
    ctx: MigrationContext,
    wanted: Mapping[str, pa.Schema],
    *,
    fence: Fence | None,
) -> dict[str, str]:
    """The replacement shard of each of ``wanted`` keyed by this process's (version,
    generation): found, or created with its schema and recorded in the migration shard."""
    if not wanted:
        return {}
    return ctx.migration_shard().ensure_replacement_shards(
        str(ctx.version),
        ctx.deploy_generation,
        dict(wanted),
        fence=fence,
    )


def copy_rewrites(
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
        ctx.pacer.begin("rewrite" if fence is None else "delta copy", m.name)
        try:
            copied = copy_transformed(
                source, target, transforms, m.new_schema, fence=fence, engine=ctx.engine,
                spark=ctx.spark, pacer=ctx.pacer,
            )  # fmt: skip
        finally:
            ctx.pacer.end()
        log.info("rewrite_copied", collection=m.name, rows=copied)
