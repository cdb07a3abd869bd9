"""What a sidecar records for the environment's readers: upgrade events and the history.

Events (``orchestrator.events``) are best effort, like a log, except that a fenced write
raises: a read-only process's go to its release's own log (the read-only rule), a leader's, and
those of a process that led (its exit), to the environment's. The upgrade history
(``orchestrator.history``) gets one fenced record per completed upgrade.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from catalog.consensus import Fence
from catalog.errors import ConnectionLostError
from catalog.pending import PendingUpgrade
from catalog.release import Release
from orchestrator import election as election_mod
from orchestrator.events import record_event
from orchestrator.history import UpgradeRecord, amend_record, phases_of, record_upgrade
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.connection import SidecarConnection
from orchestrator.migrate import LeaderResult


class SidecarJournal:
    """Records one sidecar's events and upgrades through its connection."""

    def __init__(
        self, config: SidecarConfig, release: Release, connection: SidecarConnection, log: Any
    ) -> None:
        self._config = config
        self._release = release
        self._connection = connection
        self._log = log
        #: Led at some point: its exit events belong to the environment.
        self.led = False

    def event(self, kind: str, *, fence: Fence | None = None, **fields: Any) -> None:
        """Record an upgrade event; best effort (status history), except that fenced raises."""
        consensus = self._connection.consensus
        if consensus is None or not self._connection.connected:
            return
        try:
            # A read-only process's events go to its release's own log (the read-only rule);
            # a leader's, and those of a process that led (its exit), to the environment's.
            own = (str(self._release.version), self._config.deploy_generation)
            owner = None if fence is not None or self.led else own
            record_event(
                consensus,
                kind,
                fence=fence,
                owner=owner,
                process_id=self._config.process_id,
                **fields,
            )
        except ConnectionLostError:
            self._log.warning("event_not_recorded", kind=kind)

    def record_migrated(self, leadership: election_mod.Leadership, result: LeaderResult) -> None:
        """The event of a migration that ended: ``bootstrap`` or ``migrated``, with its counts."""
        if result.bootstrap:
            counts: dict[str, Any] = {"collections": len(result.replaced)}
        else:
            counts = {
                "evolved": len(result.evolved),
                "replaced": len(result.replaced),
                "queued_for_finalization": len(set(result.queued_for_finalization)),
                "retracted_entries": result.retracted_entries,
            }
        self.event(
            "bootstrap" if result.bootstrap else "migrated",
            fence=leadership.fence,
            version=result.version,
            deploy_generation=result.deploy_generation,
            epoch=leadership.epoch,
            **counts,
            seconds=round(result.seconds, 3),
        )

    def record_upgrade(
        self,
        leadership: election_mod.Leadership,
        result: LeaderResult,
        from_version: str | None,
        entered: list[tuple[str, float]],
    ) -> None:
        """Append this upgrade to the environment's history (fenced; best effort, like the
        event log, except that fenced raises)."""
        consensus = self._connection.require()
        promotion = election_mod.read_promotion_request(consensus)
        if promotion is not None and promotion.deploy_generation != result.deploy_generation:
            promotion = None
        finished = time.time()
        if result.bootstrap:
            outcome = "bootstrapped"
        elif result.rolled_back_from is not None:
            outcome = "rollback"
        else:
            outcome = "pending" if result.pending else "completed"
        record = UpgradeRecord(
            deploy_generation=result.deploy_generation,
            to_version=result.version,
            outcome=outcome,
            discarded=result.discarded,
            finalized_at=None if outcome != "completed" else finished,
            finalized_by=None if outcome != "completed" else "immediately",
            from_version=from_version,
            promoted_by=None if promotion is None else promotion.requested_by,
            promoted_at=None if promotion is None else promotion.requested_at,
            leader=self._config.process_id,
            host=socket.gethostname(),
            took_over_at=entered[0][1] if entered else None,
            finished_at=finished,
            phases=phases_of(entered, finished),
        )
        with contextlib.suppress(ConnectionLostError):
            record_upgrade(consensus, record, fence=leadership.fence)
            if result.rolled_back_from_generation is not None:
                amend_record(consensus, result.rolled_back_from_generation,
                             fence=leadership.fence, outcome="rolled back",
                             pending_of=result.rolled_back_from)  # fmt: skip

    def record_finalized(self, pending: PendingUpgrade, fence: Fence) -> None:
        """The pending upgrade became final: its event and its history record (fenced)."""
        assert pending.finalizing is not None
        self.event(
            "finalized_upgrade",
            fence=fence,
            version=pending.version,
            deploy_generation=pending.deploy_generation,
            from_version=pending.from_version,
            requested_by=pending.finalizing.requested_by,
            reason=pending.finalizing.reason,
            pending_seconds=round(time.time() - pending.since, 3),
        )
        consensus = self._connection.require()
        with contextlib.suppress(ConnectionLostError):
            amend_record(consensus, pending.deploy_generation, fence=fence, outcome="completed",
                         pending_of=pending.version,
                         finalized_at=time.time(),
                         finalized_by=pending.finalizing.requested_by)  # fmt: skip
