"""Servers that only show (status --serve, fleet --serve) refuse every write and row read alike:
a read-only refusal naming the operation and where to go instead, and nothing done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from catalog.errors import NotLeaderError
from orchestrator.fleet.server import FleetApi
from orchestrator.sidecar.showonly import ShowOnlyApi
from orchestrator.sidecar.statusonly import StatusOnlyApi

REFUSED: dict[str, Callable[[ShowOnlyApi], Any]] = {
    "promote": lambda api: api.promote(2, "ops"),
    "finalize": lambda api: api.finalize("0.11.0", "ops"),
    "append": lambda api: api.append("mz_tables", b'{"id": 1}\n', "key-1"),
    "read rows": lambda api: api.read_table("mz_tables", None),
}


def _apis() -> list[ShowOnlyApi]:
    # Neither refusal touches the collaborators: none is given.
    return [StatusOnlyApi(consensus=None), FleetApi.__new__(FleetApi)]  # type: ignore[arg-type]


@pytest.mark.parametrize("operation", sorted(REFUSED))
@pytest.mark.parametrize("api", _apis(), ids=["status", "fleet"])
def test_writes_and_row_reads_are_refused_naming_where_to_go(
    api: ShowOnlyApi, operation: str
) -> None:
    with pytest.raises(NotLeaderError) as refused:
        REFUSED[operation](api)
    assert refused.value.code == "read-only"
    assert refused.value.details["state"] == api.state
    assert str(refused.value) == f"{api.shows}: {operation} ({api.elsewhere[operation]})"


def test_the_fleet_refuses_the_history_that_the_status_server_serves() -> None:
    with pytest.raises(NotLeaderError, match=r"history \(catalog-upgrade history --env NAME\)"):
        FleetApi.__new__(FleetApi).history_json()
    assert "history" not in StatusOnlyApi.elsewhere
