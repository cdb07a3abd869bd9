"""The sidecar's data plane, called from HTTP threads: readiness, status, promote, append, read.

It only reads the machine's state and writes through kazoo (thread-safe); a promotion goes to
the main thread through the inbox. Appends go to the process's writer
(:mod:`orchestrator.dataplane.writer`), reads to its reader (:mod:`orchestrator.dataplane.reader`),
both through what it serves (:mod:`orchestrator.dataplane.serving`). Refusals are domain errors
(``catalog.errors``) that carry their data; :mod:`orchestrator.sidecar.api` alone turns them
into HTTP statuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pyarrow as pa

from catalog.errors import CatalogError
from catalog.release import Release
from catalog.schema import fingerprint, schema_json
from orchestrator.dataplane.reader import SidecarReader
from orchestrator.dataplane.serving import Serving
from orchestrator.dataplane.writer import AppendRequest, SidecarWriter
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.connection import SidecarConnection
from orchestrator.machine.machine import SidecarMachine
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.progress import Progress
from orchestrator.machine.readiness import Readiness, SidecarConditions, sidecar_readiness
from orchestrator.machine.states import Promote
from orchestrator.migrate import request_finalization
from orchestrator.status.web import history_document, status_document

PROMOTE_TIMEOUT = 30.0


class BusyError(CatalogError):
    """The process did not handle a request in time (its main loop is busy migrating)."""

    code = "busy"


class SidecarDataPlane:
    """What the HTTP server asks of the process (:class:`~orchestrator.sidecar.api.SidecarApi`)."""

    def __init__(
        self,
        config: SidecarConfig,
        release: Release,
        metrics: SidecarMetrics,
        connection: SidecarConnection,
        machine: SidecarMachine,
        progress: Progress,
        inbox: Callable[[object], None],
    ) -> None:
        self._config = config
        self._release = release
        self._metrics = metrics
        self._connection = connection
        self._machine = machine
        self._progress = progress
        self._inbox = inbox
        serving = Serving(config, release, connection, machine, progress)
        self._writer = SidecarWriter(serving, metrics)
        self._reader = SidecarReader(serving)

    @property
    def last_commit_at(self) -> float | None:
        """When this process last committed an append (wall clock; None: never)."""
        return self._writer.last_commit_at

    def readiness(self) -> Readiness:
        machine, connection = self._machine, self._connection
        return sidecar_readiness(
            SidecarConditions(
                zk=self._config.zk,
                state=self._progress.state,
                phase=self._progress.phase,
                connected=connection.connected,
                registered=connection.registered,
                writes_paused=connection.writes_paused,
                leading=machine.leadership is not None,
                unreadable=machine.health.unreadable,
                store=machine.store,
                step=self._progress.step,
                paused=machine.paused(),
            )
        )

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return status_document(self._connection.require(), coverage=coverage)

    def history_json(self) -> list[dict[str, Any]]:
        return history_document(self._connection.require())

    def collections_json(self) -> Mapping[str, Any]:
        """The collections this release serves, each with its schema as appends must send it
        and reads give it (``GET /collections``)."""
        return {
            "version": str(self._release.version),
            "collections": [
                {
                    "name": b.name,
                    "global_id": b.global_id,
                    "kind": b.kind,
                    "fingerprint": fingerprint(b.schema),
                    "fields": schema_json(b.schema),
                }
                for b in sorted(self._release.builtins, key=lambda b: b.name)
            ],
        }

    def metrics_text(self) -> bytes:
        return self._metrics.render()

    def refused(self, error: str) -> None:
        self._metrics.refusals.labels(error=error).inc()

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        """Ask the main thread to promote (default: this generation); ``requested_by`` (the
        caller's credential name and address) is recorded with the promotion and logged."""
        self._connection.require()
        generation = (
            deploy_generation if deploy_generation is not None else self._config.deploy_generation
        )
        request = Promote(generation, Future(), requested_by)
        self._inbox(request)
        try:
            return request.done.result(timeout=PROMOTE_TIMEOUT)
        except FutureTimeout:
            request.done.cancel()
            raise BusyError(
                f"the process did not handle the promotion within {PROMOTE_TIMEOUT:g} s "
                "(migrating?)",
                timeout=PROMOTE_TIMEOUT,
            ) from None

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        """Decide to finalize the pending upgrade (any process may; the serving leader does
        the work, fenced)."""
        answer = request_finalization(
            self._connection.require(),
            requested_by=requested_by,
            reason="operator",
            expect_version=expect_version,
        )
        return answer.to_json()

    def append(self, request: AppendRequest) -> Mapping[str, Any]:
        """Append a request's rows exactly once (:meth:`SidecarWriter.append`)."""
        return self._writer.append(request)

    def warm(self) -> None:
        """Ahead of a promotion, warm the key logs of the shards this process would append to
        (:meth:`SidecarWriter.warm`)."""
        self._writer.warm()

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        """The snapshot of ``collection`` as this release reads it
        (:meth:`SidecarReader.read_table`)."""
        return self._reader.read_table(collection, as_of)

    def hand_over(self) -> bool:
        """This leader was fenced by a promotion: it goes on answering reads through the
        catalog while it may (:meth:`SidecarReader.hand_over`)."""
        return self._reader.hand_over()
