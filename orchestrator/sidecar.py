"""The sidecar: the long-running process of one release at one deploy generation (DESIGN.md §5).

State machine (the ``state`` of the process node; it runs on the process's main thread)::

    starting --connect, register--> checking --check_read_only--> ready
    ready --promotion of own generation (or bootstrap, or --auto-promote)--> migrating
    migrating --migrate_as_leader--> serving          (leader; finalizer and orphan
                                                       collection run periodically)
    ready/checking --catalog version, generation or epoch changed--> checking (re-plan)
    any --newer generation promoted or in the catalog, epoch moved--> fenced   (exit 3)
    any --migration refused--> failed                                         (exit 4)

ZooKeeper layout it writes (keys relative to the environment root; see ``catalog.environment``)::

    processes/<id>      ephemeral JSON: the live status below, rewritten on every state or phase
                        change and every ``heartbeat_interval`` seconds
    events/e-<seq>      ready, bootstrap, migrated, finalized, orphans_queued, fenced, failed
                        (orchestrator.events)

Threads: kazoo's state listener, election callbacks, HTTP handlers and signal handlers never
change the state; they put a message in the inbox (a ``SimpleQueue``, safe from signal handlers)
and the main thread acts on it. Data-plane requests (``/append``, ``/read``, ``/status``) run on
HTTP threads: they only read the state and use ZooKeeper through the thread-safe kazoo client.

Exit codes are those of DESIGN.md section 8: 0 after SIGTERM/SIGINT, 2 bad configuration
(nothing written), 3 fenced, 4 migration refused, 1 anything unexpected.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import enum
import json
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from http import HTTPStatus
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import structlog
from kazoo.client import KazooClient, KazooState

from catalog.blob import BlobStore, local_uri
from catalog.consensus import Consensus, Create, Delete, Fence, SetData, encode_json
from catalog.environment import PROCESSES_KEY, read_catalog
from catalog.errors import (
    EXIT_OK,
    EXIT_UNEXPECTED,
    BadInputError,
    CatalogError,
    ConfigurationError,
    ConnectionLostError,
    FencedError,
    VersionMismatchError,
)
from catalog.release import Builtin, Release
from catalog.retry import CasRetry
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Shard
from orchestrator import election as election_mod
from orchestrator.events import record_event
from orchestrator.migrate import (
    ORPHAN_GRACE_SECONDS,
    CheckResult,
    LeaderResult,
    MigrationContext,
    check_read_only,
    collect_orphan_shards,
    finalize_pending,
    find_schema_id,
    migrate_as_leader,
)
from orchestrator.sidecar_http import HttpError, Readiness, ReadinessCheck, SidecarHttpServer
from orchestrator.sidecar_metrics import SidecarMetrics
from orchestrator.status import ProcessStatus, read_status
from orchestrator.zk import close, connect, consensus_for

log = structlog.get_logger(__name__)

DEFAULT_HTTP = "127.0.0.1:0"
DEFAULT_BLOB_DIR = Path("var") / "blob"


class State(enum.Enum):
    STARTING = "starting"
    CHECKING = "checking"
    READY = "ready"
    MIGRATING = "migrating"
    SERVING = "serving"
    FENCED = "fenced"
    FAILED = "failed"


READY_STATES = frozenset({State.READY, State.SERVING})
# Phases whose durations are migration work (a histogram each); ready/serving are resting.
_RESTING_PHASES = frozenset(s.value for s in State) - {State.CHECKING.value}


@attrs.frozen
class SidecarConfig:
    """Everything the command line gives a sidecar."""

    zk: str
    env: str
    release_ref: str
    deploy_generation: int
    blob: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = 0
    auto_promote: bool = False
    process_id: str = attrs.field(factory=lambda: default_process_id())
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    finalize_interval: float = 5.0
    # A leader looks for orphan shards (created, never named) this often, collecting those
    # older than orphan_grace seconds (orchestrator.migrate.collect_orphan_shards).
    orphan_interval: float = 60.0
    orphan_grace: float = ORPHAN_GRACE_SECONDS
    connect_attempt_timeout: float = 5.0
    max_backoff: float = 5.0

    def __attrs_post_init__(self) -> None:
        if not self.process_id or "/" in self.process_id or self.process_id in {".", ".."}:
            raise BadInputError(
                f"invalid --process-id {self.process_id!r}: use a non-empty name without '/'",
                process_id=self.process_id,
            )
        if self.deploy_generation < 1:
            raise BadInputError(
                f"--deploy-generation must be at least 1, not {self.deploy_generation}",
                deploy_generation=self.deploy_generation,
            )


def default_process_id() -> str:
    """``<host>-<pid>``: unique per machine while the process lives, readable in status."""
    return f"{socket.gethostname().split('.')[0] or 'host'}-{os.getpid()}"


def normalize_blob_uri(uri: str) -> str:
    """The form a blob URI is recorded in: local paths absolute, other URIs as given."""
    return uri if "://" in uri else local_uri(uri)


def resolve_blob_uri(given: str | None, recorded: str | None, env: str) -> str:
    """The blob URI to use: the recorded one, which a different ``--blob`` may not contradict.

    An environment not bootstrapped yet takes ``given``, or ``./var/blob/<env>`` made absolute.
    """
    wanted = normalize_blob_uri(given) if given else None
    if recorded is not None:
        if wanted is not None and wanted != recorded:
            raise ConfigurationError(
                f"--blob {given} differs from the blob URI {recorded} this environment recorded "
                "at bootstrap",
                given=wanted,
                recorded=recorded,
                suggestion=f"omit --blob, or pass --blob {recorded}",
            )
        return recorded
    return wanted or local_uri(DEFAULT_BLOB_DIR / env)


# --- inbox messages ----------------------------------------------------------------------------


@attrs.frozen
class _Stop:
    signal: int


@attrs.frozen
class _ZkState:
    state: str  # KazooState value: CONNECTED, SUSPENDED, LOST


@attrs.frozen
class _Promote:
    deploy_generation: int
    done: Future[dict[str, Any]]


class _Stopping(Exception):
    """Raised inside long waits once a stop was requested."""


class Sidecar:
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
        self._check: CheckResult | None = None
        self._checked_at: tuple[int | None, int | None] | None = None
        self._epoch: int | None = None
        self._registered = False
        self._ready_recorded = False
        self._joined = False
        self._next_orphan_scan = 0.0
        self._known_finalized: set[str] = set()
        self._auto_promoted = False
        self._pending = False
        self._connected = threading.Event()
        self._writes_paused = threading.Event()
        self._http = SidecarHttpServer(self, config.http_host, config.http_port)
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

    # -- lifecycle ----------------------------------------------------------------------------

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
        found = read_catalog(consensus)
        blob_uri = resolve_blob_uri(
            self.config.blob, found[0].blob_uri if found else None, self.config.env
        )
        self._blob = BlobStore.from_uri(blob_uri)
        self._consensus = consensus
        self._ctx = MigrationContext(
            consensus=consensus,
            blob=self._blob,
            release=self.release,
            deploy_generation=self.config.deploy_generation,
            process_id=self.config.process_id,
            on_phase=self._on_phase,
            retry=self._retry,
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

    def _deferring(self, action: Callable[[], None]) -> None:
        """Run ``action``; when ZooKeeper does not answer, retry it once reconnected."""
        try:
            action()
        except ConnectionLostError as exc:
            self._pending = True
            self._log.warning("deferred_until_reconnected", reason=exc.message)

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

    def _on_election_event(self, event: election_mod.ElectionEvent) -> None:
        self._log.debug("election_event", kind=event.kind)
        if self._leadership is not None and event.kind in ("superseded", "leadership_lost"):
            raise FencedError(
                f"leadership of epoch {self._leadership.epoch} ended "
                f"({event.reason or event.kind})",
                epoch=self._leadership.epoch,
                deploy_generation=self.config.deploy_generation,
                reason=event.reason or event.kind,
            )
        if event.kind not in ("suspended", "stepped_down"):
            self._pending = True

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

    def _event(self, kind: str, *, fence: Fence | None = None, **fields: Any) -> None:
        """Record an upgrade event; best effort (status history), except that fenced raises."""
        if self._consensus is None or not self._connected.is_set():
            return
        try:
            record_event(
                self._consensus, kind, fence=fence, process_id=self.config.process_id, **fields
            )
        except ConnectionLostError:
            self._log.warning("event_not_recorded", kind=kind)

    # -- connection -----------------------------------------------------------------------------

    def _connect(self) -> KazooClient:
        """Connect, retrying with exponential backoff until ZooKeeper answers or we are stopped."""
        delay = 0.1
        attempt = 0
        while True:
            if self._stopping:
                raise _Stopping()
            attempt += 1
            try:
                # Short first attempts keep SIGTERM prompt; later ones allow a slow server.
                client = connect(
                    self.config.zk,
                    min(float(attempt), self.config.connect_attempt_timeout),
                    session_timeout=self.config.session_timeout,
                )
            except ConnectionLostError:
                self._log.warning(
                    "zookeeper_unreachable", zk=self.config.zk, attempt=attempt, retry_in=delay
                )
                self._sleep(delay)
                delay = min(delay * 2, self.config.max_backoff)
                continue
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
            if self._leadership is not None:
                # Our session (and the candidate node that made us leader) is gone; a successor
                # may already hold a newer epoch. Every write we could still make is fenced.
                raise FencedError(
                    "the ZooKeeper session of this leader expired: leadership lost",
                    epoch=self._leadership.epoch,
                    deploy_generation=self.config.deploy_generation,
                )
            self._registered = False
        elif state == KazooState.CONNECTED:
            self._log.info("zookeeper_reconnected", session=self._session())
            self._deferring(self._reregister)
            self._pending = True

    def _reregister(self) -> None:
        """A new session lost our ephemeral node (the election re-joins on its own)."""
        if not self._registered or not self._consensus_exists(self._node_key):
            self._registered = False
            self._register()
        self._write_status()

    def _consensus_exists(self, key: str) -> bool:
        return self._consensus is not None and self._consensus.exists(key)

    def _session(self) -> str | None:
        client = self._client
        if client is None or client.client_id is None:
            return None
        return f"{client.client_id[0]:#x}"

    # -- the process node -----------------------------------------------------------------------

    @property
    def _node_key(self) -> str:
        return f"{PROCESSES_KEY}/{self.config.process_id}"

    def status(self) -> ProcessStatus:
        """The live status (what the process node holds)."""
        return ProcessStatus(
            id=self.config.process_id,
            version=str(self.release.version),
            deploy_generation=self.config.deploy_generation,
            mode="leader" if self._leadership is not None else "read-only",
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
        assert self._consensus is not None
        self._consensus.ensure(PROCESSES_KEY)
        value = encode_json(self.status().to_json())
        try:
            self._consensus.commit([Create(self._node_key, value, ephemeral=True)])
        except VersionMismatchError as exc:
            raise ConfigurationError(
                f"process id {self.config.process_id} is in use by another live process",
                process_id=self.config.process_id,
                suggestion="pass a unique --process-id",
            ) from exc
        self._registered = True

    def _write_status(self) -> None:
        if self._consensus is None or not self._registered or not self._connected.is_set():
            return
        value = encode_json(self.status().to_json())
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

    # -- the state machine ------------------------------------------------------------------------

    def _evaluate(self, *, force_check: bool = False) -> None:
        """Re-read what the election watches and act: fence, re-plan, or take over."""
        if self._stopping:
            raise _Stopping()
        consensus = self._consensus
        assert consensus is not None and self._election is not None
        generation = self.config.deploy_generation
        promotion = election_mod.read_promotion(consensus)
        epoch = election_mod.read_epoch(consensus)
        found = read_catalog(consensus)
        catalog = found[0] if found else None
        self._epoch = epoch.epoch if epoch is not None else None
        self.metrics.set_epoch(self._epoch)
        if catalog is not None and catalog.deploy_generation > generation:
            raise FencedError(
                f"fenced: the catalog is at deploy generation {catalog.deploy_generation}, "
                f"above this process's {generation}",
                deploy_generation=generation,
                catalog_generation=catalog.deploy_generation,
            )
        if promotion is not None and promotion > generation:
            raise FencedError(
                f"fenced: deploy generation {promotion} was promoted, above this process's "
                f"{generation}",
                deploy_generation=generation,
                promoted_generation=promotion,
            )
        if self._leadership is not None:
            if epoch is None or epoch.epoch != self._leadership.epoch:
                raise FencedError(
                    f"fenced: the epoch moved from {self._leadership.epoch} to "
                    f"{None if epoch is None else epoch.epoch}",
                    epoch=self._leadership.epoch,
                    current_epoch=None if epoch is None else epoch.epoch,
                )
            if self._state is State.MIGRATING:  # interrupted by a lost connection: resume
                self._complete_migration(self._leadership)
            return
        seen = (found[1] if found else None, self._epoch)
        if force_check or self._checked_at != seen or self._check is None:
            self._run_check(seen)
        if self._election.candidate is None and not self._joined:
            # Join only once ready to lead; the election's watches drive re-evaluation from now.
            self._election.start()
            self._joined = True
        if self.config.auto_promote and not self._auto_promoted:
            assert self._check is not None
            if not self._check.bootstrap:  # a bootstrapping takeover promotes itself
                self._promote(self.config.deploy_generation)
            self._auto_promoted = True
            promotion = election_mod.read_promotion(consensus)
        if self._should_take_over(promotion):
            self._take_over()

    def _run_check(self, seen: tuple[int | None, int | None]) -> None:
        assert self._ctx is not None
        self._set_state(State.CHECKING, phase="checking")
        self._check = check_read_only(self._ctx)
        self._checked_at = seen
        self._plan = self._check.summary()
        self._set_state(State.READY)
        if not self._ready_recorded:
            self._ready_recorded = True
            self._event(
                "ready",
                version=str(self.release.version),
                deploy_generation=self.config.deploy_generation,
                bootstrap=self._check.bootstrap,
            )

    def _should_take_over(self, promotion: int | None) -> bool:
        if self._check is None or self._state is not State.READY:
            return False
        if self._election is None or self._election.candidate is None:
            return False
        return promotion == self.config.deploy_generation or (
            promotion is None and self._check.bootstrap
        )

    def _take_over(self) -> None:
        assert self._election is not None and self._ctx is not None and self._check is not None
        leadership = self._election.try_take_over(bootstrap=self._check.bootstrap)
        if leadership is None:
            return
        self._leadership = leadership
        self._epoch = leadership.epoch
        self.metrics.set_epoch(leadership.epoch)
        self.metrics.leader.set(1)
        self._log = self._log.bind(epoch=leadership.epoch)
        structlog.contextvars.bind_contextvars(epoch=leadership.epoch)
        self._log.info("leader", epoch=leadership.epoch)
        self._set_state(State.MIGRATING, phase="migrating")
        self._complete_migration(leadership)

    def _complete_migration(self, leadership: election_mod.Leadership) -> None:
        result = self._migrate(leadership)
        self._event(
            "bootstrap" if result.bootstrap else "migrated",
            fence=leadership.fence,
            version=result.version,
            deploy_generation=result.deploy_generation,
            epoch=leadership.epoch,
            **(
                {"collections": len(result.replaced)}
                if result.bootstrap
                else {
                    "evolved": len(result.evolved),
                    "replaced": len(result.replaced),
                    "queued_for_finalization": len(set(result.queued_for_finalization)),
                    "retracted_entries": result.retracted_entries,
                }
            ),
            seconds=round(result.seconds, 3),
        )
        self._set_state(State.SERVING)
        self._finalize()

    def _migrate(self, leadership: election_mod.Leadership) -> LeaderResult:
        """``migrate_as_leader``, re-run after a lost connection (every step is idempotent)."""
        assert self._ctx is not None
        for attempt in range(1, 4):
            try:
                return migrate_as_leader(self._ctx, leadership)
            except ConnectionLostError:
                if attempt == 3 or not self._connected.wait(self.config.session_timeout):
                    raise
                self._log.warning("migration_retry", attempt=attempt, reason="connection lost")
        raise AssertionError("unreachable")  # pragma: no cover

    def _finalize(self) -> None:
        leadership = self._leadership
        if leadership is None or self._state is not State.SERVING or self._ctx is None:
            return
        if self._writes_paused.is_set():
            return
        try:
            if time.monotonic() >= self._next_orphan_scan:
                self._next_orphan_scan = time.monotonic() + self.config.orphan_interval
                orphans = collect_orphan_shards(
                    self._ctx,
                    leadership.fence,
                    grace_seconds=self.config.orphan_grace,
                    known_finalized=self._known_finalized,
                )
                if orphans:
                    self._event("orphans_queued", fence=leadership.fence, shards=orphans)
            finalized = finalize_pending(self._ctx, leadership.fence, lease_timeout=0.0)
        except ConnectionLostError:
            return
        if finalized:
            self._event("finalized", fence=leadership.fence, shards=finalized)

    # -- promotion --------------------------------------------------------------------------------

    def _promote(self, generation: int) -> None:
        assert self._consensus is not None
        election_mod.promote(self._consensus, generation, requested_by=self.config.process_id)
        self._log.info("promoted", target=generation)

    def _serve_promote(self, request: _Promote) -> None:
        if not request.done.set_running_or_notify_cancel():
            return
        try:
            self._promote(request.deploy_generation)
        except CatalogError as exc:
            request.done.set_exception(exc)
        else:
            request.done.set_result({"deploy_generation": request.deploy_generation})

    # -- SidecarApi (HTTP threads) ----------------------------------------------------------------

    def readiness(self) -> Readiness:
        state = self._state
        checks = [
            ReadinessCheck(
                "zookeeper",
                self._connected.is_set(),
                f"not connected to {self.config.zk}",
            ),
            ReadinessCheck("registered", self._registered, "process node not registered"),
            ReadinessCheck(
                "state",
                state in READY_STATES,
                f"state is {state.value}" + (f" ({self._phase})" if self._phase else ""),
            ),
        ]
        if self._leadership is not None:
            checks.append(
                ReadinessCheck(
                    "writes",
                    not self._writes_paused.is_set(),
                    "leader writes paused: ZooKeeper session suspended",
                )
            )
        return Readiness(tuple(checks))

    def status_json(self) -> Mapping[str, Any]:
        return read_status(self._require_consensus()).to_json()

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def promote(self, deploy_generation: int | None) -> Mapping[str, Any]:
        self._require_consensus()
        request = _Promote(
            deploy_generation if deploy_generation is not None else self.config.deploy_generation,
            Future(),
        )
        self._inbox.put(request)
        try:
            return request.done.result(timeout=30)
        except FutureTimeout:
            request.done.cancel()
            raise HttpError(
                HTTPStatus.GATEWAY_TIMEOUT,
                "busy",
                "the process did not handle the promotion within 30 s (migrating?)",
            ) from None

    def append(self, collection: str, body: bytes) -> Mapping[str, Any]:
        leadership = self._leadership
        if leadership is None:
            raise HttpError(
                HTTPStatus.CONFLICT,
                "read-only",
                f"process {self.config.process_id} is read-only: append through the leader",
                state=self._state.value,
            )
        if self._state is not State.SERVING:
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "writes-paused",
                f"leader writes are paused: state is {self._state.value}",
                state=self._state.value,
            )
        self._require_writable(leadership)
        builtin = self._builtin(collection)
        table = rows_to_table(body, builtin.schema)
        shard = self._shard_of(builtin)

        def attempt() -> tuple[int, int]:
            state = shard.state()
            upper = state.upper
            batch = table.append_column(
                pa.field(TS, pa.uint64(), nullable=False),
                pa.array([upper] * table.num_rows, pa.uint64()),
            ).append_column(
                pa.field(DIFF, pa.int64(), nullable=False),
                pa.array([1] * table.num_rows, pa.int64()),
            )
            self._require_writable(leadership)
            # The id of this release's schema, not the latest: a newer leader that registered
            # a schema on this shard and crashed before its switch must not stop our writes.
            schema_id = find_schema_id(state, builtin.schema)
            if schema_id is None:
                # Registered only inside a wider schema (migrate.registration_schema): write
                # that one, the fields this release does not know as nulls.
                schema_id = state.schema_id
                batch = migrate_batch(batch, builtin.schema, state.live_schema, projection=True)
            result = shard.compare_and_append(
                batch, upper, upper + 1, schema_id=schema_id, fence=leadership.fence
            )
            if not result.ok:
                raise VersionMismatchError(
                    f"upper of {shard.shard_id} moved to {result.upper}",
                    key=shard.key,
                    upper=result.upper,
                )
            return upper, result.upper

        ts, upper = self._append_retry(attempt)
        self.metrics.rows_appended.labels(collection=collection).inc(table.num_rows)
        return {
            "collection": collection,
            "shard_id": shard.shard_id,
            "rows": table.num_rows,
            "ts": ts,
            "upper": upper,
        }

    def _require_writable(self, leadership: election_mod.Leadership) -> None:
        """503 while the session is suspended; FencedError once the leadership is over."""
        try:
            leadership.check()
        except ConnectionLostError as exc:
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "writes-paused",
                "leader writes are paused: the ZooKeeper session is suspended",
                state=self._state.value,
            ) from exc

    def read(self, collection: str, as_of: int | None) -> Iterable[Mapping[str, Any]]:
        builtin = self._builtin(collection)
        shard = self._shard_of(builtin)
        with shard.lease(holder=self.config.process_id):
            if as_of is None and shard.state().upper == 0:
                return []
            table = shard.snapshot(as_of)
        source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
        if not source.equals(builtin.schema):
            table = migrate_batch(table, source, builtin.schema, projection=True)
        return [{k: jsonable(v) for k, v in row.items()} for row in table.to_pylist()]

    def _require_consensus(self) -> Consensus:
        if self._consensus is None or not self._connected.is_set():
            raise ConnectionLostError(
                f"not connected to ZooKeeper at {self.config.zk}", zk=self.config.zk
            )
        return self._consensus

    def _builtin(self, collection: str) -> Builtin:
        builtin = self.release.builtin(collection)
        if builtin is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                "unknown-collection",
                f"release {self.release.version} has no builtin collection {collection} "
                "(name it SCHEMA.NAME)",
                collection=collection,
            )
        return builtin

    def _shard_of(self, builtin: Builtin) -> Shard:
        """The shard this process reads and writes for ``builtin``.

        A follower reads its own replacement shard where it has one (what it will serve once
        promoted); otherwise the collection's shard in the catalog.
        """
        consensus = self._require_consensus()
        assert self._blob is not None
        check = self._check
        if self._leadership is None and check is not None:
            shard_id = check.replacement_shards.get(builtin.global_id)
            if shard_id is not None:
                return Shard(consensus, self._blob, shard_id)
        found = read_catalog(consensus)
        ref = found[0].collections.get(builtin.global_id) if found else None
        if ref is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                "no-shard",
                f"collection {builtin.name} has no shard yet (environment not bootstrapped, or "
                "the builtin is new in this release and not promoted)",
                collection=builtin.name,
            )
        return Shard(consensus, self._blob, ref.shard_id)


def rows_to_table(body: bytes, schema: pa.Schema) -> pa.Table:
    """Parse JSON lines into a table of ``schema``; BadInputError naming the line and field."""
    rows: list[dict[str, Any]] = []
    names = set(schema.names)
    for number, line in enumerate(body.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"line {number} is not JSON: {exc.msg}", line=number) from exc
        if not isinstance(row, dict):
            raise BadInputError(f"line {number} is not a JSON object", line=number)
        unknown = sorted(set(row) - names)
        if unknown:
            raise BadInputError(
                f"line {number}: unknown field {unknown[0]} (the schema has {sorted(names)})",
                line=number,
                field=unknown[0],
            )
        for field in schema:
            if not field.nullable and row.get(field.name) is None:
                raise BadInputError(
                    f"line {number}: field {field.name} is required (not nullable)",
                    line=number,
                    field=field.name,
                )
        rows.append(row)
    if not rows:
        raise BadInputError("no rows: send JSON lines, one object per row")
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise BadInputError(f"rows do not match the schema: {exc}", problem=str(exc)) from exc


def jsonable(value: Any) -> Any:
    """An Arrow-to-Python value as JSON: times ISO 8601, bytes base64, maps as objects."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): jsonable(v) for k, v in value}  # an Arrow map
        return [jsonable(v) for v in value]
    return str(value)


def run_sidecar(config: SidecarConfig, release: Release) -> int:
    """Run a sidecar to completion (what ``catalog-upgrade sidecar`` calls); the exit code."""
    return Sidecar(config, release).run()


__all__ = [
    "Sidecar",
    "SidecarConfig",
    "State",
    "default_process_id",
    "jsonable",
    "normalize_blob_uri",
    "resolve_blob_uri",
    "rows_to_table",
    "run_sidecar",
]
