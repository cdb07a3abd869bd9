"""Cleanup by the serving leader: finalizing queued shards and collecting orphan shards that a
crashed read-only process created but never named."""

from __future__ import annotations

import attrs
import structlog

from catalog.consensus import Check, Consensus, Create, Delete, Fence, Op
from catalog.environment import (
    CATALOG_KEY,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    SHARDS_KEY,
    read_catalog,
)
from catalog.errors import (
    ShardLeasedError,
    ShardNotFoundError,
    VersionMismatchError,
)
from catalog.pending import read_pending
from catalog.shard import ShardState, change_ops, read_stored
from orchestrator.clock import zookeeper_now
from orchestrator.migrate.context import MigrationContext
from orchestrator.process_node import CREATING_STATES, read_processes

log = structlog.get_logger(__name__)


def pending_finalization(consensus: Consensus) -> list[str]:
    return consensus.children(FINALIZE_KEY)


def queue_ops(ctx: MigrationContext, shard_ids: list[str]) -> list[Op]:
    """Create ops for finalization markers not already queued."""
    already = set(pending_finalization(ctx.consensus))
    return [Create(f"{FINALIZE_KEY}/{sid}", b"") for sid in shard_ids if sid not in already]


def _protected(consensus: Consensus) -> set[str]:
    """The shards the release a pending upgrade came from needs (never finalized while it is
    pending: a rollback serves them again)."""
    found = read_pending(consensus)
    return set() if found is None else found[0].protected_shards()


def finalize_pending(
    ctx: MigrationContext, fence: Fence | None, *, lease_timeout: float = 0.0
) -> list[str]:
    """Finalize every queued shard the catalog does not name; returns the finalized ids.

    A shard with live reader leases stays queued until a later call (``lease_timeout`` bounds
    how long one call waits for leases), and so does one the previous release of a pending
    upgrade needs. A shard the catalog names again is never finalized: its marker is simply
    removed.
    """
    queued = pending_finalization(ctx.consensus)
    if not queued:
        return []
    found = read_catalog(ctx.consensus)
    referenced = (found[0].shard_ids() if found else set()) | {MIGRATION_SHARD_ID}
    protected = _protected(ctx.consensus)
    finalized: list[str] = []
    for shard_id in queued:
        marker = f"{FINALIZE_KEY}/{shard_id}"
        if shard_id in protected and shard_id not in referenced:
            continue  # the upgrade is pending: queued until it is final (or rolled back)
        if shard_id not in referenced:
            try:
                ctx.shard(shard_id).finalize(fence=fence, wait=lease_timeout)
            except ShardLeasedError:
                continue  # readers still hold leases: a later call finishes it
            except ShardNotFoundError:
                pass
            finalized.append(shard_id)
        ctx.consensus.commit([Delete(marker)], fence=fence)
    if finalized:
        log.info("shards_finalized", shards=finalized)
    return finalized


# A shard younger than this is never collected as an orphan: its creator may be about to name it.
ORPHAN_GRACE_SECONDS = 600.0


_ORPHAN_CHUNK = 50


def _creation_in_flight(consensus: Consensus, process_id: str) -> str | None:
    """The id of another live process that may be creating shards right now, if any."""
    processes = read_processes(consensus)
    for name in sorted(processes.unreadable):
        if name != process_id:
            return name  # unreadable: it may be creating shards, so wait
    for name, node in sorted(processes.nodes.items()):
        if name != process_id and node.in_states(CREATING_STATES):
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
    referenced |= _protected(consensus)
    skip = referenced | set(pending_finalization(consensus)) | (known_finalized or set())
    candidates = [s for s in consensus.children(SHARDS_KEY) if s not in skip]
    if not candidates:
        return []
    stored = read_stored(consensus, candidates)
    now = zookeeper_now(consensus, fence)  # the heads' ctime is on ZooKeeper's clock too
    orphans: list[tuple[str, ShardState]] = []
    for shard_id in candidates:
        read = stored[shard_id]
        if read is None:
            continue
        state, value = read
        if state.finalized:
            if known_finalized is not None:
                known_finalized.add(shard_id)
            continue
        if now - value.created >= grace_seconds:
            orphans.append((shard_id, state))
    guards: list[Op] = [Check(CATALOG_KEY, catalog_version)]
    if migration_state is not None:
        guards.extend(migration_state.checks())
    collected: list[str] = []
    for start in range(0, len(orphans), _ORPHAN_CHUNK):
        chunk = orphans[start : start + _ORPHAN_CHUNK]
        ops = list(guards)
        for shard_id, state in chunk:
            ops.extend(change_ops(state, attrs.evolve(state, sealed=True))[0])
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
