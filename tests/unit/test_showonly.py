"""Servers that only show (status --serve, fleet --serve) refuse every write and row read: a
read-only refusal naming the operation and where to go instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from catalog.errors import NotLeaderError
from orchestrator.fleet.server import FleetApi
from orchestrator.sidecar.statusonly import StatusOnlyApi

REFUSED: dict[str, Callable[[Any], Any]] = {
    "promote": lambda api: api.promote(2, "ops"),
    "finalize": lambda api: api.finalize("0.11.0", "ops"),
    "append": lambda api: api.append("mz_tables", b'{"id": 1}\n', "key-1"),
    "read rows": lambda api: api.read_table("mz_tables", None),
}
# Neither refusal touches the collaborators: none is given.
SERVERS = {
    "status": StatusOnlyApi(consensus=None),  # type: ignore[arg-type]
    "fleet": FleetApi.__new__(FleetApi),
}


@pytest.mark.parametrize("operation", sorted(REFUSED))
@pytest.mark.parametrize("server", sorted(SERVERS))
def test_writes_and_row_reads_are_refused_naming_where_to_go(server: str, operation: str) -> None:
    with pytest.raises(NotLeaderError) as refused:
        REFUSED[operation](SERVERS[server])
    assert refused.value.code == "read-only"
    assert refused.value.details["state"] == server
    assert str(refused.value).startswith(f"{server} --serve only shows the {server}: {operation} (")


def test_the_fleet_refuses_the_history_that_the_status_server_serves() -> None:
    with pytest.raises(NotLeaderError, match=r"history \(catalog-upgrade history --env NAME\)"):
        FleetApi.__new__(FleetApi).history_json()
