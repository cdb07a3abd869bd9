"""A process's candidacy in the election of its deploy generation, in one module.

Its candidate node and the leadership guard writers consult (:class:`Candidacy`); the worker
that applies the events listeners and watches only enqueue (:class:`ElectionWorker`); the
takeover, ONE transaction that bumps the epoch and the catalog's generation, conditioned on
the promotion target and the candidate's own node (:class:`Takeover`); and the election one
process runs (:class:`LeaderElection`), with the events it hears (:class:`ElectionEvent`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from catalog.consensus import (
    CONNECTION_ERRORS,
    Check,
    Consensus,
    Create,
    Fence,
    Op,
    SetData,
    Versioned,
    encode_json,
)
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
    CatalogState,
    candidate_key,
    catalog_write_op,
)
from catalog.errors import (
    CatalogError,
    ConnectionLostError,
    CorruptStateError,
    FencedError,
    LeadershipExpiredError,
)
from catalog.retry import CasRetry
from orchestrator.election.epoch import EpochInfo, Leadership, read_epoch
from orchestrator.election.promotion import Promotion, promotion_of
from orchestrator.events import record_event
from orchestrator.fencing import generation_fence, release_fence

log = structlog.get_logger(__name__)

CANDIDATE_PREFIX: Final = "n_"


# ElectionEvent kinds. Watches: promotion, epoch, catalog, candidates. Session: suspended,
# resumed, lost (a follower's session expired; it re-joins), rejoined. Leadership ends:
# leadership_lost (session expired), superseded (newer epoch or promotion), stepped_down.
EVENT_KINDS: Final = frozenset(
    {
        "promotion",
        "epoch",
        "catalog",
        "candidates",
        "suspended",
        "resumed",
        "lost",
        "rejoined",
        "leadership_lost",
        "superseded",
        "stepped_down",
    }
)


@attrs.frozen
class ElectionEvent:
    """A change ``on_change`` hears about; fields not concerned by ``kind`` are None."""

    kind: str = attrs.field(validator=attrs.validators.in_(EVENT_KINDS))
    is_leader: bool = False
    promotion: int | None = None
    epoch: EpochInfo | None = None
    catalog_version: str | None = None
    catalog_generation: int | None = None
    candidates: tuple[str, ...] = ()
    reason: str | None = None


def candidate_seq(name: str) -> int:
    digits = name[len(CANDIDATE_PREFIX) :]
    return int(digits) if digits.isdigit() else 1 << 62


def session_hex(session_id: int) -> str:
    return f"0x{session_id:x}"


# What a worker step may raise without killing the thread: the next event re-reads anyway.
WORKER_ERRORS: Final[tuple[type[BaseException], ...]] = (CatalogError, *CONNECTION_ERRORS)


class Candidacy:
    """One process's candidacy in the election of its generation: what its collaborators share.

    Every field is changed under ``lock`` (the takeover on the caller's thread, the worker on the
    election's thread); ``active`` is set while the session is connected and verified.
    """

    def __init__(
        self,
        consensus: Consensus,
        process_id: str,
        deploy_generation: int,
        release: str,
    ) -> None:
        self.consensus = consensus
        self.process_id = process_id
        self.deploy_generation = deploy_generation
        #: The version of the release this process runs: a takeover binds the generation to it.
        self.release = release
        self.client: KazooClient = consensus.client
        self.lock = threading.RLock()
        self.leadership: Leadership | None = None
        self.candidate: str | None = None  # key of our candidate node
        self.session_id: int | None = None  # the session the candidate belongs to
        # Set while connected and verified; writers check it before every write.
        self.active = threading.Event()
        self.ended_reason: str | None = None  # why the last leadership ended
        self.joined = False
        self.stopped = False
        self.log = log.bind(process_id=process_id, deploy_generation=deploy_generation)

    @property
    def is_leader(self) -> bool:
        return self.leadership is not None

    @property
    def paused(self) -> bool:
        """True while the session is suspended (or lost): no write may start."""
        return not self.active.is_set()

    def leadership_guard(self, timeout: float = 0.0) -> Leadership:
        """The current leadership, if this process may write right now; call before each write.

        Waits up to ``timeout`` seconds for a suspended session to come back, then raises
        ConnectionLostError (retryable; nothing was written). Raises FencedError when this
        process does not lead (never did, stepped down, superseded or its session expired).
        """
        if self.leadership is None:
            raise self.not_leader()
        if not self.active.wait(timeout):
            raise ConnectionLostError(
                "leadership paused: the ZooKeeper session is suspended",
                process_id=self.process_id,
            )
        leadership = self.leadership
        if leadership is None:
            raise self.not_leader()
        return leadership

    def not_leader(self) -> FencedError:
        reason = self.ended_reason or "not_leader"
        kind = LeadershipExpiredError if reason == "session_lost" else FencedError
        return kind(
            f"process {self.process_id} of generation {self.deploy_generation} does not lead "
            f"({reason})",
            process_id=self.process_id,
            deploy_generation=self.deploy_generation,
            reason=reason,
        )

    def join(self) -> None:
        client_id = self.client.client_id
        if client_id is None:
            raise ConnectionLostError("not connected to ZooKeeper: cannot join the election")
        session_id = int(client_id[0])
        base = candidate_key(self.deploy_generation)
        self.consensus.ensure(base)
        value = encode_json(
            {
                "process_id": self.process_id,
                "session": session_hex(session_id),
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
        )
        (created,) = self.consensus.commit(
            [Create(f"{base}/{CANDIDATE_PREFIX}", value, ephemeral=True, sequence=True)]
        )
        self.candidate = self.consensus.key_of(str(created))
        self.session_id = session_id
        self.active.set()
        self.log.info("election_joined", candidate=self.candidate)

    def own_candidate_stat(self, candidate: str) -> ZnodeStat | None:
        """Our candidate's stat, only if its ephemeralOwner is our current session."""
        try:
            stat = self.client.exists(self.consensus.path(candidate))
        except CONNECTION_ERRORS as exc:
            raise ConnectionLostError(
                f"ZooKeeper did not answer for {candidate}", key=candidate
            ) from exc
        client_id = self.client.client_id
        if stat is None or client_id is None:
            return None
        if stat.ephemeralOwner != client_id[0] or stat.ephemeralOwner != self.session_id:
            self.log.warning(
                "candidate_not_ours",
                candidate=candidate,
                owner=session_hex(stat.ephemeralOwner),
                session=session_hex(int(client_id[0])),
            )
            return None
        return stat

    def end_leadership(self, reason: str) -> bool:
        """Drop leadership (caller holds the lock); True if there was one."""
        had = self.leadership is not None
        self.leadership = None
        if had:
            self.ended_reason = reason
        return had

_Item = tuple[str, Any]


class ElectionWorker:
    """Applies session states and watched changes on the election's own thread (kazoo issues 356
    and 381: listeners must neither block nor call ZooKeeper); ``on_change`` hears the events."""

    def __init__(self, candidacy: Candidacy, on_change: Callable[[ElectionEvent], None]) -> None:
        self._candidacy = candidacy
        self._on_change = on_change
        self.queue: queue.Queue[_Item | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start the thread and the session listener (caller holds the lock); False if they
        were started already."""
        c = self._candidacy
        if self._thread is not None:
            return False
        self._thread = threading.Thread(
            target=self._run, name=f"election-{c.process_id}", daemon=True
        )
        self._thread.start()
        c.client.add_listener(self.on_state)
        return True

    def stop(self) -> None:
        """End the listener and the thread (after what is queued)."""
        self._candidacy.client.remove_listener(self.on_state)
        self.queue.put(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def on_state(self, state: str) -> None:
        c = self._candidacy
        # Runs on kazoo's connection thread: flip the pause flag (no I/O) and hand over.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            c.active.clear()
        self.queue.put(("state", state))

    def data_watch(self, kind: str) -> Callable[..., bool]:
        c = self._candidacy

        def callback(
            data: bytes | None, stat: ZnodeStat | None, _event: WatchedEvent | None = None
        ) -> bool:
            if c.stopped:
                return False  # ends kazoo's DataWatch
            self.queue.put((kind, (data, None if stat is None else stat.version)))
            return True

        return callback

    def children_watch(self, children: list[str]) -> bool:
        c = self._candidacy
        if c.stopped:
            return False
        self.queue.put(("candidates", tuple(sorted(children, key=candidate_seq))))
        return True

    def _run(self) -> None:
        c = self._candidacy
        while True:
            item = self.queue.get()
            if item is None:
                return
            kind, payload = item
            try:
                events = self._apply(kind, payload)
            except WORKER_ERRORS as exc:
                c.log.warning("election_event_failed", kind=kind, error=repr(exc))
                continue
            for event in events:
                self._notify(event)

    def _notify(self, event: ElectionEvent) -> None:
        c = self._candidacy
        if c.stopped and event.kind != "stepped_down":
            return
        try:
            self._on_change(event)
        except Exception:  # a faulty handler must not kill the election's only thread
            c.log.exception("on_change_failed", kind=event.kind)

    def _apply(self, kind: str, payload: Any) -> list[ElectionEvent]:
        c = self._candidacy
        if kind == "notify":
            return [payload]
        with c.lock:
            if c.stopped:
                return []
            if kind == "state":
                return self._apply_state(payload)
            if kind == "candidates":
                return [self._event("candidates", candidates=payload)]
            data, version = payload
            if kind == "promotion":
                return self._apply_promotion(data, version)
            if kind == "epoch":
                return self._apply_epoch(data, version)
            return self._apply_catalog(data)

    def _event(self, kind: str, **fields: Any) -> ElectionEvent:
        c = self._candidacy
        return ElectionEvent(kind, is_leader=c.leadership is not None, **fields)

    def _apply_state(self, state: str) -> list[ElectionEvent]:
        c = self._candidacy
        if state == KazooState.SUSPENDED:
            c.log.warning("session_suspended", leader=c.is_leader)
            return [self._event("suspended")]
        if state == KazooState.LOST:
            # The session expired: its ephemeral candidate is gone and someone else may lead.
            # We stay joined: the next session re-joins at the back, like a follower's, so an
            # environment whose only leader expired is not left without one.
            c.candidate = None
            if c.end_leadership("session_lost"):
                c.log.error("leadership_lost", reason="session_lost")
                return [self._event("leadership_lost", reason="session_lost")]
            c.log.warning("session_lost")
            return [self._event("lost", reason="session_lost")]
        # CONNECTED
        client_id = c.client.client_id
        if client_id is None:
            return []
        if c.candidate is None:
            if c.joined and c.leadership is None:
                c.join()  # a follower whose session expired re-joins at the back
                return [self._event("rejoined")]
            return []
        leadership = c.leadership
        if leadership is not None and not self._still_leading(leadership):
            c.end_leadership("superseded")
            c.log.error("leadership_lost", reason="superseded")
            return [self._event("superseded", reason="superseded")]
        c.active.set()
        c.log.info("session_resumed", leader=c.is_leader)
        return [self._event("resumed")]

    def _still_leading(self, leadership: Leadership) -> bool:
        """After a reconnection: our candidate is ours and nobody took over since."""
        c = self._candidacy
        if c.candidate is None or c.own_candidate_stat(c.candidate) is None:
            return False
        current = read_epoch(c.consensus)
        return current is not None and current.version == leadership.fence.version

    def _apply_promotion(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        c = self._candidacy
        found = None if data is None or version is None else Versioned(data, version)
        target = promotion_of(found)
        events = [self._event("promotion", promotion=target)]
        if target is not None and target > c.deploy_generation and c.leadership is not None:
            self._release("superseded")
            events.append(self._event("superseded", promotion=target, reason="promoted"))
        return events

    def _apply_epoch(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        c = self._candidacy
        info = (
            None
            if data is None or version is None
            else EpochInfo.from_versioned(Versioned(data, version, key=EPOCH_KEY))
        )
        events = [self._event("epoch", epoch=info)]
        leadership = c.leadership
        # Epoch znode versions only grow, so a late event about an older version is harmless.
        if leadership is not None and info is not None and info.version > leadership.fence.version:
            self._release("superseded")
            events.append(self._event("superseded", epoch=info, reason="epoch"))
        return events

    def _apply_catalog(self, data: bytes | None) -> list[ElectionEvent]:
        try:
            catalog = CatalogState.decode(data) if data else None
        except CorruptStateError:
            catalog = None  # still an event: the sidecar re-reads and reports the bad node
        if catalog is None:
            return [self._event("catalog")]
        return [
            self._event(
                "catalog",
                catalog_version=catalog.version,
                catalog_generation=catalog.deploy_generation,
            )
        ]

    def _release(self, reason: str) -> None:
        """End leadership for good and leave the election (caller holds the lock)."""
        c = self._candidacy
        c.end_leadership(reason)
        c.joined = False
        candidate, c.candidate = c.candidate, None
        c.log.warning("leadership_lost", reason=reason)
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                c.client.delete(c.consensus.path(candidate))

class Takeover:
    """Becomes leader when this candidate is the lowest of the promotion target's generation."""

    def __init__(self, candidacy: Candidacy) -> None:
        self._candidacy = candidacy

    def try_take_over(self, *, bootstrap: bool) -> Leadership | None:
        """Become leader if this process is the lowest candidate of the promotion target.

        Returns the Leadership (the same one when already leading), or None when another
        candidate is first, our generation is not promoted, or the session is suspended. With
        ``bootstrap`` (the environment is empty), an absent promotion target is first set to our
        generation. Raises FencedError when a newer generation is promoted or in the catalog,
        GenerationTakenError when our generation runs another release.
        """
        c = self._candidacy
        with c.lock:
            if c.leadership is not None:
                return c.leadership
            if c.candidate is None or c.stopped or c.paused:
                return None
            leadership = CasRetry(max_attempts=20, deadline=10.0)(
                lambda: self._take_over_attempt(bootstrap)
            )
            if leadership is None:
                return None
            c.leadership = leadership
            c.ended_reason = None
        c.log.info("took_over", epoch=leadership.epoch, fence_version=leadership.fence.version)
        # The log is informational; a leader superseded at once learns it from its guard.
        with contextlib.suppress(ConnectionLostError, FencedError):
            record_event(
                c.consensus,
                "leader",
                fence=leadership.fence,
                process_id=c.process_id,
                deploy_generation=c.deploy_generation,
                epoch=leadership.epoch,
            )
        return leadership

    def _take_over_attempt(self, bootstrap: bool) -> Leadership | None:
        c = self._candidacy
        candidate = c.candidate
        if candidate is None:
            return None
        found = c.consensus.get_many([PROMOTION_KEY, EPOCH_KEY, CATALOG_KEY])
        promotion = found[PROMOTION_KEY]
        catalog_found = found[CATALOG_KEY]
        catalog = (
            CatalogState.decode(catalog_found.value)
            if catalog_found is not None and catalog_found.value
            else None
        )
        target = promotion_of(promotion)
        if target is None:
            if not (bootstrap and catalog is None):
                return None
            # Bootstrap of an empty environment: promote ourselves first (a CAS create; a
            # concurrent bootstrapper's create wins and this attempt re-reads).
            asked = Promotion(c.deploy_generation, f"bootstrap:{c.process_id}", time.time())
            c.consensus.cas(PROMOTION_KEY, asked.encode(), -1)
            promotion = c.consensus.get(PROMOTION_KEY)
            target = promotion_of(promotion)
        if target is None or promotion is None:
            return None
        fenced = generation_fence(
            c.deploy_generation,
            catalog=None if catalog is None else catalog.deploy_generation,
            promoted=target,
            acting="cannot take over",
        )
        if fenced is not None:
            raise fenced
        # The catalog read here is checked by the commit below (same generation), or moved to
        # ours and bound to our release by it: a generation never leads for two releases.
        taken = release_fence(c.deploy_generation, c.release, catalog, promoted=target)
        if taken is not None:
            raise taken
        if target < c.deploy_generation:
            return None
        names = c.consensus.children(candidate_key(c.deploy_generation))
        own = candidate.rsplit("/", 1)[-1]
        if not names or min(names, key=candidate_seq) != own:
            return None
        stat = c.own_candidate_stat(candidate)
        if stat is None:
            return None
        epoch_found = found[EPOCH_KEY]
        previous = EpochInfo.from_versioned(epoch_found) if epoch_found is not None else None
        assert c.session_id is not None
        if (
            previous is not None
            and previous.leader == c.process_id
            and previous.session == session_hex(c.session_id)
            and previous.deploy_generation == c.deploy_generation
            and (catalog is None or catalog.deploy_generation == c.deploy_generation)
        ):
            # Our own takeover landed but its answer was lost (a retried attempt): adopt it.
            return self._leadership_at(previous.epoch, previous.version)
        number = (previous.epoch if previous is not None else 0) + 1
        epoch_value = encode_json(
            {
                "epoch": number,
                "leader": c.process_id,
                "deploy_generation": c.deploy_generation,
                "session": session_hex(c.session_id),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "taken_over_at": time.time(),
            }
        )
        ops: list[Op] = [
            Create(EPOCH_KEY, epoch_value)
            if epoch_found is None
            else SetData(EPOCH_KEY, epoch_value, epoch_found.version)
        ]
        if catalog is not None and catalog_found is not None:
            if catalog.deploy_generation == c.deploy_generation:
                ops.append(Check(CATALOG_KEY, catalog_found.version))
            else:
                moved = attrs.evolve(
                    catalog, deploy_generation=c.deploy_generation, generation_release=c.release
                )
                ops.append(catalog_write_op(moved, catalog_found.version))
        ops.append(Check(PROMOTION_KEY, promotion.version))
        ops.append(Check(candidate, stat.version))
        results = c.consensus.commit(ops)
        version = 0 if epoch_found is None else int(results[0].version)
        return self._leadership_at(number, version)

    def _leadership_at(self, epoch: int, version: int) -> Leadership:
        c = self._candidacy
        return Leadership(
            process_id=c.process_id,
            deploy_generation=c.deploy_generation,
            epoch=epoch,
            fence=Fence(EPOCH_KEY, version),
            guard=c.leadership_guard,
        )

class LeaderElection:
    """One process's candidacy in the election of its deploy generation, for the version of
    its ``release`` (a takeover binds the generation to it).

    ``start`` joins; ``try_take_over`` becomes leader when this process is the lowest candidate
    of the promotion target's generation; ``step_down`` releases leadership at once; ``stop``
    also ends the watches and the worker thread. ``on_change`` runs on the election's worker
    thread (never kazoo's), so it may call ZooKeeper and ``try_take_over``.

    It holds its collaborators: the :class:`Candidacy` they share, the :class:`Takeover` and
    the :class:`ElectionWorker`.
    """

    def __init__(
        self,
        consensus: Consensus,
        process_id: str,
        deploy_generation: int,
        *,
        release: str,
        on_change: Callable[[ElectionEvent], None],
    ) -> None:
        self._candidacy = Candidacy(consensus, process_id, deploy_generation, release)
        self._takeover = Takeover(self._candidacy)
        self._worker = ElectionWorker(self._candidacy, on_change)

    @property
    def process_id(self) -> str:
        return self._candidacy.process_id

    @property
    def is_leader(self) -> bool:
        return self._candidacy.is_leader

    @property
    def leadership(self) -> Leadership | None:
        return self._candidacy.leadership

    @property
    def paused(self) -> bool:
        """True while the session is suspended (or lost): no write may start."""
        return self._candidacy.paused

    @property
    def candidate(self) -> str | None:
        """Our candidate node's key, while joined."""
        return self._candidacy.candidate

    def leadership_guard(self, timeout: float = 0.0) -> Leadership:
        """The current leadership, if this process may write right now
        (:meth:`Candidacy.leadership_guard`)."""
        return self._candidacy.leadership_guard(timeout)

    def try_take_over(self, *, bootstrap: bool) -> Leadership | None:
        """Become leader if this process is the lowest candidate of the promotion target
        (:meth:`Takeover.try_take_over`)."""
        return self._takeover.try_take_over(bootstrap=bootstrap)

    def start(self) -> None:
        """Join the election of our generation and start watching (join once ready to lead).

        Idempotent; after :meth:`step_down` it joins again (at the back). Not after ``stop``.
        """
        c, worker = self._candidacy, self._worker
        with c.lock:
            if c.stopped:
                raise RuntimeError(f"election of {c.process_id} was stopped; make a new one")
            started = worker.start()
            if not c.joined:
                c.join()
                c.joined = True
        if not started:
            return
        consensus, client = c.consensus, c.client
        gen_path = consensus.path(candidate_key(c.deploy_generation))
        DataWatch(client, consensus.path(PROMOTION_KEY), worker.data_watch("promotion"))
        DataWatch(client, consensus.path(EPOCH_KEY), worker.data_watch("epoch"))
        DataWatch(client, consensus.path(CATALOG_KEY), worker.data_watch("catalog"))
        ChildrenWatch(client, gen_path, worker.children_watch)

    def step_down(self) -> None:
        """Release leadership (and the candidacy) now, so the next candidate takes over."""
        c = self._candidacy
        with c.lock:
            was_leader = c.leadership is not None
            c.end_leadership("stepped_down")
            c.joined = False
            candidate, c.candidate = c.candidate, None
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                # a node we cannot delete goes with the session anyway
                c.client.delete(c.consensus.path(candidate))
        c.log.info("stepped_down", was_leader=was_leader)
        self._worker.queue.put(("notify", ElectionEvent("stepped_down", reason="stepped_down")))

    def stop(self) -> None:
        """Step down, stop reacting to watches and end the worker thread."""
        self.step_down()
        with self._candidacy.lock:
            self._candidacy.stopped = True
        self._worker.stop()


def fenced_write_guard(
    leading: Callable[[], LeaderElection | None],
    failpoint: Callable[[str], None] | None,
) -> Callable[[str], None]:
    """The hook run before every fenced write: while ``leading()`` names the election this
    process leads, its guard must pass (a SUSPENDED session stops writes at once, inside a
    step, with a retryable ConnectionLostError and nothing sent); then the crash failpoint."""

    def before_fenced_write(key: str) -> None:
        election = leading()
        if election is not None:
            election.leadership_guard()
        if failpoint is not None:
            failpoint(key)

    return before_fenced_write
