"""What ``catalog-upgrade status --serve`` shows: the status of one environment, no process.

The live page, ``/status``, ``/history``, ``/healthz`` and ``/readyz`` of a sidecar's read side,
read from ZooKeeper; :func:`status_only_api` serves them through the one show-only API
(:mod:`orchestrator.sidecar.showonly`), which refuses everything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.consensus import Consensus
from orchestrator.machine.readiness import Readiness, ReadinessCheck
from orchestrator.sidecar.showonly import ShowOnlyApi
from orchestrator.status.web import history_document, status_document

__all__ = ["StatusShows", "status_only_api"]

#: Where to go for what ``status --serve`` refuses.
ELSEWHERE = {
    "promote": "catalog-upgrade promote, or a sidecar's POST /promote",
    "finalize": "catalog-upgrade finalize",
    "append": "through the leader's sidecar",
    "read rows": "a sidecar's GET /read, or catalog-upgrade read",
}


def status_only_api(consensus: Consensus) -> ShowOnlyApi:
    """The API of ``status --serve`` over ``consensus``'s environment."""
    return ShowOnlyApi(StatusShows(consensus), "status", ELSEWHERE)


class StatusShows:
    """The status of ``consensus``'s environment, as a sidecar's read side shows it."""

    def __init__(self, consensus: Consensus) -> None:
        self._consensus = consensus

    def readiness(self) -> Readiness:
        connected = self._consensus.client.connected
        return Readiness((ReadinessCheck("zookeeper", connected, "not connected to ZooKeeper"),))

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return status_document(self._consensus, coverage=coverage)

    def history_json(self) -> list[dict[str, Any]]:
        return history_document(self._consensus)

    def metrics_text(self) -> bytes:
        return b""
