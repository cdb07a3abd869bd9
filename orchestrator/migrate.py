"""The read-only and leader migration algorithms of DESIGN.md section 5.

A process runs ``check_read_only`` first (every process, leader or not), then, once elected,
``migrate_as_leader`` with its :class:`~orchestrator.election.Leadership`. The writes each makes:

read-only
    only migration-shard entries and shards keyed by its *own* ``(version, generation)``: a
    replacement or rewrite target found at exactly that key is reused, otherwise created and its
    entry compare-and-appended (racing processes of the same key converge on the winner's entry).
    Evolutions are checked against the shard's whole schema history; nothing else is written, so
    any other release, older ones included, can still start.

leader (every write carries the epoch check)
    1. the same replacement shards (plus shards for builtins new in this release);
    2. ``compare_and_evolve_schema`` for evolutions: a schema already registered is reused;
       otherwise evolve; on a lost race re-read: same schema -> done, compatible -> retry,
       otherwise halt. Fields a newer release's crashed leader registered are kept, not
       deleted (:func:`registration_schema`), so that release can still start later;
    3. rewrite targets receive the delta of their source shard since the read-only copy;
    4. **one** transaction switches the catalog (version, generation, collection -> shard,
       fingerprints) and queues the replaced and removed shards for finalization, so a crash
       can never leave a queued shard that the catalog still names;
    5. migration-shard entries of earlier versions (and of this version at lower generations)
       are retracted, and their shards queued for finalization unless the catalog names them.

Every step is idempotent: a leader killed between any two writes is succeeded by a process that
re-plans from the durable state and completes the same work.

A read-only process killed between creating replacement shards and appending their entries
leaves shards nothing names. The serving leader collects them (:func:`collect_orphan_shards`,
after a grace period and only while no other process is checking): it seals and queues them
in one transaction conditioned on the catalog and the migration shard, and an entry append
is conditioned on its shards' versions, so no entry can ever name a collected shard.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Check, Consensus, Create, Delete, Fence, Op, SetData
from catalog.environment import (
    CATALOG_KEY,
    CONTAINER_KEYS,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    PROCESSES_KEY,
    SHARDS_KEY,
    CatalogState,
    CollectionRef,
    catalog_write_op,
    read_catalog,
)
from catalog.errors import (
    FencedError,
    MigrationRefusedError,
    SchemaIncompatibleError,
    ShardError,
    VersionMismatchError,
)
from catalog.migration import MigrationEntry, MigrationShard
from catalog.release import (
    CatalogSnapshot,
    CollectionState,
    Mechanism,
    Plan,
    PlannedMigration,
    Release,
    Version,
    plan,
)
from catalog.retry import CasRetry
from catalog.schema import fingerprint
from catalog.shard import Shard, ShardState, evolve_op, read_states, shard_key
from orchestrator.election import Leadership

log = structlog.get_logger(__name__)

PHASE_CHECKING = "checking"
PHASE_REPLACEMENTS = "writing replacements"
PHASE_SCHEMAS = "registering schemas"
PHASE_REWRITE = "copying rewrites"
PHASE_SWITCH = "switching collections"
PHASE_FINALIZING = "finalizing"


def _no_phase(_phase: str) -> None:
    return None


@attrs.frozen
class MigrationContext:
    """Everything a migration run needs; no global state."""

    consensus: Consensus
    blob: BlobStore
    release: Release
    deploy_generation: int
    process_id: str
    on_phase: Callable[[str], None] = _no_phase
    retry: CasRetry = attrs.field(factory=CasRetry)

    @property
    def version(self) -> Version:
        return self.release.version

    def shard(self, shard_id: str) -> Shard:
        return Shard(self.consensus, self.blob, shard_id)

    def migration_shard(self) -> MigrationShard:
        return MigrationShard(self.consensus, self.blob)


@attrs.frozen(hash=False)
class CheckResult:
    """Outcome of the read-only run (step 4 of DESIGN.md section 5)."""

    bootstrap: bool
    catalog_version: str | None
    catalog_generation: int | None
    plan: Plan | None
    replacement_shards: Mapping[str, str] = attrs.field(factory=dict)
    release_version: str | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON the status ``plan`` field shows."""
        if self.bootstrap:
            return {"bootstrap": True, "from": None, "to": self.release_version}
        assert self.plan is not None
        counts: dict[str, int] = {}
        for m in self.plan.migrations:
            counts[m.mechanism.value] = counts.get(m.mechanism.value, 0) + 1
        return {
            "bootstrap": False,
            "from": self.catalog_version,
            "to": str(self.plan.to_version),
            "counts": counts,
            "new_builtins": [b.name for b in self.plan.new_builtins],
            "removed_builtins": [c.name for c in self.plan.removed_builtins],
            "migrations": [
                {
                    "name": m.name,
                    "global_id": m.global_id,
                    "mechanism": m.mechanism.value,
                    "shard_id": self.replacement_shards.get(m.global_id),
                }
                for m in self.plan.migrations
            ],
        }


