"""A reversible upgrade with real sidecar processes, the CLI and the HTTP API.

0.10.0 -> 0.11.0 with ``--finalize-after never``: status, metrics and history show it pending;
0.10.0 started with ``--rollback-from`` and promoted rolls it back; 0.11.0 promoted again with a
two-second window is finalized by its leader's timer (history amended, who and why); the CLI
``finalize`` then answers "already final", and 0.10.0 is refused naming the generation.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK, EXIT_REFUSED
from support.sidecars import Launch, cli, json_lines, ndjson, release_file
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1, V2 = "0.10.0", "0.11.0"
ROLES = "mz_catalog.mz_roles"


def test_pending_rollback_timer_finalization_and_refusal(launch: Launch, zk_env: ZkEnv) -> None:
    def run(*args: str) -> Any:
        return cli(*args, "--zk", zk_env.hosts, "--env", zk_env.name)

    def status() -> dict[str, Any]:
        return dict(json.loads(run("status", "--json").stdout))

    def history() -> list[dict[str, Any]]:
        return list(json.loads(run("history", "--json").stdout))

    def promote(generation: int) -> None:
        done = run("promote", "--deploy-generation", str(generation), "--wait", "30")
        assert done.returncode == EXIT_OK, done.stderr

    blue = launch(V1, 1, "blue-1", auto_promote=True)
    blue.wait_state("serving")
    role = {"id": 7, "oid": 30007, "name": "analyst", "inherit": True}
    assert blue.http("POST", f"/append?collection={ROLES}", ndjson([role]))[0] == 200

    green = launch(V2, 2, "green-2", extra=["--finalize-after", "never"])
    green.wait_state("ready")
    promote(2)
    assert blue.wait_exit() == EXIT_FENCED
    finalization = status()["finalization"]
    assert finalization["state"] == "pending"
    upgrade = finalization["upgrade"]
    assert (upgrade["version"], upgrade["from_version"], upgrade["finalize_at"]) == (V2, V1, None)
    assert ROLES in upgrade["replaced"]
    table = run("status").stdout
    assert "PENDING" in table and "never by itself" in table
    time.sleep(5.5)  # one finalize interval: the leader's gauges follow the pending node
    metrics = green.http("GET", "/metrics")[1].decode()
    assert f'catalog_upgrade_upgrade_pending{{from_version="{V1}",version="{V2}"}} 1.0' in metrics
    assert "catalog_upgrade_upgrade_finalize_at_timestamp_seconds +Inf" in metrics
    assert history()[-1]["outcome"] == "pending"
    analyst = {"id": "u8", "oid": 30008, "name": "auditor", "inherit": False}
    assert green.http("POST", f"/append?collection={ROLES}", ndjson([analyst]))[0] == 200

    back = launch(V1, 3, "back-3", extra=["--rollback-from", str(release_file(V2))])
    back.wait_state("ready")
    promote(3)
    assert green.wait_exit() == EXIT_FENCED
    rows = json_lines(back.http("GET", f"/read?collection={ROLES}")[1])
    assert sorted(r["id"] for r in rows) == [7, 8]  # 'u8' carried back through the inverse
    assert status()["finalization"]["state"] == "final"
    records = {r["deploy_generation"]: r for r in history()}
    assert records[2]["outcome"] == "rolled back"
    assert (records[3]["outcome"], records[3]["from_version"]) == ("rollback", V2)

    again = launch(V2, 4, "again-4", extra=["--finalize-after", "2s"])
    again.wait_state("ready")
    promote(4)
    assert back.wait_exit() == EXIT_FENCED
    deadline = time.monotonic() + 30
    while status()["finalization"]["state"] != "final" and time.monotonic() < deadline:
        time.sleep(0.5)
    final = status()["finalization"]
    assert final["state"] == "final", final
    assert final["finalized"]["deploy_generation"] == 4
    assert final["finalized"]["by"] == "again-4"  # the leader's timer decided
    record = {r["deploy_generation"]: r for r in history()}[4]
    assert record["outcome"] == "completed" and record["finalized_by"] == "again-4"
    rows = json_lines(again.http("GET", f"/read?collection={ROLES}")[1])
    assert sorted(r["id"] for r in rows) == ["u7", "u8"]

    done = run("finalize", "--version", V2)
    assert done.returncode == EXIT_OK, done.stderr
    assert "nothing to finalize" in done.stdout
    done = run("finalize", "--version", V1)
    assert done.returncode == EXIT_REFUSED and "finalize-version" in done.stderr

    late = launch(V1, 5, "late-5")
    assert late.wait_exit() == EXIT_REFUSED
    assert "finalized at deploy generation 4" in late.log_tail(60)
