"""The surveyor: reads every ensemble of a fleet file, all at once, into one report.

Each ensemble is read on its own thread (an ensemble that does not answer costs its timeout
once, not once per ensemble after it). A surveyor that lives long (``fleet --watch``, ``fleet
--serve``) keeps one ZooKeeper client per ensemble, started at the first survey and retried at
each one until it connects; a one-shot ``fleet`` connects, reads and closes.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from orchestrator.fleet.ensembles import Ensemble, FleetFile
from orchestrator.fleet.read import EnsembleSurvey, survey
from orchestrator.fleet.report import EVERYTHING, FleetFilter, FleetReport
from orchestrator.zookeeper.clients import close

log = structlog.get_logger(__name__)


@attrs.define
class Surveyor:
    """Surveys ``fleet``; ``keep``: keep the clients between surveys (close() ends them)."""

    fleet: FleetFile
    timeout: float
    keep: bool = False
    _clients: dict[str, KazooClient] = attrs.field(factory=dict, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def report(self, filter: FleetFilter = EVERYTHING) -> FleetReport:
        read_at = time.time()
        ensembles = self.fleet.ensembles
        with ThreadPoolExecutor(max_workers=min(16, len(ensembles))) as pool:
            surveys = list(pool.map(self._survey, ensembles))
        return FleetReport.of(surveys, self.fleet.thresholds, read_at, filter)

    def _survey(self, ensemble: Ensemble) -> EnsembleSurvey:
        if not self.keep:
            return survey(ensemble, timeout=self.timeout)
        return survey(ensemble, timeout=self.timeout, client=self._client(ensemble))

    def _client(self, ensemble: Ensemble) -> KazooClient | None:
        """The kept client of ``ensemble``, started; None when it does not connect now (the
        survey then connects itself and reports why it cannot)."""
        with self._lock:
            client = self._clients.get(ensemble.name)
        if client is not None:
            return client
        client = ensemble.client()
        try:
            client.start(timeout=self.timeout)
        except (KazooTimeoutError, OSError):
            close(client)
            return None
        with self._lock:
            self._clients[ensemble.name] = client
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            close(client)
