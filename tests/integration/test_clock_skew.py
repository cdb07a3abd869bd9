"""A host whose clock runs ahead decides nothing early, and never takes over.

Under libfaketime, whose offset a file sets and the process re-reads every second:

- a leader whose clock jumps two days ahead while it serves a pending upgrade with a 24-hour
  window leaves it pending, because the window is measured on ZooKeeper's clock
  (``orchestrator.migrate.finalization``), and ``status`` names its clock;
- a process whose clock runs two days ahead refuses to take over (``orchestrator.clock``): once
  the leader dies it stays read-only, and it leads as soon as its clock agrees again.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK
from orchestrator.clock import MAX_CLOCK_OFFSET_SECONDS
from support.browser import HeadlessChromium
from support.sidecars import Launch, SidecarProcess, cli, release_file
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V1, V2 = "0.10.0", "0.11.0"
WINDOW = ["--finalize-after", "24h"]
AHEAD = "+2d"


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.skip("a clock that runs ahead needs libfaketime (Debian package faketime)")
    return found[0]


def clock_of(path: Path, offset: str) -> dict[str, str]:
    """An environment whose clock runs ``offset`` from the true one, as ``path`` says (the
    process re-reads it every second: writing the file moves its clock)."""
    path.write_text(offset + "\n")
    return {"LD_PRELOAD": libfaketime(), "FAKETIME_TIMESTAMP_FILE": str(path),
            "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip


def status_of(zk_env: ZkEnv) -> dict:
    done = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json")
    return json.loads(done.stdout)


def wait_for(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, f"not within {timeout:g} s: {what}"
            return found
        time.sleep(0.5)


def clock_warnings(zk_env: ZkEnv, process: str) -> list[str]:
    return [w for w in status_of(zk_env)["warnings"] if w.startswith(f"{process}'s clock runs")]


def runs_ahead(sidecar: SidecarProcess) -> bool:
    """The process's own log's newest time is a day or more ahead of ours."""
    stamps = re.findall(r'"timestamp": "([^"]+)Z"', sidecar.log_file.read_text())
    if not stamps:
        return False
    seen = datetime.datetime.fromisoformat(stamps[-1]).replace(tzinfo=datetime.UTC)
    return seen.timestamp() > time.time() + 86_400


@pytest.mark.slow
def test_a_clock_ahead_neither_finalizes_early_nor_takes_over(
    launch: Launch, zk_env: ZkEnv, tmp_path: Path, chromium: str
) -> None:
    blue = launch(V1, 1, "blue-1", auto_promote=True)
    blue.wait_state("serving")
    leader = launch(V2, 2, "green-a", extra=WINDOW, exec_environment=clock_of(tmp_path / "a", "+0"))
    leader.wait_state("ready")
    promoted = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                   "--deploy-generation", "2", "--wait", "30")  # fmt: skip
    assert promoted.returncode == EXIT_OK, promoted.stderr
    assert blue.wait_exit() == EXIT_FENCED
    assert leader.wait_state("serving")["mode"] == "leader"

    # The serving leader's clock jumps two days ahead: it goes on serving, says so, and its
    # maintenance rounds leave the 24-hour window pending.
    (tmp_path / "a").write_text(AHEAD + "\n")
    wait_for("green-a's clock runs ahead", lambda: runs_ahead(leader), timeout=30)
    warned = wait_for("status names green-a's clock", lambda: clock_warnings(zk_env, "green-a"))
    assert f"(the bound is {MAX_CLOCK_OFFSET_SECONDS:g} s)" in warned[0], warned
    with HeadlessChromium(chromium) as browser:  # the page shows the same warning
        browser.open(f"http://{leader.sidecar.http}/")
        browser.wait_for_text("warning: green-a's clock runs", "ahead of ZooKeeper's")
    series = 'catalog_upgrade_upgrade_pending{from_version="0.10.0",version="0.11.0"} 1.0'
    wait_for(
        "a maintenance round that exports the pending upgrade",
        lambda: series in leader.http("GET", "/metrics")[1].decode(),
    )
    assert status_of(zk_env)["finalization"]["state"] == "pending"

    # A successor two days ahead does not take over when the leader dies ...
    late = tmp_path / "late"
    successor = launch(V2, 2, "green-late", extra=WINDOW, exec_environment=clock_of(late, AHEAD))
    successor.wait_state("ready")
    wait_for("status names green-late's clock", lambda: clock_warnings(zk_env, "green-late"))
    leader.kill()
    wait_for(
        "green-a's process node gone",
        lambda: all(p["id"] != "green-a" for p in status_of(zk_env)["processes"]),
    )
    time.sleep(2 * 3.0)  # two heartbeats of the successor, each a chance to take over
    node = successor.wait_state("ready")
    assert node["mode"] == "read-only", node
    assert "clock_refuses_to_lead" in successor.log_file.read_text(), successor.log_tail()
    assert status_of(zk_env)["finalization"]["state"] == "pending"

    # ... and leads once its clock agrees, with the upgrade still pending.
    late.write_text("+0\n")
    assert successor.wait_state("serving", timeout=30)["mode"] == "leader"
    assert "clock_agrees" in successor.log_file.read_text()
    wait_for("the clock warning cleared", lambda: not clock_warnings(zk_env, "green-late"))
    assert status_of(zk_env)["finalization"]["state"] == "pending"
    # A fleet survey from a host two days ahead judges ages on ZooKeeper's clock: nothing is
    # overdue, and the survey says how far its clock is off.
    fleet = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", "fleet", "--zk",
         zk_env.hosts, "--env", zk_env.name, "--json"],
        env={**os.environ, **clock_of(tmp_path / "fleet", AHEAD)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    survey = json.loads(fleet.stdout)
    (row,) = survey["environments"]
    assert row["finalization"]["state"] == "pending" and not row["overdue"], row
    assert row["pending_seconds"] < 3600, row
    (ensemble,) = survey["ensembles"]
    assert ensemble["clock_offset"] > 86_400, ensemble
    # The rollback the operator still has: 0.10.0 at a new generation is not refused.
    back = launch(V1, 3, "blue-3", extra=["--rollback-from", str(release_file(V2))])
    assert back.wait_state("ready", timeout=60)["state"] == "ready"
