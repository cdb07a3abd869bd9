"""``catalog-upgrade fleet --serve``: the fleet page, its document and its metrics, served by the
product's HTTP server (orchestrator.sidecar.server) with the same limits, tokens and TLS.

    GET /          the fleet page (orchestrator.fleet.page)
    GET /status    the ``fleet --json`` document
    GET /metrics   the fleet metrics (orchestrator.fleet.metrics)
    GET /healthz, /readyz

A survey is shared by the requests of one second (the page polls, Prometheus scrapes). Writes
(append, promote, finalize) are refused as from a read-only process, by the one show-only API
(:mod:`orchestrator.sidecar.showonly`): ``fleet finalize`` is a command, run by someone who
means it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from werkzeug.wrappers import Response

from orchestrator.fleet.metrics import metrics_text
from orchestrator.fleet.page import FLEET_PAGE
from orchestrator.fleet.report import FleetReport
from orchestrator.fleet.surveyor import Surveyor
from orchestrator.machine.readiness import Readiness, ReadinessCheck
from orchestrator.sidecar.showonly import ShowOnlyApi
from orchestrator.status.web import PAGE_TYPE

__all__ = ["FleetShows", "fleet_api", "fleet_page"]

#: Requests within this many seconds of a survey share it.
SHARED_FOR: Final = 1.0
#: Where to go for what ``fleet --serve`` refuses.
ELSEWHERE: Final = {
    "promote": "catalog-upgrade promote --env NAME",
    "finalize": "catalog-upgrade fleet finalize",
    "append": "through an environment's leader sidecar",
    "read rows": "an environment's sidecar",
    "history": "catalog-upgrade history --env NAME",
}


def fleet_page() -> Response:
    return Response(FLEET_PAGE, content_type=PAGE_TYPE, headers={"Cache-Control": "no-store"})


def fleet_api(surveyor: Surveyor) -> ShowOnlyApi:
    """The API of ``fleet --serve``: the fleet ``surveyor`` reads, shown only."""
    return ShowOnlyApi(FleetShows(surveyor), "fleet", ELSEWHERE)


class FleetShows:
    """The fleet ``surveyor`` reads: its report (shared for :data:`SHARED_FOR`), its
    readiness and its metrics."""

    def __init__(self, surveyor: Surveyor) -> None:
        self._surveyor = surveyor
        self._lock = threading.Lock()
        self._last: FleetReport | None = None
        self._metrics = metrics_text(self.report)

    def report(self) -> FleetReport:
        """The fleet now: the last survey if it is younger than :data:`SHARED_FOR`."""
        with self._lock:
            if self._last is None or time.time() - self._last.read_at > SHARED_FOR:
                self._last = self._surveyor.report()
            return self._last

    def readiness(self) -> Readiness:
        report = self.report()
        down = [s.ensemble.name for s in report.surveys if s.error is not None]
        # An ensemble that does not answer is what the page reports, not a reason to stop
        # serving it: the check names it and stays ok.
        detail = f"ensembles not answering: {', '.join(down)}" if down else ""
        return Readiness((ReadinessCheck("survey", True, detail),))

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return self.report().to_json()

    def history_json(self) -> list[dict[str, Any]]:
        """The fleet has no one history: the API refuses it, naming ``history --env``."""
        return []

    def metrics_text(self) -> bytes:
        return self._metrics()
