"""Rollback: promoting the release a pending upgrade came from (docs/design-upgrade.md).

While an upgrade from Vp to V is pending (``catalog.pending``), Vp may be started at a newer
deploy generation and promoted the usual blue-green way. Its leader serves what Vp served:

* collections V left alone or only evolved: the same shard (V registered only the expansion
  of an evolution; its contraction waits for finalization), read through Vp's own schema;
* collections V replaced: the shard Vp had. The rows V wrote to the replacement since the
  switch are carried back through the *inverse* its release declares (``--rollback-from``
  gives Vp that release). When V wrote rows and there is no inverse, the rollback is refused
  before any write (rule ``rollback-loses-writes``) unless the operator names the collection
  with ``--discard-writes-to``;
* collections V added: Vp has no place for their rows. When V wrote any, the rollback is
  refused the same way unless ``--discard-writes-to`` names them (their shards go with V's
  replacements; a later upgrade to V starts them empty).

A carry is one compare-and-append to the old shard with the write id
``rollback:<replacement>:<from>:<to>`` (the replacement's times it moved): a restart finds it in
the old shard's ledger and carries only what came after (nothing else writes that shard while
the upgrade is pending). Then one fenced transaction restores the previous catalog at the new
generation, deletes the pending node and queues V's replacement shards for finalization.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from catalog.consensus import Delete, Fence
from catalog.environment import (
    MIGRATION_SHARD_ID,
    PENDING_KEY,
    CatalogState,
    catalog_write_op,
    kept_schema_ops,
    read_catalog,
)
from catalog.errors import BadInputError, CatalogError, MigrationRefusedError, VersionMismatchError
from catalog.pending import PendingUpgrade, ReplacedCollection, read_pending
from catalog.release import Mechanism, Release, Version
from catalog.release.manifest import Transform
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Shard, ShardState, consolidate, find_schema_id
from orchestrator.election import Leadership
from orchestrator.migrate.context import (
    PHASE_REWRITE,
    PHASE_SWITCH,
    LeaderResult,
    MigrationContext,
)
from orchestrator.migrate.durable import read_shard_states

__all__ = ["RollbackPlan", "inverse_chain", "plan_rollback", "rollback_as_leader"]

log = structlog.get_logger(__name__)

_PREFIX = "rollback:"


def inverse_chain(release: Release, name: str, since: Version) -> list[Transform] | None:
    """The inverses that take ``name``'s rows in ``release``'s schema back to the schema at
    ``since``: one for each replacement or rewrite after ``since``, newest first; None when
    one of them declares none."""
    steps = sorted(
        (m for m in release.migrations_of(name)
         if m.version > since
         and m.mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE)),
        key=lambda m: m.version,
        reverse=True,
    )  # fmt: skip
    if not steps or any(m.inverse is None for m in steps):
        return None
    return [m.inverse for m in steps if m.inverse is not None]


@attrs.frozen
class CarryBack:
    """Rows the pending upgrade wrote to one replacement, in the previous release's schema."""

    replaced: ReplacedCollection
    lower: int  # the replacement's times [lower, upper) it moves
    upper: int
    rows: pa.Table  # consolidated, in the previous schema plus _ts/_diff

    @property
    def write_id(self) -> str:
        return f"{_PREFIX}{self.replaced.to_shard}:{self.lower}:{self.upper}"


@attrs.frozen(hash=False)
class RollbackPlan:
    """What promoting the previous release does to a pending upgrade."""

    pending: PendingUpgrade
    carry: Mapping[str, CarryBack] = attrs.field(factory=dict)
    discarded: Mapping[str, int] = attrs.field(factory=dict)  # collection -> rows dropped

    def summary(self) -> dict[str, object]:
        """The JSON the status ``plan`` field shows."""
        return {
            "rollback": True,
            "from": self.pending.version,
            "to": self.pending.from_version,
            "carried": {c.replaced.name: c.rows.num_rows for c in self.carry.values()},
            "discarded": dict(self.discarded),
        }


def carried_to(old: ShardState, replaced: ReplacedCollection) -> int:
    """How far the replacement's times were carried back already (its ``upper`` at the
    switch when nothing was): the newest carry mark in the old shard's ledger."""
    prefix = f"{_PREFIX}{replaced.to_shard}:"
    tops = [int(m.id.rsplit(":", 1)[1]) for m in old.writes.marks if m.id.startswith(prefix)]
    return max([replaced.upper, *tops])


def _previous_schema(ctx: MigrationContext, pending: PendingUpgrade, gid: str) -> pa.Schema:
    ref = pending.previous.collections[gid]
    if ref.schema is not None:
        return ref.schema
    builtin = next((b for b in ctx.release.builtins if b.global_id == gid), None)
    if builtin is None:  # pragma: no cover - admission checked the version is the previous one
        raise MigrationRefusedError(f"release {ctx.version} has no collection {ref.name}")
    return builtin.schema


def _inverse_of(
    ctx: MigrationContext, pending: PendingUpgrade, name: str
) -> list[Transform] | None:
    source = ctx.rollback_from
    if source is None:
        return None
    return inverse_chain(source, name, Version.parse(pending.from_version))


