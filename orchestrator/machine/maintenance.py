"""The serving leader's periodic work: orphan collection, the pending upgrade's finalization
(``--finalize-after``), finalization of queued shards and, on a thread of its own, the sweep
(read frontiers forward, garbage collection, scheduled compaction, coverage).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from catalog.blob import BlobStore
from catalog.consensus import Fence
from catalog.environment import read_catalog
from catalog.errors import (
    BlobStoreFullError,
    BlobUnreachableError,
    CatalogError,
    ConnectionLostError,
    FencedError,
)
from catalog.pending import PendingUpgrade, read_pending, switched_at
from catalog.shard.coverage import RollupCounts
from orchestrator.clock import zookeeper_now
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.journal import SidecarJournal
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.objectstore import SPACE_PROBE_KEY, BlobStoreHealth
from orchestrator.machine.progress import Progress
from orchestrator.machine.states import State, Stopping
from orchestrator.migrate import (
    MigrationContext,
    advance_frontiers,
    collect_garbage,
    collect_orphan_shards,
    compact_due,
    complete_finalization,
    finalization_due,
    finalize_pending,
    request_finalization,
)
from orchestrator.status.coverage import read_coverage


class Backoff:
    """Delays that double from one second up to ``cap`` until :meth:`reset`."""

    def __init__(self, cap: float) -> None:
        self._cap = cap
        self._delay = 0.5

    def next(self) -> float:
        self._delay = min(self._delay * 2, self._cap)
        return self._delay

    def reset(self) -> None:
        self._delay = 0.5


class LeaderMaintenance:
    """When each periodic task is due, and the sweep thread; one per sidecar."""

    def __init__(
        self,
        config: SidecarConfig,
        metrics: SidecarMetrics,
        journal: SidecarJournal,
        store: BlobStoreHealth,
        progress: Progress,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._journal = journal
        self._store = store
        self._progress = progress
        # After an outage of the blob store, the next try comes sooner than the interval:
        # 1 s, 2 s, 4 s ... up to it.
        self._orphan_backoff = Backoff(config.orphan_interval)
        self._gc_backoff = Backoff(config.gc_interval)
        self._next_orphan_scan = 0.0
        self._next_gc = time.monotonic() + config.gc_interval  # not at once: after a grace
        self._sweeper: threading.Thread | None = None
        self._known_finalized: set[str] = set()
        self._rollup_counts: RollupCounts = {}  # coverage metrics: rollup summaries read once

    def probe_store(self, blob: BlobStore) -> None:
        """One cheap request to the blob store, so readiness follows it within a round; while
        it is full, a few bytes tell whether room was made. BlobUnreachableError when it does
        not answer (an outage: a state, :mod:`orchestrator.machine.objectstore`)."""
        was_down = self._store.unreachable is not None
        blob.probe()
        self._store.answered()
        if self._store.full is not None:
            with contextlib.suppress(BlobStoreFullError):
                blob.put_bytes(SPACE_PROBE_KEY, b"\0" * 4096)
                blob.delete(SPACE_PROBE_KEY)
                self._store.written()
                was_down = True  # publish: the process node drops the full store
        if was_down:
            self._progress.publish()

    def run(self, ctx: MigrationContext, fence: Fence, log: Any) -> None:
        """One round: the pending upgrade's finalization when decided, orphans when due, a
        sweep started when due, pending finalizations of shards, each recorded in the journal.
        ConnectionLostError when ZooKeeper stops answering."""
        upgrade = self.finalize_upgrade(ctx, fence)
        if upgrade is not None:
            self._journal.record_finalized(upgrade, fence)
            self._progress.on_phase(State.SERVING.value)
        finalized = self._finalize_shards(ctx, fence, log)
        if finalized:
            self._journal.event("finalized", fence=fence, shards=finalized)

    def _finalize_shards(self, ctx: MigrationContext, fence: Fence, log: Any) -> list[str]:
        """Orphans when due, a sweep started when due, pending finalizations; the shards
        finalized."""
        config = self._config
        if time.monotonic() >= self._next_orphan_scan:
            self._next_orphan_scan = time.monotonic() + config.orphan_interval
            try:
                orphans = collect_orphan_shards(
                    ctx,
                    fence,
                    grace_seconds=config.orphan_grace,
                    known_finalized=self._known_finalized,
                )
            except BlobUnreachableError:
                self._next_orphan_scan = time.monotonic() + self._orphan_backoff.next()
                raise
            self._orphan_backoff.reset()
            if orphans:
                self._journal.event("orphans_queued", fence=fence, shards=orphans)
        sweeping = self._sweeper is not None and self._sweeper.is_alive()
        if time.monotonic() >= self._next_gc and not sweeping:
            self._next_gc = time.monotonic() + config.gc_interval
            # Thousands of reads at the target scale: off the main loop, whose heartbeats,
            # promotions and watch events must not wait for it.
            self._sweeper = threading.Thread(
                target=self._sweep, args=(ctx, fence, log), name="sidecar-sweep", daemon=True
            )
            self._sweeper.start()
        return finalize_pending(ctx, fence, lease_timeout=0.0)

    def finalize_upgrade(self, ctx: MigrationContext, fence: Fence) -> PendingUpgrade | None:
        """The pending upgrade's end: decided by the timer when due, completed (fenced) once
        decided by anyone; the upgrade finalized now, if any. Feeds the pending gauges."""
        found = read_pending(ctx.consensus)
        pending = None if found is None else found[0]
        # On ZooKeeper's clock: the switch's, and now (a fenced touch of gc/clock).
        switched = None if pending is None else switched_at(ctx.consensus)
        if pending is not None and pending.finalizing is None and pending.finalize_at is not None:
            now = zookeeper_now(ctx.consensus, fence)
            if switched is not None and finalization_due(pending, switched, now):
                request_finalization(
                    ctx.consensus, requested_by=self._config.process_id, reason="timer"
                )
        done = complete_finalization(ctx, fence) if pending is not None else None
        self._metrics.set_pending(None if done is not None else pending, switched)
        return done

    def _sweep(self, ctx: MigrationContext, fence: Fence, log: Any) -> None:
        """One maintenance pass on its own thread: read frontiers forward, then garbage.

        Every write is fenced, so a leader that stepped down meanwhile stops at its next
        write (and, recording before deleting, deletes no blob)."""
        try:
            found = read_catalog(ctx.consensus)
            if found is not None:
                advance_frontiers(ctx, found[0], fence)
            deleted = collect_garbage(ctx, fence, grace_seconds=self._config.gc_grace)
            self._metrics.blobs_collected.inc(len(deleted))
            if found is not None:
                compact_due(ctx, found[0], fence, min_batches=self._config.compact_min_batches)
            self._metrics.set_coverage(
                read_coverage(ctx.consensus, rollup_counts=self._rollup_counts)
            )
            self._gc_backoff.reset()
        except BlobUnreachableError as exc:  # an outage: try again soon, not at the interval
            self._store.failed(exc)
            self._next_gc = time.monotonic() + self._gc_backoff.next()
            log.warning(
                "sweep_deferred",
                reason="blob store unreachable",
                retry_in=self._next_gc - time.monotonic(),
            )
        except (ConnectionLostError, FencedError, Stopping) as exc:  # Stopping: a paced step
            log.info("sweep_stopped", reason=type(exc).__name__)
        except CatalogError as exc:
            log.warning("sweep_failed", **exc.to_json())
        except Exception:
            log.exception("sweep_crashed")