@attrs.frozen(hash=False)
class LeaderResult:
    """What a leader run changed."""

    bootstrap: bool
    version: str
    deploy_generation: int
    evolved: tuple[str, ...] = ()
    replaced: Mapping[str, str] = attrs.field(factory=dict)
    queued_for_finalization: tuple[str, ...] = ()
    retracted_entries: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "evolved": list(self.evolved),
            "replaced": dict(self.replaced),
            "queued_for_finalization": list(self.queued_for_finalization),
            "retracted_entries": self.retracted_entries,
            "seconds": round(self.seconds, 3),
        }


# --- reading the durable state ---------------------------------------------------------------


def _read_shard_states(ctx: MigrationContext, shard_ids: set[str]) -> dict[str, ShardState]:
    """Every named shard's state in one pipelined read."""
    states = read_states(ctx.consensus, sorted(shard_ids))
    missing = sorted(sid for sid, st in states.items() if st is None)
    if missing:
        raise MigrationRefusedError(
            f"the catalog names shards that do not exist: {', '.join(missing[:5])}",
            shards=missing,
        )
    return {sid: st for sid, st in states.items() if st is not None}


def _snapshot(catalog: CatalogState, shards: Mapping[str, ShardState]) -> CatalogSnapshot:
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
    latest = state.live_schema
    wider_type = _widen(pa.struct(list(latest)), pa.struct(list(old)), pa.struct(list(new)))
    if wider_type.equals(pa.struct(list(new))):
        return new
    wider = pa.schema(list(wider_type), metadata=new.metadata)
    try:
        evolve_op(state, wider)
    except SchemaIncompatibleError:
        return new
    return wider


def _widen(latest: pa.DataType, old: pa.DataType | None, new: pa.DataType) -> pa.DataType:
    """``new`` with the fields of ``latest`` that neither ``old`` nor ``new`` has, recursively
    through structs and list elements (see :func:`registration_schema`)."""
    if pa.types.is_struct(latest) and pa.types.is_struct(new):
        olds = {f.name: f for f in old} if old is not None and pa.types.is_struct(old) else {}
        news = {f.name: f for f in new}
        fields: list[pa.Field] = []
        for field in latest:
            if field.name in news:
                mine = news[field.name]
                before = olds[field.name].type if field.name in olds else None
                fields.append(mine.with_type(_widen(field.type, before, mine.type)))
            elif field.name not in olds:
                fields.append(field)  # added by someone else since the catalog's schema
        fields += [f for f in new if latest.get_field_index(f.name) < 0]
        return pa.struct(fields)
    for is_list, make in (
        (pa.types.is_list, pa.list_),
        (pa.types.is_large_list, pa.large_list),
    ):
        if is_list(latest) and is_list(new):
            before = old.value_field.type if old is not None and is_list(old) else None
            inner = _widen(latest.value_field.type, before, new.value_field.type)
            return make(new.value_field.with_type(inner))
    return new


def _refuse_fenced_or_older(ctx: MigrationContext, catalog: CatalogState) -> None:
    if ctx.deploy_generation < catalog.deploy_generation:
        raise FencedError(
            f"deploy generation {ctx.deploy_generation} is fenced: the catalog is at generation "
            f"{catalog.deploy_generation}",
            deploy_generation=ctx.deploy_generation,
            catalog_generation=catalog.deploy_generation,
        )
    if ctx.version < Version.parse(catalog.version):
        raise MigrationRefusedError(
            f"release {ctx.version} is older than the catalog's durable version {catalog.version}; "
            "downgrades are not supported",
            version=str(ctx.version),
            catalog_version=catalog.version,
            suggestion=f"start a release at or above {catalog.version}",
        )


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


