"""A shard's end of life: moving ``since``, sealing, reader leases, finalization, discarding,
garbage collection of blobs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.blob import BlobInfo
from catalog.consensus import (
    CONNECTION_ERRORS,
    Create,
    Fence,
    decode_json,
    decoding,
    encode_json,
)
from catalog.consensus.watch import (
    NOT_YET,
    NotYet,
    WaitTimeout,
    Watch,
    wait_until,
    watched_children,
)
from catalog.errors import (
    ConnectionLostError,
    ShardError,
)
from catalog.shard.listing import blob_prefix
from catalog.shard.ops import finalized_error
from catalog.shard.shard_access import ShardAccess
from catalog.shard.state import (
    GC_GRACE_SECONDS,
    LEASE_PREFIX,
    Lease,
    ShardState,
    shard_error,
)
from catalog.shard.stored import delete_ops

log = structlog.get_logger(__name__)


def advance_since(shard: ShardAccess, since: int, *, fence: Fence | None = None) -> ShardState:
    """Move ``since`` forward to ``since`` (never back; at most the upper)."""

    def change(state: ShardState) -> ShardState | None:
        if state.finalized:
            raise finalized_error(state)
        if since <= state.since:
            return None
        if since > state.upper:
            raise shard_error(
                f"since {since} would pass the upper {state.upper}",
                shard.shard_id,
                "since-beyond-upper",
                since=since,
                upper=state.upper,
            )
        return attrs.evolve(state, since=since)

    return shard.update(change, fence)


def seal(shard: ShardAccess, *, fence: Fence | None = None) -> ShardState:
    """Refuse every further append (idempotent). Readers may still read."""

    def change(state: ShardState) -> ShardState | None:
        return None if state.sealed else attrs.evolve(state, sealed=True)

    state = shard.update(change, fence)
    shard.log.info("shard_sealed", upper=state.upper)
    return state


def finalize(
    shard: ShardAccess, *, fence: Fence | None = None, wait: float | None = 60.0
) -> ShardState:
    """Seal, refuse new leases, wait for existing leases to end, delete blobs, tombstone.

    Waiting uses a ZooKeeper child watch; ``wait`` bounds it (None: forever) and ShardError
    (reason ``leased``, with the holders) is raised on timeout, leaving the shard mid-way:
    calling finalize again completes it. Finalizing a tombstone is a no-op.
    """
    state = shard.state()
    if state.is_tombstone:
        return state
    if not state.finalized:

        def mark(current: ShardState) -> ShardState | None:
            if current.finalized:
                return None
            return attrs.evolve(current, sealed=True, finalized=True)

        shard.update(mark, fence)
    _wait_for_no_leases(shard, wait)
    shard.blob.delete_prefix(blob_prefix(shard.shard_id))

    def tombstone(current: ShardState) -> ShardState | None:
        if current.is_tombstone:
            return None
        return attrs.evolve(current, batches=(), rollups=())

    state = shard.update(tombstone, fence)
    shard.log.info("shard_finalized", upper=state.upper)
    return state


def discard(shard: ShardAccess, *, fence: Fence | None = None) -> None:
    """Delete a shard that never received a batch (an orphan of a lost race) entirely."""
    try:
        state = shard.state()
    except ShardError:
        return
    if state.batch_count:
        raise shard_error(
            f"shard {shard.shard_id} holds {state.batch_count} batches: finalize it instead",
            shard.shard_id,
            "not-empty",
        )
    shard.consensus.commit(delete_ops(state), fence=fence)
    shard.blob.delete_prefix(blob_prefix(shard.shard_id))
    shard.log.info("shard_discarded")


def _wait_for_no_leases(shard: ShardAccess, wait: float | None) -> None:
    path = shard.consensus.path(shard.key)
    leases: list[str] = []

    def look(watch: Watch) -> NotYet | None:
        nonlocal leases
        try:
            children = watched_children(shard.consensus.client, path, watch)
        except CONNECTION_ERRORS as exc:
            raise ConnectionLostError(
                f"ZooKeeper did not answer listing leases of {shard.shard_id}"
            ) from exc
        leases = sorted(c for c in children or () if c.startswith(LEASE_PREFIX))
        if not leases:
            return None
        shard.log.info("finalize_waiting_for_leases", leases=len(leases))
        return NOT_YET

    try:
        wait_until(look, wait, safety=None)
    except WaitTimeout:
        raise shard_error(
            f"shard {shard.shard_id} is still leased by {len(leases)} readers",
            shard.shard_id,
            "leased",
            leases=leases,
        ) from None


@contextlib.contextmanager
def lease(
    shard: ShardAccess,
    holder: str = "",
    *,
    as_of: int | None = None,
    schema_id: int | None = None,
    state: ShardState | None = None,
) -> Iterator[Lease]:
    """Hold a reader lease while the block runs: finalization waits until it is released.

    ``schema_id`` is the schema the reader reads with, when not the latest: the shard's
    coverage (:mod:`catalog.shard.coverage`) counts it as needed while the lease lives.

    Raises ShardFinalizedError when the shard is finalized (or being finalized). The lease
    is an ephemeral znode, so a reader that dies releases it with its session. ``state`` is
    one the caller read just now (read here when None); the lease carries the state read
    once it is held, for the reader to read.
    """
    state = shard.state() if state is None else state
    if state.finalized:
        raise finalized_error(state)
    # The time this reader reads at (the latest complete one, if not given): ``since`` is
    # never advanced past it while the lease lives (held_since).
    holds = as_of if as_of is not None else max(state.upper - 1, 0)
    lease = {"holder": holder, "created": time.time(), "holds": holds}
    if schema_id is not None:
        lease["schema_id"] = schema_id
    body = encode_json(lease)
    (path,) = shard.consensus.commit(
        [Create(f"{shard.key}/{LEASE_PREFIX}", body, ephemeral=True, sequence=True)]
    )
    key = shard.consensus.key_of(path)
    try:
        # A finalizer that marked the shard before our create may have listed the leases
        # already: re-read (after a sync) and back off, so it never deletes under us.
        shard.consensus.client.sync(shard.consensus.path(shard.key))
        current = shard.state()
        if current.finalized:
            raise finalized_error(current)
        yield Lease(shard_id=shard.shard_id, key=key, holder=holder, state=current)
    finally:
        with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
            shard.consensus.client.delete(shard.consensus.path(key))


def held_since(shard: ShardAccess) -> int | None:
    """The lowest time a reader lease holds (None: no lease holds any): how far ``since``
    may advance without refusing a read under way."""
    found = shard.consensus.get_many(leases(shard))
    holds = []
    for key, value in found.items():
        if value is None:
            continue  # released meanwhile
        raw = decode_json(value.value, key)
        with decoding(key, "reader lease"):
            if "holds" in raw:
                holds.append(int(raw["holds"]))
    return min(holds, default=None)


def leases(shard: ShardAccess) -> list[str]:
    """Keys of the current reader leases."""
    return [
        f"{shard.key}/{child}"
        for child in shard.consensus.children(shard.key)
        if child.startswith(LEASE_PREFIX)
    ]


def referenced_keys(shard: ShardAccess, state: ShardState | None = None) -> set[str]:
    """Every blob key ``state`` references: batches, rollups, key log segments."""
    state = shard.state() if state is None else state
    keys = {b.key(shard.shard_id) for b in shard.batches(state)}
    keys.update(r.key(shard.shard_id) for r in state.rollups)
    keys.update(s.key(shard.shard_id) for s in state.writes.segments)
    return keys


def unreferenced_blobs(shard: ShardAccess) -> tuple[ShardState | None, list[BlobInfo]]:
    """The state (None: the shard is gone) and the blobs below the shard's prefix it does
    not reference, temporary files of crashed writes included (all of them once finalized).

    The listing comes before the state read: a blob committed after the read is in the
    listing, so callers must wait (a grace) before deleting what this returns.
    """
    prefix = blob_prefix(shard.shard_id)
    found = shard.blob.list_info(prefix) + shard.blob.list_temp(prefix)
    try:
        state: ShardState | None = shard.state()
    except ShardError:
        state = None
    referenced = set() if state is None or state.finalized else referenced_keys(shard, state)
    return state, [i for i in found if i.key not in referenced]


def gc_orphans(shard: ShardAccess, *, grace_seconds: float = GC_GRACE_SECONDS) -> list[str]:
    """Delete blobs below the shard's prefix that its state does not reference.

    Only blobs older than ``grace_seconds`` (a writer may be between blob write and CAS),
    temporary files of crashed writes included. Returns the deleted keys.
    """
    _, unreferenced = unreferenced_blobs(shard)
    cutoff = time.time() - grace_seconds
    orphans = [i.key for i in unreferenced if i.mtime <= cutoff]
    shard.blob.delete_many(orphans)
    if orphans:
        shard.log.info("orphans_deleted", count=len(orphans))
    return orphans
