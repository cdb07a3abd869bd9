"""Blob garbage collection by the serving leader, its grace measured on ZooKeeper time.

Blobs nobody references pile up: an append whose CAS failed or whose outcome stayed unknown, a
compaction that lost its race or crashed before its commit, the inputs a compaction replaced and
the roll-ups a merge replaced (both left here, since a reader may still be on them). A blob is
written *before* the CAS that names it, so a blob unreferenced now may be referenced a moment
later: only one that stayed unreferenced for a grace period may go.

Clocks differ between machines and blob stores, so the grace is measured on ZooKeeper's:

* every sweep first touches ``gc/clock`` (a fenced write); its ``mtime`` is *now*;
* a shard's unreferenced blobs are recorded in ``gc/<shard_id>`` as candidates, with that
  *now* as the time they were first seen;
* a later sweep at least ``grace`` after it deletes the candidates still unreferenced (after
  recording the next candidates, fenced: a superseded leader deletes nothing) and records the
  rest as new candidates.

A shard with per-read leases is skipped (a reader may be on blobs a compaction just replaced),
and so is one being finalized (finalization deletes its blobs itself). A shard with reader
registrations (``catalog.shard.readers``: one per reading process, no write per read) takes one
more sweep: the blobs due are *doomed* with the zxid of the state that no longer names them,
and deleted once every registration says its reads under way read that state or a newer one.

The same sweep retires what finalization leaves: shard tombstones (a finalized state without
batches, kept so a late reader learns "finalized" rather than "not found") once they are
``TOMBSTONE_RETENTION_SECONDS`` old on ZooKeeper's clock, and the empty election containers of
generations below the catalog's.
"""

from __future__ import annotations

from typing import Any

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.consensus import Create, Delete, Fence, Op, SetData, decode_json, decoding, encode_json
from catalog.environment import (
    ELECTION_KEY,
    GC_KEY,
    MIGRATION_SHARD_ID,
    SHARDS_KEY,
    CatalogState,
    read_catalog,
)
from catalog.errors import VersionMismatchError
from catalog.shard import (
    GC_GRACE_SECONDS,
    LEASE_PREFIX,
    body_key,
    delete_ops,
    read_stored,
    shard_key,
)
from catalog.shard.readers import Registration, registration_of
from orchestrator.clock import CLOCK_KEY, zookeeper_now
from orchestrator.migrate.context import MigrationContext

__all__ = ["GC_INTERVAL_SECONDS", "collect_garbage"]

log = structlog.get_logger(__name__)

# A leader sweeps this often (sidecar --gc-interval).
GC_INTERVAL_SECONDS = 300.0
# Tombstones of finalized shards are retired after this long (ZooKeeper time).
TOMBSTONE_RETENTION_SECONDS = 86_400.0
# Candidates recorded per shard and sweep (the rest wait for the next one).
_MAX_CANDIDATES = 2000


@attrs.frozen
class _Record:
    """A shard's ``gc/<shard_id>`` node: the candidates first seen at ``seen_at``, and the
    blobs already doomed, waiting for every reader registration to have read a state of zxid
    ``doomed_at`` or newer."""

    seen_at: float
    candidates: tuple[str, ...]
    doomed: tuple[str, ...] = ()
    doomed_at: int = 0

    @classmethod
    def decode(cls, data: bytes, key: str) -> _Record:
        raw: Any = decode_json(data, key)
        with decoding(key, "garbage candidates"):
            return cls(
                float(raw["seen_at"]),
                tuple(str(k) for k in raw["candidates"]),
                tuple(str(k) for k in raw.get("doomed", ())),
                int(raw.get("doomed_at", 0)),
            )

    def encode(self) -> bytes:
        value: dict[str, Any] = {"seen_at": self.seen_at, "candidates": list(self.candidates)}
        if self.doomed:
            value |= {"doomed": list(self.doomed), "doomed_at": self.doomed_at}
        return encode_json(value)


def _readers(ctx: MigrationContext, shard_key: str) -> tuple[bool, list[Registration]]:
    """Whether a per-read lease holds the shard, and its reader registrations."""
    client = ctx.consensus.client
    leased = False
    found: list[Registration] = []
    for child in ctx.consensus.children(shard_key):
        if not child.startswith(LEASE_PREFIX):
            continue
        key = f"{shard_key}/{child}"
        try:
            data, stat = client.get(ctx.consensus.path(key))
        except NoNodeError:
            continue  # released meanwhile
        registration = registration_of(key, data, int(stat.mzxid))
        if registration is None:
            leased = True
        else:
            found.append(registration)
    return leased, found


def _state_zxid(ctx: MigrationContext, shard_id: str) -> int:
    """The newest mzxid of the shard's state nodes now: a reader whose state read came after
    it reads this state or a newer one."""
    client = ctx.consensus.client
    keys = (shard_key(shard_id), body_key(shard_id))
    stats = [client.exists(ctx.consensus.path(k)) for k in keys]
    return max((int(s.mzxid) for s in stats if s is not None), default=0)


