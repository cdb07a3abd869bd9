"""Reading the durable state a migration plans from: catalog, shard states, registered schemas."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from catalog.environment import (
    CatalogState,
    CollectionRef,
)
from catalog.errors import (
    MigrationRefusedError,
    SchemaIncompatibleError,
)
from catalog.pending import PendingUpgrade
from catalog.release import (
    CatalogSnapshot,
    CollectionState,
    Version,
)
from catalog.schema import fingerprint
from catalog.schema.widen import widen
from catalog.shard import ShardState, evolve_op, read_states
from orchestrator.fencing import generation_fence
from orchestrator.migrate.context import MigrationContext


def read_shard_states(ctx: MigrationContext, shard_ids: set[str]) -> dict[str, ShardState]:
    """Every named shard's state in one pipelined read."""
    states = read_states(ctx.consensus, sorted(shard_ids))
    missing = sorted(sid for sid, st in states.items() if st is None)
    if missing:
        raise MigrationRefusedError(
            f"the catalog names shards that do not exist: {', '.join(missing[:5])}",
            shards=missing,
        )
    return {sid: st for sid, st in states.items() if st is not None}


def catalog_snapshot(catalog: CatalogState, shards: Mapping[str, ShardState]) -> CatalogSnapshot:
    collections = []
    for ref in catalog.collections.values():
        state = shards[ref.shard_id]
        collections.append(
            CollectionState(
                global_id=ref.global_id,
                name=ref.name,
                fingerprint=ref.fingerprint,
                schema=_cataloged_schema(state, ref),
                history=state.schema,
            )
        )
    return CatalogSnapshot(version=catalog.version, collections=tuple(collections))


def _cataloged_schema(state: ShardState, ref: CollectionRef) -> pa.Schema:
    """The schema the catalog names: the one it keeps, else the registered schema its
    fingerprint names, else the latest.

    They differ only after a leader registered a newer schema and crashed before its switch:
    the catalog still describes the older schema, and plans must start from it.
    """
    if ref.schema is not None:
        return ref.schema
    for schema_id in range(len(state.schemas) - 1, -1, -1):
        live = state.live(schema_id)
        if fingerprint(live) == ref.fingerprint:
            return live
    return state.live_schema


def registration_schema(state: ShardState, old: pa.Schema, new: pa.Schema) -> pa.Schema:
    """The schema a leader registers on ``state``'s shard to evolve it from ``old`` (the
    catalog's) to ``new`` (its release's).

    Normally ``new``. But when a newer release's leader registered fields on the shard and
    crashed before its switch, the latest schema holds fields, at any depth, that neither
    ``old`` nor ``new`` knows. Registering ``new`` would delete them, and a deleted name can
    never be added again: that newer release could never start. They are kept instead (in the
    latest schema's order, with ``new``'s types for the fields it has, ``new``'s added fields
    after them); ``new`` reads it as a projection. When that is not a valid evolution, ``new``
    is registered after all.
    """
    wider = widen(state.live_schema, old, new)
    if wider.equals(new):
        return new
    try:
        evolve_op(state, wider)
    except SchemaIncompatibleError:
        return new
    return wider


def refuse_fenced_or_older(
    ctx: MigrationContext, catalog: CatalogState, pending: PendingUpgrade | None
) -> bool:
    """Refuse a process its catalog fences or that is older than the catalog's version; True
    when it is the rollback of the pending upgrade (the release it came from, while it is not
    being finalized)."""
    fenced = generation_fence(ctx.deploy_generation, catalog=catalog.deploy_generation)
    if fenced is not None:
        raise fenced
    if not ctx.version < Version.parse(catalog.version):
        return False
    me = str(ctx.version)
    if pending is not None and pending.finalizing is None and me == pending.from_version:
        return True
    if pending is not None and pending.finalizing is None:
        raise MigrationRefusedError(
            f"release {me} is older than the catalog's version {catalog.version}, whose upgrade "
            f"is pending: only the release it came from, {pending.from_version}, may be "
            "promoted back",
            rule="rollback-not-allowed",
            version=me,
            catalog_version=catalog.version,
            suggestion=f"start {pending.from_version} to roll back, or a release at or above "
            f"{catalog.version}",
        )
    if pending is not None:
        assert pending.finalizing is not None
        raise MigrationRefusedError(
            f"release {me} is older than the catalog's version {catalog.version}, which is "
            f"being finalized (generation {pending.deploy_generation}, decided by "
            f"{pending.finalizing.requested_by}): it can no longer be rolled back",
            rule="finalized",
            version=me,
            catalog_version=catalog.version,
            finalized_generation=pending.deploy_generation,
            suggestion=f"start a release at or above {catalog.version}",
        )
    final = catalog.finalized
    generation = catalog.deploy_generation if final is None else final.deploy_generation
    raise MigrationRefusedError(
        f"release {me} is older than the catalog's version {catalog.version}, finalized at "
        f"deploy generation {generation}"
        + ("" if final is None else f" by {final.by}")
        + ": a finalized upgrade cannot be rolled back",
        rule="finalized",
        version=me,
        catalog_version=catalog.version,
        finalized_generation=generation,
        suggestion=f"start a release at or above {catalog.version}",
    )
