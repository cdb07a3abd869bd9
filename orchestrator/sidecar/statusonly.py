"""The API of ``catalog-upgrade status --serve``: the status of one environment, no process.

It answers what a sidecar's read side answers (the live page, ``/status``, ``/history``,
``/healthz``, ``/readyz``), through the same server (:mod:`orchestrator.sidecar.server`), so
with the same limits, TLS and tokens. Everything that writes or needs a process (appends,
reads of rows, promotion, finalization) is refused as from a read-only process, naming where to
go instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from catalog.consensus import Consensus
from catalog.errors import NotLeaderError
from orchestrator.sidecar.http import MAX_APPEND_ROWS
from orchestrator.sidecar.readiness import Readiness, ReadinessCheck
from orchestrator.status.web import history_document, status_document

__all__ = ["StatusOnlyApi"]


class StatusOnlyApi:
    """A :class:`~orchestrator.sidecar.http.SidecarApi` of the status of ``consensus``'s
    environment."""

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

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        raise self._refusal("promote (catalog-upgrade promote, or a sidecar's POST /promote)")

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        raise self._refusal("finalize (catalog-upgrade finalize)")

    def append(
        self,
        collection: str,
        body: bytes,
        idempotency_key: str | None = None,
        *,
        arrow: bool = False,
        max_rows: int = MAX_APPEND_ROWS,
    ) -> Mapping[str, Any]:
        raise self._refusal("append (through the leader's sidecar)")

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        raise self._refusal("read rows (a sidecar's GET /read, or catalog-upgrade read)")

    def refused(self, error: str) -> None:
        """Refusals are not counted: this server has no metrics."""

    @staticmethod
    def _refusal(what: str) -> NotLeaderError:
        return NotLeaderError(f"status --serve only shows the status: {what}", state="status")