def _sweep_shard(
    ctx: MigrationContext, shard_id: str, now: float, grace: float, fence: Fence | None
) -> list[str]:
    shard = ctx.shard(shard_id)
    key = f"{GC_KEY}/{shard_id}"
    leased, registrations = _readers(ctx, shard.key)
    if leased:
        return []
    # A blob committed after the state read is listed too, but referenced by the next
    # sweep's read: never deleted.
    state, blobs = shard.unreferenced_blobs()
    if state is None or state.finalized:
        return []  # gone, or finalization deletes its blobs itself
    seen_in = _state_zxid(ctx, shard_id)
    unreferenced = sorted(i.key for i in blobs)
    found = ctx.consensus.get(key)
    if found is None:
        if unreferenced:
            record = _Record(now, tuple(unreferenced[:_MAX_CANDIDATES]))
            ctx.consensus.commit([Create(key, record.encode())], fence=fence)
        return []
    record = _Record.decode(found.value, key)
    # Doomed blobs go once every registered reader has read a state that no longer names them.
    still = set(unreferenced)
    ready = not registrations or min(r.reads_after for r in registrations) >= record.doomed_at
    deleting = sorted(set(record.doomed) & still) if ready else []
    waiting = () if ready else record.doomed
    doomed_at = record.doomed_at
    if now - record.seen_at >= grace:
        expired = sorted(set(record.candidates) & still)
        if registrations:  # readers may be on them: doomed now, deleted at a later sweep
            waiting, doomed_at = tuple(sorted({*waiting, *expired})), seen_in
        else:
            deleting = sorted({*deleting, *expired})
        doomed_or_gone = set(record.candidates) | set(deleting) | set(waiting)
        fresh = tuple(k for k in unreferenced if k not in doomed_or_gone)[:_MAX_CANDIDATES]
        record = _Record(now, fresh, waiting, doomed_at)
    elif not deleting and not (ready and record.doomed):
        return []
    else:
        record = attrs.evolve(record, doomed=waiting)
    # Record first (fenced): a leader that was superseded meanwhile deletes nothing.
    if record.candidates or record.doomed:
        ctx.consensus.commit([SetData(key, record.encode(), found.version)], fence=fence)
    else:
        ctx.consensus.commit([Delete(key, found.version)], fence=fence)
    ctx.blob.delete_many(deleting)
    return deleting


def retire_leftovers(
    ctx: MigrationContext,
    catalog: CatalogState,
    now: float,
    fence: Fence | None,
    *,
    retention_seconds: float = TOMBSTONE_RETENTION_SECONDS,
) -> list[str]:
    """Delete tombstones older than the retention and empty election containers of older
    generations; the keys deleted."""
    consensus = ctx.consensus
    named = catalog.shard_ids() | {MIGRATION_SHARD_ID}
    named |= {e.shard_id for e in ctx.migration_shard().entries()}
    others = [s for s in consensus.children(SHARDS_KEY) if s not in named]
    ops: list[Op] = []
    tombstones: list[list[Op]] = []
    for found in read_stored(consensus, others).values():
        if found is None or now - found[1].modified < retention_seconds:
            continue
        if found[0].is_tombstone:
            tombstones.append(delete_ops(found[0]))
    for name in consensus.children(ELECTION_KEY):
        key = f"{ELECTION_KEY}/{name}"
        if name.isdigit() and int(name) < catalog.deploy_generation and not consensus.children(key):
            ops.append(Delete(key))
    retired: list[str] = []
    # One by one: a container a candidate just joined is simply kept.
    for group in [*tombstones, *([op] for op in ops)]:
        try:
            consensus.commit(group, fence=fence)
        except VersionMismatchError:
            continue
        retired.append(group[-1].key)
    if retired:
        log.info("leftovers_retired", keys=len(retired))
    return retired


def collect_garbage(
    ctx: MigrationContext,
    fence: Fence | None,
    *,
    grace_seconds: float = GC_GRACE_SECONDS,
    retention_seconds: float = TOMBSTONE_RETENTION_SECONDS,
) -> list[str]:
    """One sweep over every shard the catalog names and the migration shard; the blob keys
    deleted. Candidate records of shards no longer named are dropped; tombstones and empty
    election containers retire (:func:`retire_leftovers`)."""
    found = read_catalog(ctx.consensus)
    if found is None:
        return []
    now = zookeeper_now(ctx.consensus, fence)
    retire_leftovers(ctx, found[0], now, fence, retention_seconds=retention_seconds)
    shards = sorted(found[0].shard_ids() | {MIGRATION_SHARD_ID})
    deleted: list[str] = []
    for shard_id in shards:
        deleted += _sweep_shard(ctx, shard_id, now, grace_seconds, fence)
    named = set(shards) | {CLOCK_KEY.rsplit("/", 1)[1]}
    stale = [c for c in ctx.consensus.children(GC_KEY) if c not in named]
    if stale:
        ctx.consensus.commit_chunked([Delete(f"{GC_KEY}/{c}") for c in stale], fence=fence)
    if deleted:
        log.info("garbage_collected", blobs=len(deleted), shards=len(shards))
    return deleted