# --- rewrite --------------------------------------------------------------------------------


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
        copied = copy_transformed(source, target, transforms, m.new_schema, fence=fence)
        log.info("rewrite_copied", collection=m.name, rows=copied)


# --- leader -----------------------------------------------------------------------------------


def find_schema_id(state: ShardState, schema: pa.Schema) -> int | None:
    """The id under which live ``schema`` is registered on the shard, if it is.

    A release may keep an older schema the shard has since evolved past (an older release
    starting after a newer leader registered schemas and crashed): it then reads and writes
    with that older id, and nothing needs registering.
    """
    for schema_id in range(len(state.schemas) - 1, -1, -1):
        if state.live(schema_id).equals(schema, check_metadata=False):
            return schema_id
    return None


def _evolve_all(
    ctx: MigrationContext, evolutions: list[PlannedMigration], catalog: CatalogState, fence: Fence
) -> list[str]:
    """Register each evolution's schema on its shard, batched, with done/retry/halt."""
    pending = {m.global_id: m for m in evolutions}
    done: list[str] = []

    def attempt() -> None:
        states = _read_shard_states(ctx, {catalog.collections[gid].shard_id for gid in pending})
        ops: list[Op] = []
        batch: list[str] = []
        for gid, m in list(pending.items()):
            shard_id = catalog.collections[gid].shard_id
            state = states[shard_id]
            target = registration_schema(state, m.old_schema, m.new_schema)
            if find_schema_id(state, m.new_schema) is not None or (
                find_schema_id(state, target) is not None
            ):
                # Already registered (an earlier run, or an older schema this release keeps).
                pending.pop(gid)
                done.append(m.name)
                continue
            try:
                op, _ = evolve_op(state, target)
            except SchemaIncompatibleError as exc:
                # The shard moved to a schema ours is not compatible with: halt (fenced).
                raise FencedError(
                    f"collection {m.name}: shard {shard_id} holds a schema newer than this "
                    f"release can evolve ({exc.message})",
                    collection=m.name,
                    shard_id=shard_id,
                ) from exc
            if op is not None:
                ops.append(op)
            batch.append(gid)
        if ops:
            ctx.consensus.commit_chunked(ops, fence=fence)
        for gid in batch:
            done.append(pending.pop(gid).name)

    if pending:
        ctx.on_phase(PHASE_SCHEMAS)
        ctx.retry(attempt)
    return sorted(done)


def _bootstrap(ctx: MigrationContext, leadership: Leadership, started: float) -> LeaderResult:
    """An empty environment: create the migration shard, every builtin's shard, the catalog."""
    ctx.consensus.ensure(*CONTAINER_KEYS)
    migration = ctx.migration_shard()
    migration.ensure(fence=leadership.fence)
    ctx.on_phase(PHASE_REPLACEMENTS)
    shards = _ensure_shards(
        ctx, {b.global_id: b.schema for b in ctx.release.builtins}, fence=leadership.fence
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
    )
    ctx.on_phase(PHASE_SWITCH)
    ctx.consensus.commit([catalog_write_op(state, -1)], fence=leadership.fence)
    log.info("bootstrapped", collections=len(state.collections), version=str(ctx.version))
    return LeaderResult(
        bootstrap=True,
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        replaced=shards,
        seconds=time.monotonic() - started,
    )


