"""The sidecar's ZooKeeper connection: connecting with backoff, session states, re-registering."""

from __future__ import annotations

import queue
import threading
import time

import structlog
from kazoo.client import KazooClient, KazooState

from orchestrator.sidecar.health import SidecarHealth
from orchestrator.sidecar.states import (
    State,
    _Stop,
    _Stopping,
    _ZkState,
)
from orchestrator.zk import close, new_client

log = structlog.get_logger(__name__)


class SidecarConnection(SidecarHealth):
    """Connects (retrying until stopped), follows kazoo's session states through the inbox, and
    re-registers the process node after a session loss."""

    def _connect(self) -> KazooClient:
        """Connect, waiting until ZooKeeper answers or we are stopped.

        kazoo's own connection retry (:func:`orchestrator.zk.reconnect_retry`) does the backoff;
        this only waits for the first CONNECTED, staying responsive to SIGTERM, and says every
        so often that the hosts do not answer.
        """
        client = new_client(self.config.zk, session_timeout=self.config.session_timeout)
        connected = threading.Event()

        def first_connection(state: str) -> bool:
            if state == KazooState.CONNECTED:
                connected.set()
                return True  # kazoo removes a listener that returns True
            return False

        client.add_listener(first_connection)
        client.start_async()
        started = time.monotonic()
        report_at = 1.0
        while not connected.wait(0.1):
            waited = time.monotonic() - started
            if self._stopping:
                self._log.warning(
                    "zookeeper_unreachable",
                    zk=self.config.zk,
                    waited=round(waited, 1),
                    stopping=True,
                )
                close(client)
                raise _Stopping()
            if waited >= report_at:
                self._log.warning("zookeeper_unreachable", zk=self.config.zk, waited=round(waited))
                report_at = min(report_at * 2, report_at + 30.0)
        self._client = client
        self._connected.set()
        self.metrics.zookeeper_connected.set(1)
        client.add_listener(self._zk_listener)
        self._log.info("zookeeper_connected", zk=self.config.zk, session=self._session())
        return client

    def _sleep(self, seconds: float) -> None:
        """Wait, but wake for a stop request (and keep other messages for later)."""
        deadline = time.monotonic() + seconds
        kept: list[object] = []
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    message = self._inbox.get(timeout=left)
                except queue.Empty:
                    break
                if isinstance(message, _Stop):
                    raise _Stopping()
                kept.append(message)
        finally:
            for message in kept:
                self._inbox.put(message)

    def _zk_listener(self, state: str) -> None:
        # kazoo's event thread: never block nor call ZooKeeper here (kazoo issues 356, 381).
        if state == KazooState.CONNECTED:
            self._connected.set()
            self._writes_paused.clear()
        else:
            self._connected.clear()
            self._writes_paused.set()
        self._inbox.put(_ZkState(str(state)))

    def _on_zk_state(self, state: str) -> None:
        self.metrics.zookeeper_connected.set(1 if state == KazooState.CONNECTED else 0)
        if state == KazooState.SUSPENDED:
            self._log.warning("zookeeper_suspended", writes_paused=self._leadership is not None)
        elif state == KazooState.LOST:
            self._log.warning("zookeeper_session_lost", leader=self._leadership is not None)
            self._step_down("session expired")
            self._registered = False
        elif state == KazooState.CONNECTED:
            self._log.info("zookeeper_reconnected", session=self._session())
            self._deferring(self._reregister)
            self._pending = True

    def _step_down(self, reason: str) -> None:
        """Our session expired while leading: its candidate node (what made us leader) is gone
        and a successor of our generation may already hold a newer epoch. Leadership ends
        here, not the process: it re-checks and re-joins the election with its next session
        (orchestrator.election), so an environment whose only leader expired gets one again.
        A write of the old leadership still in flight carries its epoch's fence, valid only
        while nobody took over."""
        leadership, self._leadership = self._leadership, None
        if leadership is None:
            return
        self.metrics.leader.set(0)
        self._log.error("leadership_lost", epoch=leadership.epoch, reason=reason, rejoining=True)
        self._check = None
        self._resume_state = None
        self._unreadable = None
        self._set_state(State.CHECKING, phase=f"{reason}: rejoining the election")
        self._pending = True

    def _reregister(self) -> None:
        """A new session lost our ephemeral node (the election re-joins on its own)."""
        if not self._registered or not self._consensus_exists(self._node_key):
            self._registered = False
            self._register()
        self._write_status()
