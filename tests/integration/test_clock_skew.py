"""A host whose clock runs ahead decides nothing early: a successor under libfaketime (two days
ahead) takes over a pending upgrade with a 24-hour window and leaves it pending, because the
window is measured on ZooKeeper's clock (``orchestrator.migrate.finalization``)."""

from __future__ import annotations

import datetime
import glob
import json
import re
import time

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK
from support.sidecars import Launch, cli, release_file
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V1, V2 = "0.10.0", "0.11.0"
WINDOW = ["--finalize-after", "24h"]


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.skip("a clock that runs ahead needs libfaketime (Debian package faketime)")
    return found[0]


@pytest.mark.slow
def test_a_successor_whose_clock_runs_ahead_does_not_finalize_a_pending_upgrade(
    launch: Launch, zk_env: ZkEnv
) -> None:
    ahead_env = {"LD_PRELOAD": libfaketime(), "FAKETIME": "+2d",
                 "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
    blue = launch(V1, 1, "blue-1", auto_promote=True)
    blue.wait_state("serving")
    first = launch(V2, 2, "green-a", extra=WINDOW)
    first.wait_state("ready")
    ahead = launch(V2, 2, "green-ahead", extra=WINDOW, exec_environment=ahead_env)
    ahead.wait_state("ready")
    promoted = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                   "--deploy-generation", "2", "--wait", "30")  # fmt: skip
    assert promoted.returncode == EXIT_OK, promoted.stderr
    assert blue.wait_exit() == EXIT_FENCED
    assert first.wait_state("serving")["mode"] == "leader"
    first.kill()  # SIGKILL: the successor's clock is two days ahead of the switch
    assert ahead.wait_state("serving", timeout=30)["mode"] == "leader"
    # Its maintenance round ran (it exports the pending upgrade it did not finalize).
    series = 'catalog_upgrade_upgrade_pending{from_version="0.10.0",version="0.11.0"} 1.0'
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if series in ahead.http("GET", "/metrics")[1].decode():
            break
        time.sleep(0.5)
    assert series in ahead.http("GET", "/metrics")[1].decode(), ahead.log_tail()
    status = json.loads(
        cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout
    )
    assert status["finalization"]["state"] == "pending", status["finalization"]
    # Its clock did run ahead (its own log's times), so the old rule would have finalized.
    stamps = re.findall(r'"timestamp": "([^"]+)Z"', ahead.log_file.read_text())
    assert stamps, ahead.log_tail()
    seen = datetime.datetime.fromisoformat(stamps[-1]).replace(tzinfo=datetime.UTC)
    assert seen.timestamp() > time.time() + 86_400, stamps[-1]
    # The rollback the operator still has: 0.10.0 at a new generation is not refused.
    back = launch(V1, 3, "blue-3", extra=["--rollback-from", str(release_file(V2))])
    assert back.wait_state("ready", timeout=60)["state"] == "ready"