def migrate_as_leader(ctx: MigrationContext, leadership: Leadership) -> LeaderResult:
    """Step 6: everything a promoted leader does; idempotent and fenced by the epoch."""
    started = time.monotonic()
    found = read_catalog(ctx.consensus)
    if found is None:
        return _bootstrap(ctx, leadership, started)
    catalog, catalog_version = found
    _refuse_fenced_or_older(ctx, catalog)
    shards = _read_shard_states(ctx, catalog.shard_ids())
    plan_ = plan(_snapshot(catalog, shards), ctx.release)
    fence = leadership.fence

    wanted = _replacement_targets(ctx, plan_)
    wanted.update({b.global_id: b.schema for b in plan_.new_builtins})
    if wanted:
        ctx.on_phase(PHASE_REPLACEMENTS)
    # A suspended or superseded leader stops before each step; the fence stops it within one.
    leadership.check()
    replacements = _ensure_shards(ctx, wanted, fence=fence)
    leadership.check()
    evolved = _evolve_all(
        ctx, [m for m in plan_.migrations if m.mechanism is Mechanism.EVOLUTION], catalog, fence
    )
    leadership.check()
    _copy_rewrites(ctx, plan_, catalog, replacements, fence=fence)
    leadership.check()

    # One transaction: the switch and the finalization queue of what it un-references.
    ctx.on_phase(PHASE_SWITCH)
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
    current = _read_shard_states(ctx, {collections[gid].shard_id for gid in kept})
    for gid in kept:
        ref = collections[gid]
        if find_schema_id(current[ref.shard_id], release_schemas[gid]) is None:
            collections[gid] = attrs.evolve(ref, schema=release_schemas[gid])
    new_state = CatalogState(
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        blob_uri=catalog.blob_uri,
        collections=collections,
        updated_at=time.time(),
    )
    referenced = new_state.shard_ids() | {MIGRATION_SHARD_ID}
    unreferenced = sorted(catalog.shard_ids() - referenced)
    queued = _queue_ops(ctx, unreferenced)
    if new_state.to_json() | {"updated_at": 0} != catalog.to_json() | {"updated_at": 0}:
        ctx.consensus.commit([catalog_write_op(new_state, catalog_version), *queued], fence=fence)
    elif queued:
        ctx.consensus.commit(queued, fence=fence)
    log.info(
        "catalog_switched",
        version=new_state.version,
        deploy_generation=new_state.deploy_generation,
        replaced=len(replacements),
        evolved=len(evolved),
    )
    leadership.check()
    retracted, more_queued = _retract_stale_entries(ctx, new_state, fence)
    return LeaderResult(
        bootstrap=False,
        version=str(ctx.version),
        deploy_generation=leadership.deploy_generation,
        evolved=tuple(evolved),
        replaced=replacements,
        queued_for_finalization=tuple(sorted({*unreferenced, *more_queued})),
        retracted_entries=retracted,
        seconds=time.monotonic() - started,
    )


def _queue_ops(ctx: MigrationContext, shard_ids: list[str]) -> list[Op]:
    """Create ops for finalization markers not already queued."""
    already = set(ctx.consensus.children(FINALIZE_KEY))
    return [Create(f"{FINALIZE_KEY}/{sid}", b"") for sid in shard_ids if sid not in already]


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
    remaining = {e.shard_id for e in migration.entries() if e not in stale}
    to_queue = sorted({e.shard_id for e in stale} - referenced - remaining)
    queued = _queue_ops(ctx, to_queue)
    # Queue first (fenced), then retract: a crash in between leaves entries a re-run retracts.
    if queued:
        ctx.consensus.commit_chunked(queued, fence=fence)
    migration.retract(stale, fence=fence)
    log.info("entries_retracted", entries=len(stale), queued=len(to_queue))
    return len(stale), to_queue


# --- finalization -------------------------------------------------------------------------------


def pending_finalization(consensus: Consensus) -> list[str]:
    return consensus.children(FINALIZE_KEY)


def finalize_pending(
    ctx: MigrationContext, fence: Fence | None, *, lease_timeout: float = 0.0
) -> list[str]:
    """Finalize every queued shard the catalog does not name; returns the finalized ids.

    A shard with live reader leases stays queued until a later call (``lease_timeout`` bounds
    how long one call waits for leases). A shard the catalog names again is never finalized: its
    marker is simply removed.
    """
    queued = pending_finalization(ctx.consensus)
    if not queued:
        return []
    found = read_catalog(ctx.consensus)
    referenced = (found[0].shard_ids() if found else set()) | {MIGRATION_SHARD_ID}
    finalized: list[str] = []
    for shard_id in queued:
        marker = f"{FINALIZE_KEY}/{shard_id}"
        if shard_id not in referenced:
            try:
                ctx.shard(shard_id).finalize(fence=fence, wait=lease_timeout)
            except ShardError as exc:
                if exc.details.get("reason") == "leased":
                    continue  # readers still hold leases: a later call finishes it
                if exc.details.get("reason") != "not-found":
                    raise
            finalized.append(shard_id)
        ctx.consensus.commit([Delete(marker)], fence=fence)
    if finalized:
        log.info("shards_finalized", shards=finalized)
    return finalized


