"""Reader registrations: one lease node per process and shard, made once and advanced by a
heartbeat, so that a read writes nothing to ZooKeeper (Materialize persist's leased readers).

A per-read lease costs two ZooKeeper writes a read (create, delete). A process that reads a
shard instead holds one *registration*: an ephemeral ``lease-`` node like a lease (so every
rule that waits for leases, in any release, waits for it too), whose value says
``"registration": true`` and, rewritten every :data:`HEARTBEAT_SECONDS`:

* ``holds``: the lowest time a read under way reads at (else the last time read), never
  above the upper: ``since`` never passes it (:func:`catalog.shard.lifecycle.held_since`
  reads it like a lease's), and a read at the latest time reads at or above it;
* ``reads_after``: a zxid such that every read of this process under way on the shard read
  its state after that zxid. ``null`` means "no read was under way at this write": the node's
  own ``mzxid`` stands for it. The garbage collection deletes a blob it saw unreferenced in a
  state of zxid ``m`` only once every registration's ``reads_after`` is at least ``m``
  (``orchestrator.migrate.garbage``): every read under way then read that state or a newer
  one, which no longer names the blob.

Each read takes a hold in memory (:meth:`ReaderRegistry.reading`) before it reads the state,
numbered by the last heartbeat sent; the heartbeat is sent on the session under the registry's
lock, so a read numbered after it reads after it (one session's requests are answered in
order). A registration no read used for a whole heartbeat is deleted, so an idle shard, or one
being finalized (its reads moved to the new shard), holds none: finalization waits for leases
as before. A read at an explicit time (``as_of``) takes a per-read lease instead
(:func:`catalog.shard.lifecycle.lease`).

When the session expires its registrations go with it; a read under way then may find a blob
gone and fail (never answer other rows), and the next read registers again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.consensus import CONNECTION_ERRORS, Consensus, decode_json, encode_json
from catalog.consensus.errors import translated
from catalog.errors import ConnectionLostError
from catalog.shard.handle import Shard
from catalog.shard.ops import finalized_error
from catalog.shard.state import LEASE_PREFIX, ShardState

__all__ = ["HEARTBEAT_SECONDS", "ReaderRegistry", "Registration", "registration_of"]

log = structlog.get_logger(__name__)

#: Seconds between two writes of a registration that reads use (and after which one that no
#: read used is deleted).
HEARTBEAT_SECONDS: Final = 5.0


@attrs.frozen
class Registration:
    """A registration as the garbage collection reads it: the zxid every read under way read
    after (``reads_after``, the node's own ``mzxid`` when none was under way)."""

    key: str
    reads_after: int
    holds: int | None


def registration_of(key: str, value: bytes, mzxid: int) -> Registration | None:
    """The registration a lease node holds (None: a per-read lease)."""
    raw: Any = decode_json(value, key) if value else None
    if not isinstance(raw, dict) or not raw.get("registration"):
        return None
    after = raw.get("reads_after")
    holds = raw.get("holds")
    return Registration(
        key, mzxid if after is None else int(after), None if holds is None else int(holds)
    )


@attrs.define
class _Read:
    epoch: int  # the last heartbeat sent when the read began
    at: int  # the time it reads at


@attrs.define
class _Shard:
    """One registration of this process: its node, what it advertises, the reads under way."""

    key: str
    session: int
    #: ``holds`` as last written: ``since`` is held there (a read at the latest time reads
    #: at or above it: uppers only grow).
    holds: int
    #: The time the last read at the latest time read at.
    latest: int
    schema_id: int | None
    reads: dict[int, _Read] = attrs.field(factory=dict)
    used: bool = True  # a read began since the last heartbeat
    #: The mzxid of this node's write at each heartbeat epoch still needed.
    written: dict[int, int] = attrs.field(factory=dict)


class ReaderRegistry:
    """The registrations of one process (``holder``) on one ZooKeeper connection."""

    def __init__(self, consensus: Consensus, holder: str) -> None:
        self._consensus = consensus
        self._holder = holder
        self._lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}
        self._epoch = 0
        self._ids = iter(range(1 << 62))
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @contextlib.contextmanager
    def reading(self, shard: Shard, schema_id: int | None) -> Iterator[ShardState]:
        """Hold a read of ``shard`` at its latest time while the block runs; yields the state
        it reads (read here, after the hold): ShardFinalizedError when the shard is finalized.
        Writes to ZooKeeper only the first time this process reads the shard (its
        registration). A read at an explicit time takes a per-read lease instead."""
        client_id = shard.consensus.client.client_id
        if client_id is None:
            raise ConnectionLostError("not connected to ZooKeeper: cannot read")
        session = int(client_id[0])
        number = next(self._ids)
        with self._lock:
            found = self._shards.get(shard.shard_id)
            if found is not None and found.session != session:
                del self._shards[shard.shard_id]  # its node went with the old session
                found = None
            if found is not None:
                # It reads at the upper it finds, at or above what the node holds.
                found.reads[number] = _Read(self._epoch, found.holds)
                found.used = True
        sent = self._register(shard, schema_id) if found is None else None
        try:
            try:
                # Pipelined behind the registration (if any): the state read answers after
                # ZooKeeper's leader synced the server, so it sees every write acknowledged
                # before the read began (one round trip).
                synced = shard.consensus.client.sync_async(shard.consensus.path(shard.key))
                state = shard.state()
                synced.get(timeout=30)
            except BaseException:
                if sent is not None:  # the read's error stands; a heartbeat drops the node
                    self._abandon(shard, session, number, schema_id, sent)
                raise
            if sent is not None:
                found = self._registered(shard, session, number, schema_id, sent)
            assert found is not None
            if state.finalized:
                raise finalized_error(state)
            with self._lock:
                at = max(state.upper - 1, 0)
                read = found.reads.get(number)
                if read is not None:
                    read.at = at
                found.latest = max(found.latest, at)
            yield state
        finally:
            if found is not None:
                with self._lock:
                    found.reads.pop(number, None)

    def _register(self, shard: Shard, schema_id: int | None) -> Any:
        """Send this process's registration of ``shard`` (its first read): the one write.
        It goes before the read's sync and state read, on the same session, so ZooKeeper
        applies it first (one session's requests are answered in order) and the three take
        one round trip. It holds ``since`` at 0 (it cannot know the time its read will read
        at before that read) until the first heartbeat writes what its reads read at."""
        value = {"holder": self._holder, "created": time.time(), "holds": 0,
                 "registration": True, "reads_after": None}  # fmt: skip
        if schema_id is not None:
            value["schema_id"] = schema_id
        path = shard.consensus.path(f"{shard.key}/{LEASE_PREFIX}")
        with translated("registering a reader", shard.key):
            return shard.consensus.client.create_async(
                path, encode_json(value), ephemeral=True, sequence=True
            )

    def _abandon(
        self, shard: Shard, session: int, number: int, schema_id: int | None, sent: Any
    ) -> None:
        """The registration of a read that failed: kept without its read when it was made (so
        a heartbeat finds it unused and deletes it); nothing when its create failed too (a
        shard that does not exist, a lost connection)."""
        with contextlib.suppress(Exception):
            made = self._registered(shard, session, number, schema_id, sent)
            with self._lock:
                made.reads.pop(number, None)

    def _registered(
        self, shard: Shard, session: int, number: int, schema_id: int | None, sent: Any
    ) -> _Shard:
        """The registration :meth:`_register` sent, once made, with the read ``number``
        holding it."""
        with translated("registering a reader", shard.key):
            key = shard.consensus.key_of(str(sent.get(timeout=30)))
        # Its reads have no heartbeat of this node to read after yet: reads_after 0 (the
        # collection waits) until a heartbeat finds them gone.
        made = _Shard(key, session, 0, 0, schema_id)
        with self._lock:
            raced = self._shards.get(shard.shard_id)
            keep = raced if raced is not None and raced.session == session else made
            self._shards[shard.shard_id] = keep
            keep.reads[number] = _Read(-1, keep.holds)
            keep.used = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, name=f"readers-{self._holder}", daemon=True
                )
                self._thread.start()
        if keep is not made:  # another read of this process registered first
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                shard.consensus.client.delete(shard.consensus.path(key))
        log.debug("reader_registered", shard=shard.shard_id, key=keep.key)
        return keep

    def stop(self) -> None:
        """End the heartbeat (registrations go with the session)."""
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_SECONDS):
            try:
                self.heartbeat()
            except Exception:  # a heartbeat that fails leaves reads_after behind: safe
                log.exception("reader_heartbeat_failed")

    def heartbeat(self) -> None:
        """Advance every registration a read used since the last heartbeat; delete the
        others."""
        client = self._consensus.client
        sent: list[tuple[_Shard, Any, int]] = []
        dropped: list[str] = []
        with self._lock:
            self._epoch += 1
            epoch = self._epoch
            for shard_id, found in list(self._shards.items()):
                if not found.used and not found.reads:
                    del self._shards[shard_id]
                    dropped.append(found.key)
                    continue
                found.used = False
                oldest = min((r.epoch for r in found.reads.values()), default=None)
                after = None if oldest is None else found.written.get(oldest, 0)
                holds = min((r.at for r in found.reads.values()), default=found.latest)
                holds = min(holds, found.latest)
                value: dict[str, Any] = {"holder": self._holder, "holds": holds,
                                         "registration": True, "reads_after": after}
                if found.schema_id is not None:
                    value["schema_id"] = found.schema_id
                # Sent under the lock: a read numbered with this epoch reads after it.
                answer = client.set_async(self._consensus.path(found.key), encode_json(value))
                sent.append((found, answer, holds))
                keep = {r.epoch for r in found.reads.values()}
                found.written = {e: z for e, z in found.written.items() if e in keep}
        for found, answer, holds in sent:
            try:
                stat = answer.get(timeout=30)
            except NoNodeError:
                self._forget(found)
                continue
            except CONNECTION_ERRORS:
                continue  # reads_after stays behind: the collection waits, safely
            with self._lock:
                found.written[epoch] = int(stat.mzxid)
                found.holds = max(found.holds, holds)
        for key in dropped:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                client.delete(self._consensus.path(key))

    def _forget(self, gone: _Shard) -> None:
        with self._lock:
            for shard_id, found in list(self._shards.items()):
                if found is gone:
                    del self._shards[shard_id]
