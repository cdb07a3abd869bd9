"""The election worker: listeners and watches only enqueue; one thread applies the events."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

from catalog.consensus import (
    CONNECTION_ERRORS,
    Versioned,
)
from catalog.environment import EPOCH_KEY, CatalogState
from catalog.errors import CorruptStateError
from orchestrator.election.core import WORKER_ERRORS, Candidacy, candidate_seq
from orchestrator.election.values import (
    ElectionEvent,
    EpochInfo,
    Leadership,
    promotion_of,
    read_epoch,
)

log = structlog.get_logger(__name__)


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