# A shard younger than this is never collected as an orphan: its creator may be about to name it.
ORPHAN_GRACE_SECONDS = 600.0
# Process states in which a process may hold shards it created but has not named yet.
_CREATING_STATES = frozenset({"starting", "checking", "migrating"})
_ORPHAN_CHUNK = 50


def _creation_in_flight(consensus: Consensus, process_id: str) -> str | None:
    """The id of another live process that may be creating shards right now, if any."""
    names = [n for n in consensus.children(PROCESSES_KEY) if n != process_id]
    found = consensus.get_many([f"{PROCESSES_KEY}/{n}" for n in names])
    for name in names:
        value = found[f"{PROCESSES_KEY}/{name}"]
        if value is None:
            continue
        try:
            state = value.json().get("state")
        except ValueError:
            state = None
        if state in _CREATING_STATES or state is None:
            return name
    return None


def collect_orphan_shards(
    ctx: MigrationContext,
    fence: Fence | None,
    *,
    grace_seconds: float = ORPHAN_GRACE_SECONDS,
    known_finalized: set[str] | None = None,
) -> list[str]:
    """Queue for finalization the shards nothing references; returns their ids (leader only).

    An orphan is a shard that neither the catalog nor any live migration entry names, that is
    not the migration shard, not queued already and not finalized, and that was created more
    than ``grace_seconds`` ago: what a read-only process leaves behind when it dies between
    creating replacement shards and appending their entries. Nothing is collected while
    another process is starting, checking or migrating, nor before a catalog exists.

    One transaction per chunk seals the orphans and queues them, on condition that the catalog
    and the migration shard are unchanged since they were read; a process that then appends
    entries naming a shard sealed here fails its append (its guards) and creates a new shard,
    so no entry ever names a collected shard. :func:`finalize_pending` finalizes them.
    ``known_finalized`` (kept by the caller between calls) spares re-reading tombstones.
    """
    consensus = ctx.consensus
    busy = _creation_in_flight(consensus, ctx.process_id)
    if busy is not None:
        log.debug("orphan_collection_deferred", busy_process=busy)
        return []
    found = read_catalog(consensus)
    if found is None:
        return []
    catalog, catalog_version = found
    entries, migration_state = ctx.migration_shard().read_live()
    referenced = catalog.shard_ids() | {e.shard_id for e in entries} | {MIGRATION_SHARD_ID}
    skip = referenced | set(pending_finalization(consensus)) | (known_finalized or set())
    candidates = [s for s in consensus.children(SHARDS_KEY) if s not in skip]
    if not candidates:
        return []
    values = consensus.get_many([shard_key(s) for s in candidates])
    now = time.time()
    orphans: list[tuple[str, ShardState]] = []
    for shard_id in candidates:
        value = values[shard_key(shard_id)]
        if value is None:
            continue
        state = ShardState.decode(value.value, value.version)
        if state.finalized:
            if known_finalized is not None:
                known_finalized.add(shard_id)
            continue
        if now - value.created >= grace_seconds:
            orphans.append((shard_id, state))
    guards: list[Op] = [Check(CATALOG_KEY, catalog_version)]
    if migration_state is not None:
        guards.append(Check(shard_key(MIGRATION_SHARD_ID), migration_state.version))
    collected: list[str] = []
    for start in range(0, len(orphans), _ORPHAN_CHUNK):
        chunk = orphans[start : start + _ORPHAN_CHUNK]
        ops = list(guards)
        for shard_id, state in chunk:
            sealed = attrs.evolve(state, sealed=True)
            ops.append(SetData(shard_key(shard_id), sealed.encode(), state.version))
            ops.append(Create(f"{FINALIZE_KEY}/{shard_id}", b""))
        try:
            consensus.commit(ops, fence=fence)
        except VersionMismatchError as exc:
            log.info("orphan_collection_raced", key=exc.details.get("key"))
            break  # something moved: the next call re-reads
        collected.extend(shard_id for shard_id, _ in chunk)
    if collected:
        log.info("orphan_shards_queued", shards=collected)
    return collected
