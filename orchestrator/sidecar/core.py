"""The core of a sidecar: its fields, its process node in ZooKeeper, its events."""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import structlog
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Create, Fence, SetData
from catalog.environment import PROCESSES_KEY
from catalog.errors import (
    ConfigurationError,
    ConnectionLostError,
    CorruptStateError,
    VersionMismatchError,
)
from catalog.release import Release
from catalog.retry import CasRetry, Retry
from catalog.shard.coverage import RollupCounts
from orchestrator import election as election_mod
from orchestrator.events import record_event
from orchestrator.migrate import (
    CheckResult,
    MigrationContext,
)
from orchestrator.process_node import ProcessMode, ProcessNode
from orchestrator.sidecar.config import SidecarConfig
from orchestrator.sidecar.http import SidecarApi, SidecarHttpServer
from orchestrator.sidecar.metrics import SidecarMetrics
from orchestrator.sidecar.states import (
    _RESTING_PHASES,
    State,
)
from orchestrator.sidecar.tls import server_context
from orchestrator.sidecar.tokens import BearerToken, check_exposure

log = structlog.get_logger(__name__)


class SidecarCore:
    """One sidecar process; ``run()`` returns the exit code."""

    def __init__(self, config: SidecarConfig, release: Release) -> None:
        self.config = config
        self.release = release
        self.metrics = SidecarMetrics()
        self.metrics.deploy_generation.set(config.deploy_generation)
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stopping = False
        self._state = State.STARTING
        self._phase: str | None = State.STARTING.value
        self._phase_since = time.time()
        self._phase_started = time.monotonic()
        self._plan: Mapping[str, Any] | None = None
        self._error: Mapping[str, Any] | None = None
        self._started_at = time.time()
        self._client: KazooClient | None = None
        self._consensus: Consensus | None = None
        self._blob: BlobStore | None = None
        self._ctx: MigrationContext | None = None
        self._election: election_mod.LeaderElection | None = None
        self._leadership: election_mod.Leadership | None = None
        self._led = False  # led at some point: its exit events belong to the environment
        self._leader_session: str | None = None  # the session that took over (if leading)
        self._rollup_counts: RollupCounts = {}  # coverage metrics: rollup summaries read once
        self._check: CheckResult | None = None
        self._checked_at: tuple[int | None, int | None] | None = None
        self._epoch: int | None = None
        self._registered = False
        self._ready_recorded = False
        # While leading a migration: each phase entered and when (the upgrade history's).
        self._migration_phases: list[tuple[str, float]] | None = None
        self._joined = False
        self._next_orphan_scan = 0.0
        self._next_gc = time.monotonic() + config.gc_interval  # not at once: after a grace
        self._sweeper: threading.Thread | None = None
        self._known_finalized: set[str] = set()
        self._auto_promoted = False
        self._pending = False
        # A durable node this process cannot decode (orchestrator.sidecar.health), and the state
        # it left for CHECKING because of it.
        self._unreadable: CorruptStateError | None = None
        self._resume_state: State | None = None
        self._degraded_by: str | None = None
        self._connected = threading.Event()
        self._writes_paused = threading.Event()
        # The concrete Sidecar (core plus data plane) is what the HTTP server calls.
        token = (
            BearerToken.from_file(Path(config.http_token_file)) if config.http_token_file else None
        )
        check_exposure(config.http_host, token, config.http_insecure)
        tls = (
            server_context(config.http_tls_cert, config.http_tls_key)
            if config.http_tls_cert and config.http_tls_key
            else None
        )
        self._http = SidecarHttpServer(
            cast(SidecarApi, self), config.http_host, config.http_port, token, tls
        )
        self._retry = CasRetry(on_retry=self.metrics.count_cas_retry)
        self._append_retry = CasRetry(
            max_attempts=20, deadline=5.0, on_retry=self.metrics.count_cas_retry
        )
        self._log = log.bind(
            env=config.env,
            process_id=config.process_id,
            version=str(release.version),
            deploy_generation=config.deploy_generation,
        )

    def _event(self, kind: str, *, fence: Fence | None = None, **fields: Any) -> None:
        """Record an upgrade event; best effort (status history), except that fenced raises."""
        if self._consensus is None or not self._connected.is_set():
            return
        try:
            # A read-only process's events go to its release's own log (the read-only rule);
            # a leader's, and those of a process that led (its exit), to the environment's.
            own = (str(self.release.version), self.config.deploy_generation)
            owner = None if fence is not None or self._led else own
            record_event(
                self._consensus,
                kind,
                fence=fence,
                owner=owner,
                process_id=self.config.process_id,
                **fields,
            )
        except ConnectionLostError:
            self._log.warning("event_not_recorded", kind=kind)

    def _consensus_exists(self, key: str) -> bool:
        return self._consensus is not None and self._consensus.exists(key)

    def _session(self) -> str | None:
        client = self._client
        if client is None or client.client_id is None:
            return None
        return f"{client.client_id[0]:#x}"

    @property
    def _node_key(self) -> str:
        return f"{PROCESSES_KEY}/{self.config.process_id}"

    def status(self) -> ProcessNode:
        """The live status (what the process node holds)."""
        return ProcessNode(
            id=self.config.process_id,
            version=str(self.release.version),
            deploy_generation=self.config.deploy_generation,
            mode=(
                ProcessMode.LEADER if self._leadership is not None else ProcessMode.READ_ONLY
            ).value,
            state=self._state.value,
            phase=self._phase,
            phase_since=self._phase_since,
            plan=self._plan,
            error=self._error,
            host=socket.gethostname(),
            pid=os.getpid(),
            session=self._session(),
            epoch=self._epoch,
            http=self._http.address,
            heartbeat=time.time(),
            started_at=self._started_at,
        )

    def _register(self) -> None:
        """Create this process's node. A create whose answer was lost may have landed: a node
        found under our id that our own session owns is ours, not another process's."""
        consensus = self._consensus
        assert consensus is not None
        consensus.ensure(PROCESSES_KEY)

        def attempt() -> None:
            try:
                consensus.commit([Create(self._node_key, self.status().encode(), ephemeral=True)])
            except VersionMismatchError as exc:
                if not self._owns_node():
                    raise ConfigurationError(
                        f"process id {self.config.process_id} is in use by another live process",
                        process_id=self.config.process_id,
                        suggestion="pass a unique --process-id",
                    ) from exc
                self._log.info("registration_recovered", reason="our earlier create landed")

        Retry(
            retryable=(ConnectionLostError,),
            max_attempts=10,
            deadline=self.config.session_timeout,
            base_delay=0.05,
        )(attempt)
        self._registered = True

    def _owns_node(self) -> bool:
        """The process node exists and is an ephemeral of this client's current session."""
        assert self._consensus is not None and self._client is not None
        stat = self._client.exists(self._consensus.path(self._node_key))
        session = self._client.client_id
        return stat is not None and session is not None and stat.ephemeralOwner == session[0]

    def _write_status(self) -> None:
        if self._consensus is None or not self._registered or not self._connected.is_set():
            return
        value = self.status().encode()
        try:
            self._consensus.commit([SetData(self._node_key, value, -1)])
        except VersionMismatchError:  # our session's node vanished: it comes back on reconnect
            self._registered = False
        except ConnectionLostError:
            self._log.debug("status_write_skipped", reason="connection lost")

    def _set_state(self, state: State, *, phase: str | None = None) -> None:
        changed = state is not self._state
        self._state = state
        self.metrics.set_state(state.value)
        self._enter_phase(phase or state.value)
        if changed:
            self._log.info("state", state=state.value)

    def _enter_phase(self, phase: str) -> None:
        now = time.monotonic()
        if self._phase is not None and self._phase not in _RESTING_PHASES:
            self.metrics.observe_phase(self._phase, now - self._phase_started)
        if phase != self._phase:
            self._phase_since = time.time()
        self._phase = phase
        self._phase_started = now
        self._write_status()

    def _on_phase(self, phase: str) -> None:
        """The MigrationContext hook: migrate reports each phase as it enters it."""
        if phase != self._phase:
            self._log.info("phase", phase=phase)
            self._enter_phase(phase)
            if self._migration_phases is not None:
                self._migration_phases.append((phase, time.time()))

    def _require_consensus(self) -> Consensus:
        if self._consensus is None or not self._connected.is_set():
            raise ConnectionLostError(
                f"not connected to ZooKeeper at {self.config.zk}", zk=self.config.zk
            )
        return self._consensus

    def _guarded(self, failpoint: Callable[[str], None] | None) -> Callable[[str], None]:
        """The hook run before every fenced write: while this process leads, the election's
        guard must pass (a SUSPENDED session stops writes at once, inside a step, with a
        retryable ConnectionLostError and nothing sent); then the crash failpoint, if any."""

        def before_fenced_write(key: str) -> None:
            election = self._election
            if self._leadership is not None and election is not None:
                election.leadership_guard()
            if failpoint is not None:
                failpoint(key)

        return before_fenced_write
