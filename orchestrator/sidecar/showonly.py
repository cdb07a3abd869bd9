"""Servers that only show (``status --serve``, ``fleet --serve``): what they refuse, and how.

They serve a :class:`~orchestrator.sidecar.http.SidecarApi` through the product's server, but
everything that writes or needs a sidecar process (appends, reads of rows, promotion,
finalization) is refused as from a read-only process (409 ``not-leader``), naming where to go
instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from catalog.errors import NotLeaderError
from orchestrator.sidecar.http import MAX_APPEND_ROWS

__all__ = ["ShowOnlyApi"]


class ShowOnlyApi:
    """The refusals of a server that only shows; a subclass says what it shows and where to go.

    ``shows`` leads every refusal ("status --serve only shows the status"), ``state`` is the
    state it reports, and ``elsewhere`` names, for each refused operation (``promote``,
    ``finalize``, ``append``, ``read rows``, and whatever else the subclass refuses), where to
    go instead.
    """

    shows: ClassVar[str]
    state: ClassVar[str]
    elsewhere: ClassVar[Mapping[str, str]]

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        raise self._refusal("promote")

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        raise self._refusal("finalize")

    def append(
        self,
        collection: str,
        body: bytes,
        idempotency_key: str | None = None,
        *,
        arrow: bool = False,
        max_rows: int = MAX_APPEND_ROWS,
    ) -> Mapping[str, Any]:
        raise self._refusal("append")

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        raise self._refusal("read rows")

    def refused(self, error: str) -> None:
        """Refusals are not counted: such a server has no sidecar metrics."""

    def _refusal(self, what: str) -> NotLeaderError:
        return NotLeaderError(f"{self.shows}: {what} ({self.elsewhere[what]})", state=self.state)
