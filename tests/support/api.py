"""A scripted :class:`orchestrator.sidecar.api.SidecarApi` for tests of the HTTP layer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pyarrow as pa

from catalog.errors import FencedError
from orchestrator.dataplane.writer import AppendRequest
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.readiness import Readiness, ReadinessCheck


@attrs.define
class ScriptedApi:
    """A SidecarApi whose answers the test sets; it records what the server passed in."""

    ready: bool = False
    metrics_: SidecarMetrics = attrs.field(factory=SidecarMetrics)
    promoted: list[int | None] = attrs.field(factory=list)
    requested_by: list[str | None] = attrs.field(factory=list)
    appended: list[tuple[str, bytes]] = attrs.field(factory=list)
    keys: list[str | None] = attrs.field(factory=list)
    append_error: Exception | None = None
    #: Raised one per append, in turn, before the appends succeed (retries of a client).
    append_errors: list[Exception] = attrs.field(factory=list)
    refusals: list[str] = attrs.field(factory=list)
    finalized: list[tuple[str | None, str]] = attrs.field(factory=list)
    formats: list[tuple[bool, int]] = attrs.field(factory=list)
    #: What ``read_table`` answers (default: the two rows ``read`` answers).
    table: pa.Table | None = None

    def readiness(self) -> Readiness:
        return Readiness(
            (
                ReadinessCheck("zookeeper", True),
                ReadinessCheck("state", self.ready, "state is checking"),
            )
        )

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return {"catalog": None, "processes": [], **({"coverage": {}} if coverage else {})}

    def history_json(self) -> list[dict[str, Any]]:
        return [{"deploy_generation": 1, "outcome": "bootstrapped"}]

    def collections_json(self) -> Mapping[str, Any]:
        return {"version": "0.1.0", "collections": []}

    def metrics_text(self) -> bytes:
        return self.metrics_.render()

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        self.promoted.append(deploy_generation)
        self.requested_by.append(requested_by)
        if deploy_generation == 0:
            raise FencedError("stale", deploy_generation=0, catalog_generation=1)
        return {"deploy_generation": deploy_generation}

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        self.finalized.append((expect_version, requested_by))
        return {"already_final": expect_version == "final", "version": expect_version}

    def append(self, request: AppendRequest) -> Mapping[str, Any]:
        if self.append_error is not None:
            raise self.append_error
        if self.append_errors:
            raise self.append_errors.pop(0)
        collection, body = request.collection, request.body
        self.formats.append((request.arrow, request.max_rows))
        self.appended.append((collection, body))
        self.keys.append(request.idempotency_key)
        return {
            "collection": collection,
            "shard_id": "sh-scripted",
            "rows": body.count(b"\n"),
            "ts": 2,
            "upper": 3,
            "replayed": request.idempotency_key == "seen",
        }

    def refused(self, error: str) -> None:
        self.refusals.append(error)

    def rows(self, as_of: int | None) -> list[dict[str, Any]]:
        return [{"id": "a", "as_of": as_of}, {"id": "b", "as_of": as_of}]

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        if self.table is not None:
            return self.table
        return pa.Table.from_pylist(self.rows(as_of))
