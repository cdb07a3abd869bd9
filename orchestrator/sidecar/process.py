"""The sidecar process: its collaborators, its main loop, signals and shutdown.

A :class:`Sidecar` owns, each with its own state and a small public surface:

* its :class:`~orchestrator.machine.connection.SidecarConnection` (ZooKeeper session, process
  node);
* its :class:`~orchestrator.machine.progress.Progress` (state, phase, plan, error);
* its :class:`~orchestrator.machine.machine.SidecarMachine` (check, election, migration,
  maintenance, health);
* its :class:`~orchestrator.dataplane.plane.SidecarDataPlane` (what HTTP requests ask);
* its :class:`~orchestrator.http.server.HttpServer`.

Only the main thread changes state: other threads put messages in the inbox.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog

from catalog.blob import BlobStore
from catalog.blob.cache import BatchCache
from catalog.environment import read_catalog
from catalog.errors import (
    EXIT_OK,
    EXIT_UNEXPECTED,
    BlobUnreachableError,
    CatalogError,
    FencedError,
)
from catalog.release import Release
from orchestrator import election as election_mod
from orchestrator.dataplane.plane import SidecarDataPlane
from orchestrator.dataplane.serving import CUTOVER_HOLD_SECONDS
from orchestrator.fencing import release_fence
from orchestrator.machine.config import SidecarConfig, resolve_blob_uri
from orchestrator.machine.connection import SidecarConnection
from orchestrator.machine.machine import SidecarMachine
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.progress import Progress
from orchestrator.machine.states import Promote, State, Stop, Stopping, ZkState
from orchestrator.process_node import ProcessMode, ProcessNode
from orchestrator.sidecar.refusals import process_error
from orchestrator.sidecar.server import configured_server
from orchestrator.zookeeper.clients import consensus_for

log = structlog.get_logger(__name__)


class Sidecar:
    """One sidecar process; ``run()`` returns the exit code."""

    def __init__(
        self, config: SidecarConfig, release: Release, rollback_from: Release | None = None
    ) -> None:
        self.config = config
        self.release = release
        self.metrics = SidecarMetrics()
        self.metrics.deploy_generation.set(config.deploy_generation)
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._started_at = time.time()
        self._log = log.bind(
            env=config.env,
            process_id=config.process_id,
            version=str(release.version),
            deploy_generation=config.deploy_generation,
        )
        self.connection = SidecarConnection(
            config, self.metrics, self._log, lambda state: self._inbox.put(ZkState(state))
        )
        self.progress = Progress(self.metrics, self._publish)
        self.machine = SidecarMachine(
            config,
            release,
            self.metrics,
            self.connection,
            self.progress,
            self._stopping,
            self._inbox.put,
            self._encoded_status,
            self._log,
            rollback_from=rollback_from,
        )
        self.dataplane = SidecarDataPlane(
            config,
            release,
            self.metrics,
            self.connection,
            self.machine,
            self.progress,
            self._inbox.put,
        )
        self.machine.on_ready = self.dataplane.warm
        self.http = configured_server(
            self.dataplane,
            config.http_host,
            config.http_port,
            access=config.http_access,
            limits=config.http_limits,
        )
        self.metrics.http_connections.set_function(lambda: self.http.connections)

    def status(self) -> ProcessNode:
        """The live status (what the process node holds)."""
        progress = self.progress
        leading = self.machine.leadership is not None
        return ProcessNode(
            id=self.config.process_id,
            version=str(self.release.version),
            deploy_generation=self.config.deploy_generation,
            mode=(ProcessMode.LEADER if leading else ProcessMode.READ_ONLY).value,
            state=progress.state.value,
            phase=progress.phase,
            phase_since=progress.phase_since,
            plan=progress.plan,
            error=progress.error,
            host=socket.gethostname(),
            pid=os.getpid(),
            session=self.connection.session(),
            epoch=self.machine.epoch,
            http=self.http.address,
            heartbeat=time.time(),
            started_at=self._started_at,
            blob_store=self.machine.store.report(),
            progress=None if progress.step is None else progress.step.to_json(),
            clock_offset=self.connection.clock.published(),
        )

    def _encoded_status(self) -> bytes:
        return self.status().encode()

    def _publish(self) -> None:
        self.connection.write_status(self._encoded_status)

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
            self.http.start()
            if self.config.http_address_file is not None:
                _write_address(Path(self.config.http_address_file), self.http.address)
            return self._run()
        except Stopping:
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
        self._stopping.set()
        self._inbox.put(Stop(signum))

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
        client = self.connection.connect(self._stopping)
        consensus = consensus_for(client, self.config.env)
        consensus.observer = self.metrics.observe_zookeeper
        consensus.before_fenced_write = self.machine.guard(consensus.before_fenced_write)
        found = read_catalog(consensus)
        taken = release_fence(  # before anything is written (exit 2)
            self.config.deploy_generation,
            str(self.release.version),
            found[0] if found else None,
            promoted=election_mod.read_promotion(consensus) if found else None,
        )
        if taken is not None:
            raise taken
        blob_uri = resolve_blob_uri(
            self.config.blob, found[0].blob_uri if found else None, self.config.env
        )
        # Reads keep the batches they decoded: the next read opens only the new ones.
        blob = attrs.evolve(BlobStore.from_uri(blob_uri), cache=BatchCache())
        try:  # a wrong credential or a missing bucket is configuration: exit 2, nothing written
            blob.probe()
        except BlobUnreachableError as exc:  # an outage: start, and say so until it answers
            self.machine.store.failed(exc)
        if self.config.engine != "arrow":  # a cluster must see the blob store (exit 2)
            local = blob.filesystem.type_name == "local"
            self.config.spark.check_blob(blob_uri, local)
        self.connection.consensus = consensus
        self.machine.start(consensus, blob)
        self.connection.register(self._encoded_status)
        self._publish()  # measures the clock against ZooKeeper's before any takeover
        self._log.info("registered", blob=blob_uri, http=self.http.address)
        return self._loop()

    def _loop(self) -> int:
        machine = self.machine
        next_heartbeat = time.monotonic() + self.config.heartbeat_interval
        next_finalize = time.monotonic() + self.config.finalize_interval
        while True:
            if machine.pending and self.connection.connected:
                machine.pending = False
                machine.deferring(machine.evaluate, "evaluate")
            now = time.monotonic()
            if now >= next_heartbeat:
                self._publish()
                machine.cutover.settle(self.connection.consensus, self._log)
                if machine.health.unreadable is not None or machine.clock_refused:
                    # Look again: the bad node may be repaired, the clock synchronized.
                    machine.pending = True
                next_heartbeat = now + self.config.heartbeat_interval
            if now >= next_finalize:
                machine.deferring(machine.finalize, "finalize")
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
        """Act on one inbox message (main thread)."""
        if isinstance(message, Stop):
            raise Stopping()
        if isinstance(message, ZkState):
            self.machine.on_zk_state(message.state)
        elif isinstance(message, Promote):
            self.machine.serve_promote(message)
        elif isinstance(message, election_mod.ElectionEvent):
            self.machine.on_election_event(message)
        else:  # pragma: no cover - nothing else is ever queued
            self._log.warning("unknown_message", message=repr(message))

    def _shutdown(self) -> None:
        """Step down, hand over to a successor (a leader fenced by a promotion), let the
        requests being answered finish (a read streaming its rows, an append settling), then
        deregister and disconnect; a successor can take over at once."""
        self.machine.stop_election()
        if self.progress.state is State.FENCED and self.machine.journal.led:
            self._hand_over()
        self.http.stop()
        ended = self.progress.state in (State.FENCED, State.FAILED)
        self.connection.close(deregister=not ended)
        self._log.info("stopped", state=self.progress.state.value)

    def _hand_over(self) -> None:
        """A leader fenced by a promotion answers reads until its successor serves
        (:meth:`SidecarDataPlane.hand_over`), at most
        :data:`~orchestrator.dataplane.serving.CUTOVER_HOLD_SECONDS`, the time the successor
        holds requests for: a reader that follows the leader sees no gap. Watched, as
        ``promote --wait`` watches; a successor that fails or is fenced ends it too."""
        consensus = self.connection.consensus
        if consensus is None:
            return
        started = time.monotonic()
        try:
            target = election_mod.read_promotion(consensus)
        except CatalogError:
            return
        if target is None or target <= self.config.deploy_generation:
            return
        if not self.dataplane.hand_over():
            return
        try:
            election_mod.wait_promoted(consensus, target, timeout=CUTOVER_HOLD_SECONDS)
            outcome = "serving"
        except CatalogError as exc:
            outcome = exc.message
        self._log.info(
            "handed_over",
            successor=target,
            outcome=outcome,
            seconds=round(time.monotonic() - started, 3),
        )

    def _finish(self, state: State, exc: BaseException) -> None:
        """Record why the process ends (node and event) before it exits."""
        error = process_error(exc)
        self.progress.error = error
        self._log.warning(
            state.value,
            **{k: v for k, v in error.items() if k != "error"},
            error=error["error"],
            error_class=type(exc).__name__,  # for the one who reads the log, not a reader
        )
        if not self.connection.registered:
            # Refused before registering (bad configuration): nothing may be written.
            self.progress.settle(state)
            return
        self.progress.set_state(state, phase=state.value)
        # The next leader's cut-over counts its write gap from the last commit.
        last_commit = self.dataplane.last_commit_at
        committed: dict[str, Any] = {} if last_commit is None else {"last_commit_at": last_commit}
        with contextlib.suppress(CatalogError):
            self.machine.journal.event(
                state.value,
                version=str(self.release.version),
                deploy_generation=self.config.deploy_generation,
                error=error,
                **committed,
            )


def run_sidecar(
    config: SidecarConfig, release: Release, rollback_from: Release | None = None
) -> int:
    """Run a sidecar to completion (what ``catalog-upgrade sidecar`` calls); the exit code."""
    return Sidecar(config, release, rollback_from).run()


def _write_address(path: Path, address: str) -> None:
    """``address`` in ``path``, whole or not at all (a reader never sees half of it)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(address + "\n")
    partial.replace(path)
