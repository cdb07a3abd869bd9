"""The API of ``catalog-upgrade status --serve``: the status of one environment, no process.

It answers what a sidecar's read side answers (the live page, ``/status``, ``/history``,
``/healthz``, ``/readyz``), through the same server (:mod:`orchestrator.sidecar.server`), so
with the same limits, TLS and tokens. Everything that writes or needs a process (appends,
reads of rows, promotion, finalization) is refused as from a read-only process, naming where to
go instead (:mod:`orchestrator.sidecar.showonly`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from catalog.consensus import Consensus
from orchestrator.sidecar.readiness import Readiness, ReadinessCheck
from orchestrator.sidecar.showonly import ShowOnlyApi
from orchestrator.status.web import history_document, status_document

__all__ = ["StatusOnlyApi"]


class StatusOnlyApi(ShowOnlyApi):
    """A :class:`~orchestrator.sidecar.http.SidecarApi` of the status of ``consensus``'s
    environment."""

    shows = "status --serve only shows the status"
    state = "status"
    elsewhere: ClassVar[Mapping[str, str]] = {
        "promote": "catalog-upgrade promote, or a sidecar's POST /promote",
        "finalize": "catalog-upgrade finalize",
        "append": "through the leader's sidecar",
        "read rows": "a sidecar's GET /read, or catalog-upgrade read",
    }

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
