"""The sidecar's ZooKeeper connection and its process node.

:class:`SidecarConnection` connects (kazoo's own retry does the backoff), follows kazoo's
session states (each is passed to ``on_state`` from kazoo's event thread, which must never
block), and owns the process node ``processes/<id>``: its registration (an ephemeral of the
current session), its rewrites, its re-registration after a session loss and its removal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState

from catalog.consensus import Consensus, Create, Delete, SetData
from catalog.environment import PROCESSES_KEY
from catalog.errors import ConfigurationError, ConnectionLostError, VersionMismatchError
from catalog.retry import Retry
from orchestrator.clock import ClockOffset
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.states import Stopping
from orchestrator.process_node import process_key
from orchestrator.zookeeper.clients import close, new_client


class SidecarConnection:
    """One sidecar's ZooKeeper session and process node; safe to read from any thread."""

    def __init__(
        self,
        config: SidecarConfig,
        metrics: SidecarMetrics,
        log: Any,
        on_state: Callable[[str], None],
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._log = log
        self._on_state = on_state
        self.client: KazooClient | None = None
        self.consensus: Consensus | None = None
        self.registered = False
        # Every session this process registered under: a node one of them left is ours.
        self._sessions: set[int] = set()
        self._connected = threading.Event()
        self._writes_paused = threading.Event()
        #: The local clock against ZooKeeper's, measured at each write of the process node.
        self.clock = ClockOffset()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def writes_paused(self) -> bool:
        """The session is not connected (SUSPENDED or LOST): a leader's writes wait."""
        return self._writes_paused.is_set()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    @property
    def node_key(self) -> str:
        return process_key(self._config.process_id)

    def connect(self, stopping: threading.Event) -> KazooClient:
        """Connect, waiting until ZooKeeper answers or ``stopping`` is set (Stopping).

        kazoo's own connection retry
        (:func:`orchestrator.zookeeper.clients.reconnect_retry`) does the backoff; this only
        waits for the first CONNECTED, staying responsive to SIGTERM, and says every so often
        that the hosts do not answer.
        """
        config = self._config
        client = new_client(config.zk, session_timeout=config.session_timeout)
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
            if stopping.is_set():
                self._log.warning(
                    "zookeeper_unreachable", zk=config.zk, waited=round(waited, 1), stopping=True
                )
                close(client)
                raise Stopping()
            if waited >= report_at:
                self._log.warning("zookeeper_unreachable", zk=config.zk, waited=round(waited))
                report_at = min(report_at * 2, report_at + 30.0)
        self.client = client
        self._connected.set()
        self._metrics.zookeeper_connected.set(1)
        client.add_listener(self._listener)
        self._log.info("zookeeper_connected", zk=config.zk, session=self.session())
        return client

    def _listener(self, state: str) -> None:
        # kazoo's event thread: never block nor call ZooKeeper here (kazoo issues 356, 381).
        if state == KazooState.CONNECTED:
            self._connected.set()
            self._writes_paused.clear()
        else:
            self._connected.clear()
            self._writes_paused.set()
        self._on_state(str(state))

    def session(self) -> str | None:
        """The current session id in hex (None: no session yet)."""
        client = self.client
        if client is None or client.client_id is None:
            return None
        return f"{client.client_id[0]:#x}"

    def require(self) -> Consensus:
        """The consensus store while connected; ConnectionLostError otherwise."""
        if self.consensus is None or not self.connected:
            raise ConnectionLostError(
                f"not connected to ZooKeeper at {self._config.zk}", zk=self._config.zk
            )
        return self.consensus

    def exists(self, key: str) -> bool:
        return self.consensus is not None and self.consensus.exists(key)

    def register(self, value: Callable[[], bytes]) -> None:
        """Create the process node holding ``value()``. A create whose answer was lost may
        have landed: a node under our id that our own session owns is ours, not another
        process's. A node an earlier session of ours left is ours too: its deletion, which
        the expiry of that session commits, may not have reached the server this session
        reads from yet (a partition is the usual cause); it is deleted, at its version, and
        the create tried again. Another process's is ConfigurationError (exit 2)."""
        consensus = self.consensus
        client = self.client
        assert consensus is not None and client is not None
        consensus.ensure(PROCESSES_KEY)
        process_id = self._config.process_id

        def attempt() -> None:
            if client.client_id is not None:
                self._sessions.add(client.client_id[0])
            try:
                consensus.commit([Create(self.node_key, value(), ephemeral=True)])
            except VersionMismatchError as exc:
                if self.owns_node():
                    self._log.info("registration_recovered", reason="our earlier create landed")
                    return
                stat = client.exists(consensus.path(self.node_key))
                if stat is not None and stat.ephemeralOwner in self._sessions:
                    self._log.info(
                        "registration_replaced",
                        reason="an expired session of ours left the node",
                        session=f"{stat.ephemeralOwner:#x}",
                    )
                    consensus.commit([Delete(self.node_key, stat.version)])
                    raise VersionMismatchError(
                        "an expired session of ours left the process node: create it again",
                        key=self.node_key,
                    ) from exc
                raise ConfigurationError(
                    f"process id {process_id} is in use by another live process",
                    process_id=process_id,
                    suggestion="pass a unique --process-id",
                ) from exc

        Retry(
            retryable=(ConnectionLostError, VersionMismatchError),
            max_attempts=10,
            deadline=self._config.session_timeout,
            base_delay=0.05,
        )(attempt)
        self.registered = True

    def owns_node(self) -> bool:
        """The process node exists and is an ephemeral of this client's current session."""
        assert self.consensus is not None and self.client is not None
        stat = self.client.exists(self.consensus.path(self.node_key))
        session = self.client.client_id
        return stat is not None and session is not None and stat.ephemeralOwner == session[0]

    def write_status(self, value: Callable[[], bytes]) -> None:
        """Rewrite the process node (skipped while not registered or not connected)."""
        if self.consensus is None or not self.registered or not self.connected:
            return
        try:
            before = time.time()
            (stat,) = self.consensus.commit([SetData(self.node_key, value(), -1)])
            self.clock.observe(before, time.time(), stat.mtime)
        except VersionMismatchError:  # our session's node vanished: it comes back on reconnect
            self.registered = False
        except ConnectionLostError:
            self._log.debug("status_write_skipped", reason="connection lost")

    def reregister(self, value: Callable[[], bytes]) -> None:
        """After a new session: create the node again if the old session took it along."""
        if not self.registered or not self.exists(self.node_key):
            self.registered = False
            self.register(value)
        self.write_status(value)

    def lost(self) -> None:
        """The session expired: its ephemeral node is gone with it."""
        self.registered = False

    def close(self, *, deregister: bool) -> None:
        """Delete the process node (when ``deregister``) and close the session."""
        if self.consensus is not None and self.registered and deregister:
            try:
                self.consensus.commit([Delete(self.node_key)])
            except Exception:  # best effort: the ephemeral goes with the session anyway
                self._log.debug("deregister_failed")
        if self.client is not None:
            close(self.client)
