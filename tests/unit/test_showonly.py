"""Servers that only show (status --serve, fleet --serve) refuse every write and row read: a
read-only refusal naming the operation and where to go instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.dataplane.serving import NotLeaderError
from orchestrator.dataplane.writer import AppendRequest
from orchestrator.fleet.server import fleet_api
from orchestrator.sidecar.statusonly import status_only_api

REFUSED: dict[str, Callable[[Any], Any]] = {
    "promote": lambda api: api.promote(2, "ops"),
    "finalize": lambda api: api.finalize("0.11.0", "ops"),
    "append": lambda api: api.append(AppendRequest("mz_tables", b'{"id": 1}\n', "key-1")),
    "read rows": lambda api: api.read_table("mz_tables", None),
}
# Neither refusal touches the collaborators: none is given.
SERVERS = {
    "status": status_only_api(consensus=None),  # type: ignore[arg-type]
    "fleet": fleet_api(surveyor=None),  # type: ignore[arg-type]
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
        fleet_api(surveyor=None).history_json()  # type: ignore[arg-type]
