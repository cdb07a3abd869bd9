"""The sidecar's state machine: check, wait for promotion, take over, migrate, serve, finalize."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import structlog

from catalog.consensus import Fence
from catalog.environment import PROMOTION_KEY, read_catalog
from catalog.errors import (
    CatalogError,
    ConnectionLostError,
    CorruptStateError,
    FencedError,
)
from catalog.retry import Retry
from orchestrator import election as election_mod
from orchestrator.fencing import generation_fence
from orchestrator.history import UpgradeRecord, phases_of, record_upgrade
from orchestrator.migrate import (
    LeaderResult,
    MigrationContext,
    advance_frontiers,
    check_read_only,
    collect_garbage,
    collect_orphan_shards,
    compact_due,
    finalize_pending,
    migrate_as_leader,
)
from orchestrator.sidecar.connection import SidecarConnection
from orchestrator.sidecar.states import (
    State,
    _Promote,
    _Stopping,
)
from orchestrator.status.coverage import read_coverage

log = structlog.get_logger(__name__)


class SidecarMachine(SidecarConnection):
    """Moves the process through its states on the main thread (see :mod:`orchestrator.sidecar`)."""

    def _on_election_event(self, event: election_mod.ElectionEvent) -> None:
        self._log.debug("election_event", kind=event.kind)
        if self._leadership is not None and event.reason == "session_lost":
            self._step_down("session expired")
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

    def _evaluate(self, *, force_check: bool = False) -> None:
        """Re-read what the election watches and act: fence, re-plan, or take over."""
        if self._stopping:
            raise _Stopping()
        consensus = self._consensus
        assert consensus is not None and self._election is not None
        generation = self.config.deploy_generation
        promotion = election_mod.read_promotion(consensus)
        epoch = election_mod.read_epoch(consensus)
        unreadable: CorruptStateError | None = None
        try:
            found = read_catalog(consensus)
        except CorruptStateError as exc:  # still fence below: that needs no catalog
            found, unreadable = None, exc
        catalog = found[0] if found else None
        self._epoch = epoch.epoch if epoch is not None else None
        self.metrics.set_epoch(self._epoch)
        fenced = generation_fence(
            generation,
            catalog=None if catalog is None else catalog.deploy_generation,
            promoted=promotion,
        )
        if fenced is not None:
            raise fenced
        if self._leadership is not None:
            session = self._session()
            if session is not None and session != self._leader_session:
                # Our session expired and kazoo made a new one before its LOST reached us.
                self._step_down("session expired")
                self._pending = True
                return
            if epoch is None or epoch.epoch != self._leadership.epoch:
                raise FencedError(
                    f"fenced: the epoch moved from {self._leadership.epoch} to "
                    f"{None if epoch is None else epoch.epoch}",
                    epoch=self._leadership.epoch,
                    current_epoch=None if epoch is None else epoch.epoch,
                )
            if unreadable is not None:
                raise unreadable
            # Interrupted by a lost connection or an unreadable node: resume.
            if State.MIGRATING in (self._state, self._resume_state):
                self._complete_migration(self._leadership)
            self._recover("_evaluate")
            return
        if unreadable is not None:
            raise unreadable
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
        self._recover("_evaluate")
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
        self._leader_session = self._session()
        self._led = True
        self._epoch = leadership.epoch
        self.metrics.set_epoch(leadership.epoch)
        self.metrics.leader.set(1)
        self._log = self._log.bind(epoch=leadership.epoch)
        structlog.contextvars.bind_contextvars(epoch=leadership.epoch)
        self._log.info("leader", epoch=leadership.epoch)
        self._migration_phases = [("taking over", time.time())]
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
        self._record_upgrade(leadership, result)
        self._set_state(State.SERVING)
        self._finalize()

    def _record_upgrade(self, leadership: election_mod.Leadership, result: LeaderResult) -> None:
        """Append this upgrade to the environment's history (fenced; best effort, like the
        event log, except that fenced raises)."""
        assert self._check is not None
        entered, self._migration_phases = self._migration_phases or [], None
        consensus = self._require_consensus()
        promotion = consensus.get(PROMOTION_KEY)
        asked = promotion.json() if promotion is not None else None
        if (
            not isinstance(asked, dict)
            or asked.get("deploy_generation") != result.deploy_generation
        ):
            asked = {}
        finished = time.time()
        record = UpgradeRecord(
            deploy_generation=result.deploy_generation,
            to_version=result.version,
            outcome="bootstrapped" if result.bootstrap else "completed",
            from_version=self._check.catalog_version,
            promoted_by=asked.get("requested_by"),
            promoted_at=asked.get("requested_at"),
            leader=self.config.process_id,
            host=socket.gethostname(),
            took_over_at=entered[0][1] if entered else None,
            finished_at=finished,
            phases=phases_of(entered, finished),
        )
        with contextlib.suppress(ConnectionLostError):
            record_upgrade(consensus, record, fence=leadership.fence)

    def _migrate(self, leadership: election_mod.Leadership) -> LeaderResult:
        """``migrate_as_leader``, re-run after a lost connection (every step is idempotent)."""
        ctx = self._ctx
        assert ctx is not None

        def reconnected(_exc: Exception) -> bool:
            self._log.warning("migration_retry", reason="connection lost")
            return self._connected.wait(self.config.session_timeout)

        retry = Retry(
            retryable=(ConnectionLostError,),
            max_attempts=3,
            deadline=None,
            base_delay=0.0,
            should_retry=reconnected,
        )
        return retry(lambda: migrate_as_leader(ctx, leadership))

    def _finalize(self) -> None:
        leadership = self._leadership
        serving = State.SERVING in (self._state, self._resume_state)
        if leadership is None or not serving or self._ctx is None:
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
            sweeping = self._sweeper is not None and self._sweeper.is_alive()
            if time.monotonic() >= self._next_gc and not sweeping:
                self._next_gc = time.monotonic() + self.config.gc_interval
                # Thousands of reads at the target scale: off the main loop, whose heartbeats,
                # promotions and watch events must not wait for it.
                self._sweeper = threading.Thread(
                    target=self._sweep,
                    args=(self._ctx, leadership.fence),
                    name="sidecar-sweep",
                    daemon=True,
                )
                self._sweeper.start()
            finalized = finalize_pending(self._ctx, leadership.fence, lease_timeout=0.0)
        except ConnectionLostError:
            return
        self._recover("_finalize")
        if finalized:
            self._event("finalized", fence=leadership.fence, shards=finalized)

    def _sweep(self, ctx: MigrationContext, fence: Fence) -> None:
        """One maintenance pass on its own thread: read frontiers forward, then garbage.

        Every write is fenced, so a leader that stepped down meanwhile stops at its next
        write (and, recording before deleting, deletes no blob)."""
        try:
            found = read_catalog(ctx.consensus)
            if found is not None:
                advance_frontiers(ctx, found[0], fence)
            deleted = collect_garbage(ctx, fence, grace_seconds=self.config.gc_grace)
            self.metrics.blobs_collected.inc(len(deleted))
            if found is not None:
                compact_due(ctx, found[0], fence, min_batches=self.config.compact_min_batches)
            self.metrics.set_coverage(
                read_coverage(ctx.consensus, rollup_counts=self._rollup_counts)
            )
        except (ConnectionLostError, FencedError) as exc:
            self._log.info("sweep_stopped", reason=type(exc).__name__)
        except CatalogError as exc:
            self._log.warning("sweep_failed", **exc.to_json())
        except Exception:
            self._log.exception("sweep_crashed")

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
