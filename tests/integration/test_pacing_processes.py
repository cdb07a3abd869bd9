"""Pause, throttle and resume with real sidecars on a real ZooKeeper: a read-only process copying
a REWRITE (0.10.0 -> 0.11.0 rewrites mz_roles) shows its progress in `status`, is paused by the
CLI and then not ready, stays paused when SIGKILLed and restarted, and completes once resumed.
Bad input to the commands gets exit 2 naming what is wrong."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from catalog.errors import EXIT_BAD_INPUT, EXIT_OK
from catalog.pipeline.checkpoints import CHECKPOINT_MIN_ROWS
from orchestrator.testing.examples import ROLES, roles
from support.browser import HeadlessChromium
from support.sidecars import Launch, cli
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 400_000
RATE = "4000"  # rows per second: a copy of 100 s, paused long before it could end however
# loaded the machine (the resumed copy runs unthrottled)
# Set to a path to keep the page's screenshot during the paused copy.
SCREENSHOT = os.environ.get("CATALOG_UPGRADE_STEP_SCREENSHOT")


def status(zk_env: ZkEnv) -> dict[str, Any]:
    done = cli("status", "--json", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert done.returncode == EXIT_OK, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def pace(zk_env: ZkEnv, *args: str) -> Any:
    return cli(*args, "--zk", zk_env.hosts, "--env", zk_env.name, "--requested-by", "ops@test")


def test_a_paused_copy_holds_through_a_restart_and_completes_once_resumed(
    launch: Launch, zk_env: ZkEnv, chromium: str
) -> None:
    blue = launch("0.10.0", 1, "blue", auto_promote=True)
    blue.wait_state("serving")
    client = blue.sidecar.client(timeout=120)
    for start in range(0, ROWS, 100_000):
        client.append(ROLES, roles(start, 100_000))

    # Bad input first: nothing is written, exit 2 naming what is wrong.
    for bad, named in (("-5", "-5"), ("fast", "fast")):
        done = pace(zk_env, "throttle", "--deploy-generation", "2", "--rows-per-second", bad)
        assert done.returncode == EXIT_BAD_INPUT and named in done.stderr, done.stderr
    done = pace(zk_env, "pause", "--deploy-generation", "9")
    assert done.returncode == EXIT_BAD_INPUT and "no process of generation 9" in done.stderr
    # A serving leader's scheduled compaction is a long step: its generation may be paused.
    assert pace(zk_env, "pause", "--deploy-generation", "1").returncode == EXIT_OK
    assert pace(zk_env, "resume", "--deploy-generation", "1").returncode == EXIT_OK

    green = launch("0.11.0", 2, "green", extra=["--copy-rate", RATE])
    node = green.wait_node(lambda n: bool(n.get("progress")) and n["progress"]["rows_done"] > 0)
    progress = node["progress"]
    assert progress["step"] == "rewrite" and progress["collection"] == ROLES
    assert progress["rows_total"] == ROWS and progress["limit"] == float(RATE)
    shown = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert f"green: rewrite of {ROLES}" in shown.stdout and "rows/s" in shown.stdout, shown.stdout

    # Faster until the copy commits its first slice (a checkpoint), then paused at the rate.
    fast = pace(zk_env, "throttle", "--deploy-generation", "2", "--rows-per-second", "100000")
    assert fast.returncode == EXIT_OK, fast.stderr
    deadline = time.monotonic() + 60
    while '"rewrite_append"' not in green.log_file.read_text():
        assert time.monotonic() < deadline, green.log_tail()
        time.sleep(0.2)
    slow = pace(zk_env, "throttle", "--deploy-generation", "2", "--rows-per-second", RATE)
    assert slow.returncode == EXIT_OK, slow.stderr
    assert pace(zk_env, "pause", "--deploy-generation", "2").returncode == EXIT_OK
    held = green.wait_node(lambda n: bool((n.get("progress") or {}).get("paused")))
    assert held["state"] == "checking"
    ready = green.http("GET", "/readyz?verbose")
    assert ready[0] == 503 and b"[-]pace failed: paused" in ready[1]
    document = status(zk_env)
    assert any(p["progress"] and p["progress"]["paused"] for p in document["processes"])
    with HeadlessChromium(chromium) as browser:  # the live page: a bar, rows, PAUSED
        browser.open(f"http://{green.sidecar.http}/")
        browser.wait_for_text(f"rewrite of {ROLES}", "rows), PAUSED", "limit 4.0k rows/s")
        if SCREENSHOT:
            browser.screenshot(Path(SCREENSHOT))

    # A SIGKILL while paused: the restarted process holds at its checkpoint.
    green.kill()
    deadline = time.monotonic() + 30  # its session expires, and its node with it
    while green.client.exists(green.node_path):
        assert time.monotonic() < deadline, "the killed process's node stayed"
        time.sleep(0.2)
    green = launch("0.11.0", 2, "green", extra=["--copy-rate", RATE])
    pid = green.sidecar.pid
    again = green.wait_node(
        lambda n: n.get("pid") == pid and bool((n.get("progress") or {}).get("paused")), timeout=60
    )
    # It waits showing its checkpoint: the slice it committed, of the whole copy.
    assert again["progress"]["rows_done"] >= CHECKPOINT_MIN_ROWS, again["progress"]
    assert again["progress"]["rows_total"] == ROWS, again["progress"]
    shown = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert f"{again['progress']['rows_done']:,} of {ROWS:,} rows" in shown.stdout, shown.stdout
    time.sleep(2)
    assert green.http("GET", "/readyz")[0] == 503

    assert (
        pace(zk_env, "throttle", "--deploy-generation", "2", "--rows-per-second", "off").returncode
        == EXIT_OK
    )
    resumed = pace(zk_env, "resume", "--deploy-generation", "2", "--json")
    assert resumed.returncode == EXIT_OK, resumed.stderr
    assert json.loads(resumed.stdout) == {
        "deploy_generation": 2, "paused": False, "rows_per_second": None,
        "requested_by": "ops@test",
    }  # fmt: skip
    green.wait_state("ready", timeout=120)
    assert green.wait_node(lambda n: n.get("progress") is None)["state"] == "ready"
    # A ready read-only process has no long step left: nothing to pause.
    done = pace(zk_env, "pause", "--deploy-generation", "2")
    assert done.returncode == EXIT_BAD_INPUT and "no long step to pause" in done.stderr
    events = [e["kind"] for e in status(zk_env)["events"]]
    assert {"paused", "resumed", "throttled"} <= set(events), events
