"""Reading the upgrade status from ZooKeeper in a few batched round trips."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.consensus import CONNECTION_ERRORS, Consensus, Versioned
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    PENDING_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    SHARDS_KEY,
    CatalogState,
)
from catalog.errors import (
    BadInputError,
    BlobError,
    ConnectionLostError,
    CorruptStateError,
    ShardError,
)
from catalog.pending import PendingUpgrade
from orchestrator.clock import clock_warning
from orchestrator.election import EpochInfo
from orchestrator.election.promotion import promotion_of
from orchestrator.events import read_events
from orchestrator.process_node import WAITING_FOR_BOOTSTRAP, decode_processes, process_key
from orchestrator.status.commands import command, connection_of
from orchestrator.status.model import (
    CatalogSummary,
    CollectionStatus,
    Finalization,
    LeaderStatus,
    MigrationEntry,
    ProcessStatus,
    UpgradeStatus,
)

DEFAULT_EVENTS: Final = 20


UNCHANGED: Final = "unchanged"

log = structlog.get_logger(__name__)


def schema_id_of(shard_state: Any) -> int | None:
    """The current schema id of a shard state JSON (``len(schemas) - 1``), None if unknown."""
    if not isinstance(shard_state, Mapping):
        return None
    schemas = shard_state.get("schemas")
    if isinstance(schemas, list) and schemas:
        return len(schemas) - 1
    count = shard_state.get("schema_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count - 1
    return None


def plan_mechanisms(plan: Any) -> dict[str, str]:
    """``global_id`` and ``name`` -> mechanism, from a plan summary (shapes: module doc)."""
    if not isinstance(plan, Mapping):
        return {}
    out: dict[str, str] = {}
    for field in ("migrations", "collections"):
        entries = plan.get(field)
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, Mapping) and entry.get("mechanism"):
                    for key in ("global_id", "name"):
                        if entry.get(key):
                            out[str(entry[key])] = str(entry["mechanism"])
        elif isinstance(entries, Mapping):
            for key, entry in entries.items():
                mechanism = entry.get("mechanism") if isinstance(entry, Mapping) else entry
                if isinstance(mechanism, str):
                    out[str(key)] = mechanism
    return out


def _children_many(consensus: Consensus, keys: Iterable[str]) -> dict[str, list[str]]:
    """Children of several keys in one pipelined round trip (missing keys: no children)."""
    client = consensus.client
    asyncs = [(key, client.get_children_async(consensus.path(key))) for key in keys]
    out: dict[str, list[str]] = {}
    try:
        for key, result in asyncs:
            try:
                out[key] = sorted(result.get())
            except NoNodeError:
                out[key] = []
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer listing the environment") from exc
    return out


T = TypeVar("T")


@attrs.define
class Readable:
    """Runs a decode; a CorruptStateError becomes an error entry of the status (None), so the
    rest of the environment is still shown."""

    errors: list[dict[str, str]]

    def __call__(self, decode: Callable[[], T]) -> T | None:
        try:
            return decode()
        except CorruptStateError as exc:
            self.report(exc)
            return None

    def report(self, exc: CorruptStateError) -> None:
        log.warning("node_unreadable", key=exc.key, error=exc.message)
        self.errors.append({"key": exc.key, "error": exc.message})


#: The headline nodes of an environment, read in one round trip.
HEAD_KEYS: Final = (CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY, PENDING_KEY)


@attrs.frozen
class Heads:
    """An environment's headline nodes, decoded: the catalog, the epoch, the promotion target,
    the pending upgrade (each None when absent, or unreadable: then it is reported)."""

    catalog: CatalogState | None
    epoch: EpochInfo | None
    promotion: int | None
    pending: PendingUpgrade | None

    @classmethod
    def decode(cls, found: Mapping[str, Versioned | None], readable: Readable) -> Heads:
        """From the values of :data:`HEAD_KEYS`; an unreadable node goes to ``readable``."""
        catalog_found = found[CATALOG_KEY]
        catalog = None
        if catalog_found is not None and catalog_found.value:
            catalog = readable(lambda: CatalogState.decode(catalog_found.value, CATALOG_KEY))
        epoch_found = found[EPOCH_KEY]
        epoch = None
        if epoch_found is not None:
            epoch = readable(lambda: EpochInfo.from_versioned(epoch_found))
        promotion = readable(lambda: promotion_of(found[PROMOTION_KEY]))
        pending_found = found[PENDING_KEY]
        pending = None
        if pending_found is not None and pending_found.value:
            pending = readable(lambda: PendingUpgrade.decode(pending_found.value))
        return cls(catalog, epoch, promotion, pending)


def _json_of(found: Versioned | None) -> Any:
    if found is None or not found.value:
        return None
    try:
        return found.json()
    except ValueError:  # a node someone wrote by hand; shown as missing, not a crash
        return None


def _environment_name(consensus: Consensus) -> str:
    return consensus.root.rstrip("/").rsplit("/", 1)[-1]


def _focus_process(
    processes: Iterable[ProcessStatus], leader_id: str | None
) -> ProcessStatus | None:
    """Whose plan describes the upgrade: the leader's, else the newest generation's."""
    with_plan = [p for p in processes if p.plan]
    for process in with_plan:
        if process.id == leader_id:
            return process
    if not with_plan:
        return None
    return max(with_plan, key=lambda p: (p.deploy_generation or -1, p.id))


def read_migration_entries(
    consensus: Consensus, blob_uri: str | None, *, shard_exists: bool = True
) -> tuple[tuple[MigrationEntry, ...], str | None]:
    """The migration shard's live entries (their batches are Parquet blobs), and a warning.

    Empty when the environment has no migration shard (``shard_exists`` False skips the
    look-up). A blob store that cannot be read gives no entries and a warning: status still
    shows everything ZooKeeper holds.
    """
    if blob_uri is None or not shard_exists:
        return (), None
    from catalog.blob import BlobStore
    from catalog.migration import MigrationShard

    try:
        found = MigrationShard(consensus, BlobStore.from_uri(blob_uri)).entries()
    except (BlobError, ShardError, BadInputError) as exc:
        return (), f"migration shard entries unreadable: {exc.message}"
    entries = (
        MigrationEntry(
            global_id=e.global_id,
            version=str(e.version),
            deploy_generation=int(e.deploy_generation),
            shard_id=e.shard_id,
        )
        for e in found
    )
    return tuple(sorted(entries, key=attrs.astuple)), None


def process_warnings(
    processes: Sequence[ProcessStatus], environment: str, zk: str | None
) -> list[str]:
    """What the processes report about the environment: a blob store they cannot reach, drift
    found by a green process's check (shown as warnings, never fatal); a command they name
    acts on ``environment`` through ``zk``."""
    out: list[str] = []
    for process in processes:  # a process that meets an outage of the store says so
        report = process.blob_store
        if isinstance(report, dict) and not report.get("reachable", True):
            since = report.get("since")
            when = time.strftime("%H:%M:%S UTC", time.gmtime(since)) if since else "?"
            out.append(
                f"{process.id} reports the blob store unreachable since {when}: "
                f"{report.get('error')}"
            )
        elif isinstance(report, dict) and report.get("full"):
            since = report.get("since")
            when = time.strftime("%H:%M:%S UTC", time.gmtime(since)) if since else "?"
            out.append(
                f"{process.id} reports the blob store full since {when} (appends answer 503 "
                f"blob-store-full; reads go on): free space or raise the quota: "
                f"{report.get('error')}"
            )
    for process in processes:  # a clock too far from ZooKeeper's: it refuses to lead
        skewed = clock_warning(process.id, process.clock_offset)
        if skewed is not None:
            out.append(skewed)
    waiting = [p for p in processes if p.phase == WAITING_FOR_BOOTSTRAP]
    if waiting:  # an empty environment that nobody promoted or asked to bootstrap
        generations = sorted({p.deploy_generation for p in waiting})
        out.append(
            f"the environment is empty and {len(waiting)} process(es) wait for a bootstrap: "
            f"`{command(environment, zk, 'promote', '--deploy-generation', str(generations[-1]))}`"
            f" makes generation "
            f"{generations[-1]} create it (or start its process with --auto-promote)"
        )
    for process in processes:  # a green process that found drift in its check says so
        drifts = process.plan.get("drift") if isinstance(process.plan, Mapping) else None
        if drifts:
            named = ", ".join(f"{d.get('kind')}: {d.get('collection')}" for d in drifts[:5])
            more = f" and {len(drifts) - 5} more" if len(drifts) > 5 else ""
            out.append(
                f"{process.id} found the environment drifted in its check ({named}{more}); "
                "`catalog-upgrade drift --release FILE` names every difference"
            )
    return out


def read_status(consensus: Consensus, *, events: int = DEFAULT_EVENTS) -> UpgradeStatus:
    """The environment's upgrade status, from ZooKeeper alone, in two pipelined round trips."""
    read_at = time.time()
    # Round trip 1: the headline nodes and the directories.
    found_heads = consensus.get_many(HEAD_KEYS)
    children = _children_many(consensus, [PROCESSES_KEY, FINALIZE_KEY])
    errors: list[dict[str, str]] = []
    readable = Readable(errors)
    heads = Heads.decode(found_heads, readable)
    catalog, epoch, promotion, pending = heads.catalog, heads.epoch, heads.promotion, heads.pending
    catalog_found = found_heads[CATALOG_KEY]
    # Round trip 2: every process node and every referenced shard's state.
    process_keys = [process_key(name) for name in children[PROCESSES_KEY]]
    shard_ids = sorted(catalog.shard_ids()) if catalog is not None else []
    shard_keys = [f"{SHARDS_KEY}/{shard_id}" for shard_id in shard_ids]
    migration_key = f"{SHARDS_KEY}/{MIGRATION_SHARD_ID}"
    if catalog is not None:
        shard_keys.append(migration_key)
    found = consensus.get_many([*process_keys, *shard_keys])
    processes: list[ProcessStatus] = []
    read = decode_processes({name: found[process_key(name)] for name in children[PROCESSES_KEY]})
    processes.extend(read.nodes.values())
    for _name, exc in sorted(read.unreadable.items()):
        readable.report(exc)
    processes.sort(key=lambda p: (p.deploy_generation or -1, p.id))
    leader = None
    if epoch is not None:
        leader = LeaderStatus(
            epoch=epoch, process=next((p for p in processes if p.id == epoch.leader), None)
        )
    focus = _focus_process(processes, epoch.leader if epoch is not None else None)
    mechanisms = plan_mechanisms(focus.plan) if focus is not None else {}
    collections: list[CollectionStatus] = []
    if catalog is not None:
        for gid, ref in sorted(catalog.collections.items()):
            mechanism = mechanisms.get(gid) or mechanisms.get(ref.name)
            if focus is not None and mechanism is None:
                mechanism = UNCHANGED
            collections.append(
                CollectionStatus(
                    global_id=gid,
                    name=ref.name,
                    shard_id=ref.shard_id,
                    schema_id=schema_id_of(_json_of(found[f"{SHARDS_KEY}/{ref.shard_id}"])),
                    mechanism=mechanism,
                )
            )
    summary = CatalogSummary(
        version=catalog.version if catalog is not None else None,
        deploy_generation=catalog.deploy_generation if catalog is not None else None,
        epoch=epoch.epoch if epoch is not None else None,
        promotion_target=promotion,
        blob_uri=catalog.blob_uri if catalog is not None else None,
        updated_at=(catalog.updated_at or None) if catalog is not None else None,
        collections=len(collections),
    )
    entries, warning = read_migration_entries(
        consensus,
        catalog.blob_uri if catalog is not None else None,
        shard_exists=found.get(migration_key) is not None,
    )
    warnings = [warning] if warning else []
    warnings.extend(process_warnings(processes, _environment_name(consensus),
                                     connection_of(consensus)))  # fmt: skip
    finalization = None
    if pending is not None:
        state = "pending" if pending.finalizing is None else "finalizing"
        finalization = Finalization(state, upgrade=pending.status_json())
    elif catalog is not None:
        final = catalog.finalized
        finalization = Finalization("final", finalized=None if final is None else final.to_json())
    return UpgradeStatus(
        finalization=finalization,
        environment=_environment_name(consensus),
        zookeeper=connection_of(consensus),
        catalog=summary,
        bootstrapped=catalog is not None or catalog_found is not None,
        leader=leader,
        processes=tuple(processes),
        collections=tuple(collections),
        migration_entries=entries,
        pending_finalization=tuple(children[FINALIZE_KEY]),
        events=tuple(read_events(consensus, events)),
        read_at=read_at,
        plan_source=focus.id if focus is not None else None,
        warnings=tuple(warnings),
        errors=tuple(errors),
    )