def plan_rollback(ctx: MigrationContext, pending: PendingUpgrade) -> RollbackPlan:
    """Read what the pending upgrade wrote to its replacements and carry it back in memory
    (the inverses run here, so one that fails refuses before any write). Writes nothing."""
    source = ctx.rollback_from
    if source is not None and str(source.version) != pending.version:
        raise BadInputError(
            f"--rollback-from names release {source.version}, but the pending upgrade is to "
            f"{pending.version}",
            rollback_from=str(source.version),
            pending=pending.version,
        )
    replaced_names = {r.name for r in pending.replaced.values()}
    found = read_catalog(ctx.consensus)
    # Builtins the upgrade added: the release it came from has no place for their rows.
    added = {
        gid: ref
        for gid, ref in ({} if found is None else found[0].collections).items()
        if gid not in pending.previous.collections
    }
    added_names = {ref.name for ref in added.values()}
    unknown = sorted(set(ctx.discard_writes_to) - replaced_names - added_names)
    if unknown:
        raise BadInputError(
            f"--discard-writes-to names {', '.join(unknown)}, which the upgrade to "
            f"{pending.version} did not replace or add (it replaced: "
            f"{', '.join(sorted(replaced_names)) or 'nothing'}; added: "
            f"{', '.join(sorted(added_names)) or 'nothing'})",
            collections=unknown,
        )
    carry: dict[str, CarryBack] = {}
    discarded: dict[str, int] = {}
    lost: list[str] = []
    # Every state this plan looks at, in one batched read (a thousand collections are a
    # thousand shards on each side).
    states = read_shard_states(
        ctx,
        {ref.shard_id for ref in added.values()}
        | {sid for r in pending.replaced.values() for sid in (r.from_shard, r.to_shard)},
    )
    for ref in sorted(added.values(), key=lambda r: r.name):
        written = _written(ctx, ctx.shard(ref.shard_id), states[ref.shard_id], ref.name, 0)
        if written is None:
            continue
        updates, _upper = written
        if ref.name in ctx.discard_writes_to:
            discarded[ref.name] = int(pc.sum(pc.abs(updates.column(DIFF))).as_py() or 0)
        else:
            lost.append(ref.name)
    for gid, replaced in sorted(pending.replaced.items()):
        target = ctx.shard(replaced.to_shard)
        lower = carried_to(states[replaced.from_shard], replaced)
        written = _written(ctx, target, states[replaced.to_shard], replaced.name, lower)
        if written is None:
            continue
        updates, upper = written
        if replaced.name in ctx.discard_writes_to:
            discarded[replaced.name] = int(pc.sum(pc.abs(updates.column(DIFF))).as_py() or 0)
            continue
        chain = _inverse_of(ctx, pending, replaced.name)
        if chain is None:
            lost.append(replaced.name)
            continue
        from catalog.pipeline.rewrite import transform_table

        try:
            # Projected at the end: fields later evolutions added to the rows are dropped.
            previous = _previous_schema(ctx, pending, gid)
            rows = transform_table(updates, chain, previous, project=True)
        except CatalogError as exc:
            raise MigrationRefusedError(
                f"rollback to {pending.from_version}: the inverse of {replaced.name} failed on "
                f"the rows {pending.version} wrote: {exc.message}",
                rule="rollback-inverse-failed",
                collection=replaced.name,
            ) from exc
        carry[gid] = CarryBack(replaced, lower, upper, rows)
    if lost:
        raise _loses_writes(ctx, pending, lost, added_names)
    return RollbackPlan(pending, carry, discarded)


def _written(
    ctx: MigrationContext, shard: Shard, state: ShardState, name: str, lower: int
) -> tuple[pa.Table, int] | None:
    """What the pending upgrade wrote to ``shard`` (its ``state`` as read once the old
    leader was fenced) from ``lower`` on, consolidated, and the upper it was read to (None:
    nothing). Reading it is a long step (``carry``): its progress shown, held by a throttle or
    a pause."""
    if state.upper <= lower:
        return None
    from catalog.pipeline.updates import read_updates

    ctx.pacer.begin("carry", name)
    try:
        updates = read_updates(shard, state, lower, state.upper, pacer=ctx.pacer)
    finally:
        ctx.pacer.end()
    updates = updates.set_column(
        updates.schema.get_field_index(TS), TS, pa.array([0] * updates.num_rows, pa.uint64())
    )
    updates = consolidate(updates)
    return (updates, state.upper) if updates.num_rows else None


