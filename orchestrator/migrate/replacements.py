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
from catalog.shard import Origin, ShardState
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
    catalog: CatalogState | None,
    *,
    fence: Fence | None,
    seen: dict[str, ShardState] | None = None,
) -> dict[str, str]:
    """The replacement shard of each of ``wanted`` keyed by this process's (version,
    generation) and made from ``catalog`` (None: an empty environment): found, or created with
    its schema and origin and recorded in the migration shard. ``seen`` (if given) gets their
    states as read on the way.

    A shard prepared from an earlier catalog (another release was promoted in between and
    replaced or evolved the collection) is not reused: its copy holds another source's rows up
    to another source's position (:mod:`catalog.shard.origin`)."""
    if not wanted:
        return {}
    return ctx.migration_shard().ensure_replacement_shards(
        str(ctx.version),
        ctx.deploy_generation,
        dict(wanted),
        origins={gid: origin_in(catalog, gid) for gid in wanted},
        fence=fence,
        seen=seen,
    )


def origin_in(catalog: CatalogState | None, global_id: str) -> Origin:
    """What a shard prepared for ``global_id`` from ``catalog`` is made from."""
    ref = None if catalog is None else catalog.collections.get(global_id)
    return Origin(None, None) if ref is None else Origin(ref.shard_id, ref.fingerprint)


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
    from catalog.pipeline import EvolveTo, Transform, copy_transformed

    for m in rewrites:
        source = ctx.shard(catalog.collections[m.global_id].shard_id)
        target = ctx.shard(replacements[m.global_id])
        # The merged path, step by step: each transform sees the schema it was written against.
        transforms: list[Transform] = []
        for step in m.rewrites:
            if step.input is not None:
                transforms.append(
                    EvolveTo(step.input, f"the evolutions before the rewrite of {step.version}")
                )
            transforms.append(step.transform)
        if m.evolves_after:
            transforms.append(EvolveTo(m.new_schema))
        ctx.pacer.begin("rewrite" if fence is None else "delta copy", m.name)
        try:
            copied = copy_transformed(
                source, target, transforms, m.new_schema, fence=fence, engine=ctx.engine,
                spark=ctx.spark, pacer=ctx.pacer,
            )  # fmt: skip
        finally:
            ctx.pacer.end()
        log.info("rewrite_copied", collection=m.name, rows=copied)
