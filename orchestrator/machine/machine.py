"""The sidecar's state machine: check, wait for promotion, take over, migrate, serve, finalize.

It runs on the main thread only (see :mod:`orchestrator.sidecar`); other threads reach it
through the inbox. It holds the leadership, the read-only check and the migration context; the
connection, the progress, the health and the leader's maintenance are its collaborators.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.client import KazooState

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.errors import (
    BlobUnreachableError,
    CatalogError,
    ConnectionLostError,
    CorruptStateError,
    FencedError,
)
from catalog.pipeline.pacing import Pacer
from catalog.release import Release
from catalog.retry import CasRetry, Retry
from orchestrator import election as election_mod
from orchestrator.fencing import generation_fence, release_fence
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.connection import SidecarConnection
from orchestrator.machine.cutover import Cutover
from orchestrator.machine.health import Health
from orchestrator.machine.journal import SidecarJournal
from orchestrator.machine.maintenance import LeaderMaintenance
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.objectstore import BlobStoreHealth
from orchestrator.machine.progress import Progress
from orchestrator.machine.standing import Standing
from orchestrator.machine.states import Promote, State, Stopping
from orchestrator.migrate import (
    CheckResult,
    LeaderResult,
    MigrationContext,
    check_read_only,
    migrate_as_leader,
)
from orchestrator.pace import PaceWatch
from orchestrator.process_node import WAITING_FOR_BOOTSTRAP


class SidecarMachine:
    """Moves the process through its states (see :mod:`orchestrator.sidecar`)."""

    def __init__(
        self,
        config: SidecarConfig,
        release: Release,
        metrics: SidecarMetrics,
        connection: SidecarConnection,
        progress: Progress,
        stopping: threading.Event,
        inbox: Callable[[object], None],
        status_value: Callable[[], bytes],
        log: Any,
        rollback_from: Release | None = None,
    ) -> None:
        self._config = config
        self._release = release
        self._rollback_from = rollback_from
        self._metrics = metrics
        self._connection = connection
        self._progress = progress
        self._stopping = stopping
        self._inbox = inbox
        self._status_value = status_value
        self.log = log
        self.health = Health(progress)
        self.store = BlobStoreHealth(metrics)
        self.journal = SidecarJournal(config, release, connection, log)
        self._maintenance = LeaderMaintenance(config, metrics, self.journal, self.store, progress)
        self.cutover = Cutover(metrics, config.deploy_generation)
        self._retry = CasRetry(on_retry=metrics.count_cas_retry)
        self.ctx: MigrationContext | None = None
        self._pace: PaceWatch | None = None
        self._election: election_mod.LeaderElection | None = None
        self.leadership: election_mod.Leadership | None = None
        self._leader_session: str | None = None  # the session that took over (if leading)
        self.check: CheckResult | None = None
        self._checked_at: tuple[int | None, int | None] | None = None
        self.epoch: int | None = None
        #: The promotion target as the last evaluation read it (a cut-over to this process
        #: when it names our generation and we do not serve yet).
        self.promotion: int | None = None
        self._ready_recorded = False
        self._standing: Standing | None = None
        self._auto_promoted = False
        #: Something changed (a watch, a reconnect, a repaired node): evaluate again.
        self.pending = False
        #: Called each time a check leaves the process ready (the data plane warms its
        #: caches for a promotion then).
        self.on_ready: Callable[[], None] = lambda: None
        # The leadership whose catalog switch committed: its appends go on while it finishes.
        self._switched: election_mod.Leadership | None = None

    # -- wiring -----------------------------------------------------------------------------

    def start(self, consensus: Consensus, blob: BlobStore) -> None:
        """Connected and registered: the migration context and the election exist from now."""
        self._pace = PaceWatch(consensus, self._config.deploy_generation, self._config.copy_rate)
        pacer = Pacer(self._pace.current, self._progress.on_step, self._step_may_go_on)
        self.ctx = MigrationContext(
            consensus=consensus,
            blob=blob,
            release=self._release,
            deploy_generation=self._config.deploy_generation,
            process_id=self._config.process_id,
            on_phase=self._progress.on_phase,
            retry=self._retry,
            engine=self._config.engine,
            spark=self._config.spark,
            pacer=pacer,
            on_switched=self._appends_go_on,
            finalize_after=self._config.finalize_after,
            rollback_from=self._rollback_from,
            discard_writes_to=frozenset(self._config.discard_writes_to),
        )
        self._election = election_mod.LeaderElection(
            consensus,
            self._config.process_id,
            self._config.deploy_generation,
            release=str(self._release.version),
            on_change=self._inbox,
        )
        self._standing = Standing(self._election, self._connection.clock, self.log)
        self.pending = True

    @property
    def clock_refused(self) -> bool:
        """Whether the last evaluation declined to lead for the clock (orchestrator.clock)."""
        return self._standing is not None and self._standing.clock_refused

    def appending(self) -> election_mod.Leadership | None:
        """The leadership whose appends go on now (any thread): serving, or migrating past
        its catalog switch (the catalog names the shards it serves; what is left of the
        migration goes on beside the appends, as a serving leader's finalization does)."""
        leadership, state = self.leadership, self._progress.state
        if leadership is None:
            return None
        if state is State.SERVING or (state is State.MIGRATING and self._switched is leadership):
            return leadership
        return None

    def _appends_go_on(self) -> None:
        """The migration's catalog switch committed (MigrationContext.on_switched)."""
        self._switched = self.leadership
        self.cutover.appending(time.time())
        self._progress.wake()

    def paused(self) -> bool:
        """Whether the operator paused this generation's long steps (catalog-upgrade pause)."""
        return self._pace is not None and self._pace.current().paused

    def _step_may_go_on(self) -> None:
        """Between the batches of a long step, and while it is throttled or paused: a stop
        request ends it (Stopping), and so does a leadership that ended (FencedError), so a
        pause never holds up a shutdown or fencing."""
        if self._stopping.is_set():
            raise Stopping()
        if self.leadership is not None:
            self.leadership.check()

    def guard(self, failpoint: Callable[[str], None] | None) -> Callable[[str], None]:
        """The fenced-write hook of this process's consensus store
        (:func:`orchestrator.election.fenced_write_guard`)."""
        return election_mod.fenced_write_guard(
            lambda: self._election if self.leadership is not None else None, failpoint
        )

    @property
    def blob(self) -> BlobStore:
        if self.ctx is None:
            raise ConnectionLostError(f"not connected to ZooKeeper at {self._config.zk}")
        return self.ctx.blob

    def stop_election(self) -> None:
        election, self._election = self._election, None
        if election is not None:
            with contextlib.suppress(Exception):
                election.stop()

    # -- messages ---------------------------------------------------------------------------

    def deferring(self, action: Callable[[], None], name: str) -> None:
        """Run ``action``; when ZooKeeper does not answer, retry it once reconnected; when a
        durable node cannot be decoded, degrade until ``action`` succeeds again."""
        try:
            action()
        except ConnectionLostError as exc:
            self.pending = True
            self.log.warning("deferred_until_reconnected", reason=exc.message)
        except CorruptStateError as exc:
            self.check = None  # a follower re-checks from the repaired state
            self.health.degrade(exc, name)
        except BlobUnreachableError as exc:  # an outage: a state, retried at the next beat
            self.pending = True
            self.store.failed(exc)
            self._progress.publish()

    def on_zk_state(self, state: str) -> None:
        self._metrics.zookeeper_connected.set(1 if state == KazooState.CONNECTED else 0)
        if state == KazooState.SUSPENDED:
            self.log.warning("zookeeper_suspended", writes_paused=self.leadership is not None)
        elif state == KazooState.LOST:
            self.log.warning("zookeeper_session_lost", leader=self.leadership is not None)
            self._step_down("session expired")
            self._connection.lost()
        elif state == KazooState.CONNECTED:
            self.log.info("zookeeper_reconnected", session=self._connection.session())
            self.deferring(self._reregister, "reregister")
            self.pending = True

    def _reregister(self) -> None:
        """A new session lost our ephemeral node (the election re-joins on its own)."""
        self._connection.reregister(self._status_value)

    def _step_down(self, reason: str) -> None:
        """Our session expired while leading: its candidate node (what made us leader) is gone
        and a successor of our generation may already hold a newer epoch. Leadership ends
        here, not the process: it re-checks and re-joins the election with its next session
        (orchestrator.election), so an environment whose only leader expired gets one again.
        A write of the old leadership still in flight carries its epoch's fence, valid only
        while nobody took over."""
        leadership, self.leadership = self.leadership, None
        if leadership is None:
            return
        self._metrics.leader.set(0)
        self.log.error("leadership_lost", epoch=leadership.epoch, reason=reason, rejoining=True)
        self.check = None
        self.health.forget()
        self._progress.set_state(State.CHECKING, phase=f"{reason}: rejoining the election")
        self.pending = True

    def on_election_event(self, event: election_mod.ElectionEvent) -> None:
        self.log.debug("election_event", kind=event.kind)
        if self.leadership is not None and event.reason == "session_lost":
            self._step_down("session expired")
        if self.leadership is not None and event.kind in ("superseded", "leadership_lost"):
            raise FencedError(
                f"leadership of epoch {self.leadership.epoch} ended ({event.reason or event.kind})",
                epoch=self.leadership.epoch,
                deploy_generation=self._config.deploy_generation,
                reason=event.reason or event.kind,
            )
        if event.kind not in ("suspended", "stepped_down"):
            self.pending = True

    # -- evaluation -------------------------------------------------------------------------

    def evaluate(self) -> None:
        """Re-read what the election watches and act: fence, re-plan, or take over."""
        if self._stopping.is_set():
            raise Stopping()
        consensus = self._connection.consensus
        assert consensus is not None and self._election is not None
        generation = self._config.deploy_generation
        promotion = self.promotion = election_mod.read_promotion(consensus)
        epoch = election_mod.read_epoch(consensus)
        unreadable: CorruptStateError | None = None
        try:
            found = read_catalog(consensus)
        except CorruptStateError as exc:  # still fence below: that needs no catalog
            found, unreadable = None, exc
        catalog = found[0] if found else None
        self.epoch = epoch.epoch if epoch is not None else None
        self._metrics.set_epoch(self.epoch)
        fenced = generation_fence(
            generation,
            catalog=None if catalog is None else catalog.deploy_generation,
            promoted=promotion,
        )
        if fenced is not None:
            raise fenced
        if self.leadership is not None:
            session = self._connection.session()
            if session is not None and session != self._leader_session:
                # Our session expired and kazoo made a new one before its LOST reached us.
                self._step_down("session expired")
                self.pending = True
                return
            if epoch is None or epoch.epoch != self.leadership.epoch:
                raise FencedError(
                    f"fenced: the epoch moved from {self.leadership.epoch} to "
                    f"{None if epoch is None else epoch.epoch}",
                    epoch=self.leadership.epoch,
                    current_epoch=None if epoch is None else epoch.epoch,
                )
            if unreadable is not None:
                raise unreadable
            # Interrupted by a lost connection or an unreadable node: resume.
            if self.health.interrupted(State.MIGRATING):
                self._complete_migration(self.leadership)
            self.health.recover("evaluate", leading=self.leadership is not None)
            return
        if unreadable is not None:
            raise unreadable
        # A generation stands for one release: a process of another release at the catalog's
        # generation never leads, nor waits to (exit 2, naming a new generation).
        taken = release_fence(generation, str(self._release.version), catalog, promoted=promotion)
        if taken is not None:
            raise taken
        seen = (found[1] if found else None, self.epoch)
        if self._checked_at != seen or self.check is None:
            self._run_check(seen)
        assert self._standing is not None
        if self._standing.refuses_for_clock():
            self.health.recover("evaluate", leading=False)
            return
        self._standing.join()  # only once ready to lead
        if self._config.auto_promote and not self._auto_promoted:
            assert self.check is not None
            if not self.check.bootstrap:  # a bootstrapping takeover promotes itself
                self._promote(self._config.deploy_generation)
            self._auto_promoted = True
            promotion = self.promotion = election_mod.read_promotion(consensus)
        self.health.recover("evaluate", leading=self.leadership is not None)
        if self._should_take_over():
            self._take_over()

    def _run_check(self, seen: tuple[int | None, int | None]) -> None:
        assert self.ctx is not None
        self._progress.set_state(State.CHECKING, phase="checking")
        self.check = check_read_only(self.ctx)
        self._checked_at = seen
        self._progress.plan = self.check.summary()
        waiting = self.check.bootstrap and not self._config.auto_promote
        self._progress.set_state(State.READY, phase=WAITING_FOR_BOOTSTRAP if waiting else None)
        self.on_ready()
        if not self._ready_recorded:
            self._ready_recorded = True
            self.journal.event(
                "ready",
                version=str(self._release.version),
                deploy_generation=self._config.deploy_generation,
                bootstrap=self.check.bootstrap,
            )

    def to_lead(self) -> bool:
        """Whether this process's generation is to lead: it is promoted (by the promotion
        last read), or the environment is empty and it was asked to bootstrap it (an empty
        environment is bootstrapped only by a process promoted or asked to)."""
        promotion = self.promotion
        return promotion == self._config.deploy_generation or (
            promotion is None
            and self.check is not None
            and self.check.bootstrap
            and self._config.auto_promote
        )

    def _should_take_over(self) -> bool:
        if self.check is None or self._progress.state is not State.READY:
            return False
        if self._election is None or self._election.candidate is None:
            return False
        return self.to_lead()

    def _take_over(self) -> None:
        assert self._election is not None and self.ctx is not None and self.check is not None
        leadership = self._election.try_take_over(
            bootstrap=self.check.bootstrap and self._config.auto_promote
        )
        if leadership is None:
            return
        took_over = time.time()
        self.leadership = leadership
        self._leader_session = self._connection.session()
        self.journal.led = True
        self.epoch = leadership.epoch
        self._metrics.set_epoch(leadership.epoch)
        self._metrics.leader.set(1)
        self.log = self.log.bind(epoch=leadership.epoch)
        structlog.contextvars.bind_contextvars(epoch=leadership.epoch)
        self.log.info("leader", epoch=leadership.epoch)
        asked = None if self.check.bootstrap else self._promotion_request()
        self.cutover.took_over(None if asked is None else asked.requested_at, took_over)
        self._progress.begin_migration()
        self._progress.set_state(State.MIGRATING, phase="migrating")
        self._complete_migration(leadership)

    def _complete_migration(self, leadership: election_mod.Leadership) -> None:
        result = self._migrate(leadership)
        self.journal.record_migrated(leadership, result)
        assert self.check is not None
        entered = self._progress.end_migration()
        self.cutover.phases(entered)
        self.journal.record_upgrade(leadership, result, self.check.catalog_version, entered)
        self._progress.set_state(State.SERVING)
        self.cutover.serving(time.time())
        self.finalize()

    def _promotion_request(self) -> election_mod.Promotion | None:
        """The promotion node (for its time), or None when it cannot be read now."""
        try:
            return election_mod.read_promotion_request(self._connection.require())
        except (ConnectionLostError, CorruptStateError):
            return None

    def _migrate(self, leadership: election_mod.Leadership) -> LeaderResult:
        """``migrate_as_leader``, re-run after a lost connection (every step is idempotent)."""
        ctx = self.ctx
        assert ctx is not None

        def reconnected(_exc: Exception) -> bool:
            self.log.warning("migration_retry", reason="connection lost")
            return self._connection.wait_connected(self._config.session_timeout)

        retry = Retry(
            retryable=(ConnectionLostError,),
            max_attempts=3,
            deadline=None,
            base_delay=0.0,
            should_retry=reconnected,
        )
        return retry(lambda: migrate_as_leader(ctx, leadership))

    def finalize(self) -> None:
        """The serving leader's periodic work (:class:`LeaderMaintenance`)."""
        leadership = self.leadership
        if leadership is None or not self.health.interrupted(State.SERVING) or self.ctx is None:
            return
        if self._connection.writes_paused:
            return
        self._maintenance.probe_store(self.ctx.blob)
        try:
            self._maintenance.run(self.ctx, leadership.fence, self.log)
        except ConnectionLostError:
            return
        self.health.recover("finalize", leading=True)

    # -- promotion --------------------------------------------------------------------------

    def _promote(self, generation: int, requested_by: str | None = None) -> None:
        """Promote on the main thread: it never waits for a process to register (a
        generation none runs is refused at once, 409 ``generation-not-running``)."""
        consensus = self._connection.require()
        who = requested_by or self._config.process_id
        election_mod.promote(consensus, generation, requested_by=who, register_wait=0)
        self.log.info("promoted", target=generation, requested_by=who)

    def serve_promote(self, request: Promote) -> None:
        if not request.done.set_running_or_notify_cancel():
            return
        try:
            self._promote(request.deploy_generation, request.requested_by)
        except CatalogError as exc:
            request.done.set_exception(exc)
        else:
            request.done.set_result({"deploy_generation": request.deploy_generation})