def _loses_writes(
    ctx: MigrationContext, pending: PendingUpgrade, lost: list[str], added: set[str]
) -> CatalogError:
    declared = sorted(r.name for r in pending.replaced.values() if r.name in lost and r.inverse)
    names = ", ".join(lost)
    new = sorted(set(lost) & added)
    if declared and ctx.rollback_from is None:
        fix = (
            f"start {ctx.version} with --rollback-from naming release {pending.version}, whose "
            f"inverses carry them back ({', '.join(declared)}), or "
        )
    else:
        fix = ""
    fix += "discard them with " + " ".join(f"--discard-writes-to {n}" for n in lost)
    why = []
    if set(lost) - added:
        why.append(
            "its release declares no inverse for "
            + ("them" if not new else ", ".join(sorted(set(lost) - added)))
            + (" that this process was given" if declared else "")
        )
    if new:
        why.append(f"{pending.from_version} has no {', '.join(new)} (added by the upgrade)")
    return MigrationRefusedError(
        f"rollback to {pending.from_version} would lose the rows {pending.version} wrote to "
        f"{names}: {'; '.join(why)}",
        rule="rollback-loses-writes",
        collections=lost,
        suggestion=fix,
    )


def _carry(ctx: MigrationContext, carry: CarryBack, schema: pa.Schema, fence: Fence) -> None:
    """One compare-and-append of ``carry`` to the old shard, exactly once by its write id."""
    shard: Shard = ctx.shard(carry.replaced.from_shard)

    def attempt() -> None:
        state = shard.state()
        if shard.find_write(state.writes, carry.write_id) is not None:
            return
        batch = carry.rows.set_column(
            carry.rows.schema.get_field_index(TS),
            TS,
            pa.array([state.upper] * carry.rows.num_rows, pa.uint64()),
        )
        schema_id = find_schema_id(state, schema)
        if schema_id is None:  # the shard keeps a wider schema: write it as a projection
            schema_id = state.schema_id
            batch = migrate_batch(batch, schema, state.live_schema, projection=True)
        result = shard.compare_and_append(
            batch, state.upper, state.upper + 1, schema_id=schema_id, fence=fence,
            write_id=carry.write_id, state=state,
        )  # fmt: skip
        if not result.ok:
            raise VersionMismatchError(f"upper of shard {shard.shard_id} moved", key=shard.key)

    ctx.retry(attempt)
    log.info("rows_carried_back", collection=carry.replaced.name, rows=carry.rows.num_rows,
             shard=carry.replaced.from_shard)  # fmt: skip


def rollback_as_leader(
    ctx: MigrationContext,
    leadership: Leadership,
    catalog: CatalogState,
    catalog_version: int,
    started: float,
) -> LeaderResult:
    """Carry V's writes back, then restore the previous catalog (fenced, idempotent)."""
    found = read_pending(ctx.consensus, schemas=True)
    if found is None:  # pragma: no cover - admission read it; a finalization would fence us
        raise MigrationRefusedError("the upgrade to roll back is no longer pending")
    pending, pending_version = found
    fence = leadership.fence
    plan_ = plan_rollback(ctx, pending)  # the upgrade is fenced now: its writes are all here
    leadership.check()
    if plan_.carry:
        ctx.on_phase(PHASE_REWRITE)
    for gid, carry in plan_.carry.items():
        _carry(ctx, carry, _previous_schema(ctx, pending, gid), fence)
        leadership.check()
    ctx.on_phase(PHASE_SWITCH)
    restored = attrs.evolve(
        pending.previous,
        deploy_generation=leadership.deploy_generation,
        blob_uri=catalog.blob_uri,
        updated_at=time.time(),
        version_generation=leadership.deploy_generation,
        generation_release=str(ctx.version),
    )
    dropped = sorted(catalog.shard_ids() - restored.shard_ids() - {MIGRATION_SHARD_ID})
    from orchestrator.migrate.cleanup import queue_ops

    schema_nodes = kept_schema_ops(ctx.consensus, restored)
    if schema_nodes:
        ctx.consensus.commit_chunked(schema_nodes, fence=fence)
    ctx.consensus.commit(
        [
            catalog_write_op(restored, catalog_version),
            Delete(PENDING_KEY, pending_version),
            *queue_ops(ctx, dropped),
        ],
        fence=fence,
    )
    ctx.on_switched()
    log.info(
        "rolled_back",
        from_version=pending.version,
        to_version=restored.version,
        deploy_generation=restored.deploy_generation,
        carried={c.replaced.name: c.rows.num_rows for c in plan_.carry.values()},
        discarded=dict(plan_.discarded),
    )
    _retract_entries_of(ctx, dropped, fence)
    return LeaderResult(
        bootstrap=False,
        version=restored.version,
        deploy_generation=restored.deploy_generation,
        replaced={},
        queued_for_finalization=tuple(dropped),
        seconds=time.monotonic() - started,
        rolled_back_from=pending.version,
        rolled_back_from_generation=pending.deploy_generation,
        discarded=tuple(sorted(plan_.discarded)),
    )


def _retract_entries_of(ctx: MigrationContext, shard_ids: Sequence[str], fence: Fence) -> None:
    """Retract the migration entries naming the shards the rollback queued (the rolled-back
    upgrade's replacements): a later promotion of it creates and copies new ones."""
    gone = set(shard_ids)
    migration = ctx.migration_shard()
    stale = [e for e in migration.entries() if e.shard_id in gone]
    if stale:
        migration.retract(stale, fence=fence)
