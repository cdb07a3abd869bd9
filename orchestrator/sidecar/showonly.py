"""Servers that only show: ``status --serve`` and ``fleet --serve``, one read-only API.

They answer what a sidecar's read side answers (a page, ``/status``, ``/metrics``, ``/healthz``,
``/readyz``, and for one environment ``/history``), through the same server
(:mod:`orchestrator.sidecar.server`), so with the same limits, TLS and tokens. Everything that
writes or needs a process (appends, reads of rows, promotion, finalization) is refused as from a
read-only process (``409 read-only``), naming where to go instead. :class:`ShowOnlyApi` is that
API; what it shows comes from a :class:`Shows` (:mod:`orchestrator.sidecar.statusonly`,
:mod:`orchestrator.fleet.server`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import pyarrow as pa

from orchestrator.dataplane.serving import NotLeaderError
from orchestrator.dataplane.writer import AppendRequest
from orchestrator.machine.readiness import Readiness

__all__ = ["ShowOnlyApi", "Shows"]


class Shows(Protocol):
    """What a show-only server shows."""

    def readiness(self) -> Readiness: ...

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]: ...

    def history_json(self) -> list[dict[str, Any]]: ...

    def metrics_text(self) -> bytes: ...


@attrs.frozen
class ShowOnlyApi:
    """A :class:`~orchestrator.sidecar.api.SidecarApi` that shows ``shows`` and refuses the
    rest: ``"{name} --serve only shows the {name}: {action} ({where})"``, where ``where`` is
    ``elsewhere[action]``. An action named in ``elsewhere`` that ``shows`` could answer (the
    fleet's ``history``) is refused too."""

    shows: Shows
    #: ``status`` or ``fleet``: the command's name, and what it shows.
    name: str
    #: For each refused action (``promote``, ``finalize``, ``append``, ``read rows``, maybe
    #: ``history``), where to do it instead.
    elsewhere: Mapping[str, str]

    def readiness(self) -> Readiness:
        return self.shows.readiness()

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return self.shows.status_json(coverage)

    def history_json(self) -> list[dict[str, Any]]:
        if "history" in self.elsewhere:
            raise self.refusal("history")
        return self.shows.history_json()

    def metrics_text(self) -> bytes:
        return self.shows.metrics_text()

    def collections_json(self) -> Mapping[str, Any]:
        raise self.refusal("collections")

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        raise self.refusal("promote")

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        raise self.refusal("finalize")

    def append(self, request: AppendRequest) -> Mapping[str, Any]:
        raise self.refusal("append")

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        raise self.refusal("read rows")

    def refused(self, error: str) -> None:
        """Refusals are not counted: a show-only server has no counters of its own."""

    def refusal(self, action: str) -> NotLeaderError:
        where = self.elsewhere.get(action, "a sidecar")
        return NotLeaderError(
            f"{self.name} --serve only shows the {self.name}: {action} ({where})", state=self.name
        )
