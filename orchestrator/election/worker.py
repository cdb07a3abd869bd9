"""The election worker: listeners and watches only enqueue; one thread applies the events."""

from __future__ import annotations

import contextlib
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
from orchestrator.election.core import WORKER_ERRORS, candidate_seq
from orchestrator.election.takeover import Takeover
from orchestrator.election.values import (
    ElectionEvent,
    EpochInfo,
    Leadership,
    promotion_of,
    read_epoch,
)

log = structlog.get_logger(__name__)


class ElectionWorker(Takeover):
    """Applies session states and watched changes on the election's own thread (kazoo issues 356
    and 381: listeners must neither block nor call ZooKeeper)."""

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: flip the pause flag (no I/O) and hand over.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._active.clear()
        self._queue.put(("state", state))

    def _data_watch(self, kind: str) -> Callable[..., bool]:
        def callback(
            data: bytes | None, stat: ZnodeStat | None, _event: WatchedEvent | None = None
        ) -> bool:
            if self._stopped:
                return False  # ends kazoo's DataWatch
            self._queue.put((kind, (data, None if stat is None else stat.version)))
            return True

        return callback

    def _children_watch(self, children: list[str]) -> bool:
        if self._stopped:
            return False
        self._queue.put(("candidates", tuple(sorted(children, key=candidate_seq))))
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kind, payload = item
            try:
                events = self._apply(kind, payload)
            except WORKER_ERRORS as exc:
                self._log.warning("election_event_failed", kind=kind, error=repr(exc))
                continue
            for event in events:
                self._notify(event)

    def _notify(self, event: ElectionEvent) -> None:
        if self._stopped and event.kind != "stepped_down":
            return
        try:
            self._on_change(event)
        except Exception:  # a faulty handler must not kill the election's only thread
            self._log.exception("on_change_failed", kind=event.kind)

    def _apply(self, kind: str, payload: Any) -> list[ElectionEvent]:
        if kind == "notify":
            return [payload]
        with self._lock:
            if self._stopped:
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
        return ElectionEvent(kind, is_leader=self._leadership is not None, **fields)

    def _apply_state(self, state: str) -> list[ElectionEvent]:
        if state == KazooState.SUSPENDED:
            self._log.warning("session_suspended", leader=self.is_leader)
            return [self._event("suspended")]
        if state == KazooState.LOST:
            # The session expired: its ephemeral candidate is gone and someone else may lead.
            # We stay joined: the next session re-joins at the back, like a follower's, so an
            # environment whose only leader expired is not left without one.
            self._candidate = None
            if self._end_leadership("session_lost"):
                self._log.error("leadership_lost", reason="session_lost")
                return [self._event("leadership_lost", reason="session_lost")]
            self._log.warning("session_lost")
            return [self._event("lost", reason="session_lost")]
        # CONNECTED
        client_id = self._client.client_id
        if client_id is None:
            return []
        if self._candidate is None:
            if self._joined and self._leadership is None:
                self._join()  # a follower whose session expired re-joins at the back
                return [self._event("rejoined")]
            return []
        leadership = self._leadership
        if leadership is not None and not self._still_leading(leadership):
            self._end_leadership("superseded")
            self._log.error("leadership_lost", reason="superseded")
            return [self._event("superseded", reason="superseded")]
        self._active.set()
        self._log.info("session_resumed", leader=self.is_leader)
        return [self._event("resumed")]

    def _still_leading(self, leadership: Leadership) -> bool:
        """After a reconnection: our candidate is ours and nobody took over since."""
        if self._candidate is None or self._own_candidate_stat(self._candidate) is None:
            return False
        current = read_epoch(self.consensus)
        return current is not None and current.version == leadership.fence.version

    def _apply_promotion(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        found = None if data is None or version is None else Versioned(data, version)
        target = promotion_of(found)
        events = [self._event("promotion", promotion=target)]
        if target is not None and target > self.deploy_generation and self._leadership is not None:
            self._release("superseded")
            events.append(self._event("superseded", promotion=target, reason="promoted"))
        return events

    def _apply_epoch(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        info = (
            None
            if data is None or version is None
            else EpochInfo.from_versioned(Versioned(data, version, key=EPOCH_KEY))
        )
        events = [self._event("epoch", epoch=info)]
        leadership = self._leadership
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
        self._end_leadership(reason)
        self._joined = False
        candidate, self._candidate = self._candidate, None
        self._log.warning("leadership_lost", reason=reason)
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                self._client.delete(self.consensus.path(candidate))
