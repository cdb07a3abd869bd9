"""The sidecar process: its main loop, signals and shutdown."""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog

from catalog.blob import BlobStore
from catalog.consensus import Delete
from catalog.environment import read_catalog
from catalog.errors import (
    EXIT_OK,
    EXIT_UNEXPECTED,
    CatalogError,
    FencedError,
)
from catalog.release import Release
from orchestrator import election as election_mod
from orchestrator.migrate import (
    MigrationContext,
)
from orchestrator.sidecar.config import SidecarConfig, resolve_blob_uri
from orchestrator.sidecar.dataplane import SidecarDataPlane
from orchestrator.sidecar.machine import SidecarMachine
from orchestrator.sidecar.states import (
    State,
    _Promote,
    _Stop,
    _Stopping,
    _ZkState,
)
from orchestrator.zk import close, consensus_for

log = structlog.get_logger(__name__)


class Sidecar(SidecarMachine, SidecarDataPlane):
    """One sidecar process; ``run()`` returns the exit code."""

    def run(self) -> int:
        """Serve until stopped, fenced or failed; the exit code."""
        structlog.contextvars.bind_contextvars(
            env=self.config.env,
            process_id=self.config.process_id,
            version=str(self.release.version),
            deploy_generation=self.config.deploy_generation,
        )
        previous = self._install_signal_handlers()
        try:
            self._http.start()
            return self._run()
        except _Stopping:
            self._log.info("stopping")
            return EXIT_OK
        except FencedError as exc:
            self._finish(State.FENCED, exc)
            return exc.exit_code
        except CatalogError as exc:
            self._finish(State.FAILED, exc)
            return exc.exit_code
        except Exception as exc:
            self._log.exception("sidecar_crashed")
            self._finish(State.FAILED, exc)
            return EXIT_UNEXPECTED
        finally:
            self._shutdown()
            self._restore_signal_handlers(previous)
            structlog.contextvars.unbind_contextvars(
                "env", "process_id", "version", "deploy_generation", "epoch"
            )

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the main loop to stop (safe from signal handlers and other threads)."""
        self._stopping = True
        self._inbox.put(_Stop(signum))

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda s, _f: self.request_stop(s))
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: Mapping[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _run(self) -> int:
        client = self._connect()
        consensus = consensus_for(client, self.config.env)
        consensus.observer = self.metrics.observe_zookeeper
        consensus.before_fenced_write = self._guarded(consensus.before_fenced_write)
        found = read_catalog(consensus)
        blob_uri = resolve_blob_uri(
            self.config.blob, found[0].blob_uri if found else None, self.config.env
        )
        self._blob = BlobStore.from_uri(blob_uri)
        if self.config.engine != "arrow":  # a cluster must see the blob store (exit 2)
            local = self._blob.filesystem.type_name == "local"
            self.config.spark.check_blob(blob_uri, local)
        self._consensus = consensus
        self._ctx = MigrationContext(
            consensus=consensus,
            blob=self._blob,
            release=self.release,
            deploy_generation=self.config.deploy_generation,
            process_id=self.config.process_id,
            on_phase=self._on_phase,
            retry=self._retry,
            engine=self.config.engine,
            spark=self.config.spark,
        )
        self._register()
        self._log.info("registered", blob=blob_uri, http=self._http.address)
        self._election = election_mod.LeaderElection(
            consensus,
            self.config.process_id,
            self.config.deploy_generation,
            on_change=self._inbox.put,
        )
        self._pending = True
        return self._loop()

    def _loop(self) -> int:
        next_heartbeat = time.monotonic() + self.config.heartbeat_interval
        next_finalize = time.monotonic() + self.config.finalize_interval
        while True:
            if self._pending and self._connected.is_set():
                self._pending = False
                self._deferring(self._evaluate)
            now = time.monotonic()
            if now >= next_heartbeat:
                self._write_status()
                if self._unreadable is not None:
                    self._pending = True  # look again: the bad node may be repaired
                next_heartbeat = now + self.config.heartbeat_interval
            if now >= next_finalize:
                self._deferring(self._finalize)
                next_finalize = now + self.config.finalize_interval
            timeout = max(0.0, min(next_heartbeat, next_finalize) - time.monotonic())
            try:
                message = self._inbox.get(timeout=timeout)
            except queue.Empty:
                continue
            # Handle everything queued, then evaluate once: a burst of watch events (a takeover
            # changes epoch, catalog and candidates together) costs one re-read, not three.
            while True:
                self._handle(message)
                try:
                    message = self._inbox.get_nowait()
                except queue.Empty:
                    break

    def _handle(self, message: object) -> None:
        if isinstance(message, _Stop):
            raise _Stopping()
        if isinstance(message, _ZkState):
            self._on_zk_state(message.state)
        elif isinstance(message, _Promote):
            self._serve_promote(message)
        elif isinstance(message, election_mod.ElectionEvent):
            self._on_election_event(message)
        else:  # pragma: no cover - nothing else is ever queued
            self._log.warning("unknown_message", message=repr(message))

    def _shutdown(self) -> None:
        """Step down, deregister and disconnect; a successor can take over at once."""
        election, self._election = self._election, None
        if election is not None:
            with contextlib.suppress(Exception):
                election.stop()
        if (
            self._consensus is not None
            and self._registered
            and self._state
            not in (
                State.FENCED,
                State.FAILED,
            )
        ):
            with contextlib.suppress(Exception):
                self._consensus.commit([Delete(self._node_key)])
        if self._client is not None:
            close(self._client)
        self._http.stop()
        self._log.info("stopped", state=self._state.value)

    def _finish(self, state: State, exc: BaseException) -> None:
        """Record why the process ends (node and event) before it exits."""
        error = (
            exc.to_json()
            if isinstance(exc, CatalogError)
            else {
                "error": type(exc).__name__,
                "message": str(exc),
                "exit_code": EXIT_UNEXPECTED,
            }
        )
        self._error = error
        self._log.warning(
            state.value,
            **{k: v for k, v in error.items() if k != "error"},
            error_class=error.get("error"),
        )
        if not self._registered:
            # Refused before registering (bad configuration): nothing may be written.
            self._state = state
            return
        self._set_state(state, phase=state.value)
        with contextlib.suppress(CatalogError):
            self._event(
                state.value,
                version=str(self.release.version),
                deploy_generation=self.config.deploy_generation,
                error=error,
            )


def run_sidecar(config: SidecarConfig, release: Release) -> int:
    """Run a sidecar to completion (what ``catalog-upgrade sidecar`` calls); the exit code."""
    return Sidecar(config, release).run()
