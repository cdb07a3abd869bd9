"""The cut-over as clients feel it, with real sidecars on a real ZooKeeper: two upgrades and two
rollbacks in a row (0.10.0 <-> 0.11.0), each promoted with `promote --wait` while three writers
and a reader go through typed clients given both sidecars' URLs. No error reaches them, every
acknowledged append is read back once through the new leader, the old leader exits fenced,
and the new leader logs the promotion's timeline and exports its write gap."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK
from catalog_client import SidecarClient
from orchestrator.testing.examples import ROLES, release_file, roles
from orchestrator.testing.followers import FollowingClients
from support.sidecars import Launch, SidecarProcess, cli
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1, V2 = "0.10.0", "0.11.0"
TABLES = "mz_catalog.mz_tables"  # evolved by 0.11.0: both releases append the same rows
MARKS = ("took over", "appends taken", "first append", "serving")


def row(n: int) -> dict[str, object]:
    return {"id": f"w{n}", "oid": n, "schema_id": "u3", "name": f"w{n}", "owner_id": "u1"}


def cutover_line(process: SidecarProcess, wait: float = 15.0) -> dict[str, object]:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for line in process.log_file.read_text().splitlines():
            if '"cutover"' in line:
                event: dict[str, object] = json.loads(line)
                return event
        time.sleep(0.2)
    raise AssertionError(f"no cutover line in {process.process_id}'s log\n{process.log_tail()}")


def test_promotions_and_rollbacks_in_a_row_cost_clients_no_error(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """Two upgrades and two rollbacks in a row, three writers and a reader following the
    leader: no error reaches them, every acknowledged append is read back once, the old
    leader hands its reads over until its successor serves, and the successor's ``cutover``
    line and gauge tell the write gap."""
    never = ["--finalize-after", "never"]
    leader = launch(V1, 1, "g1", auto_promote=True, extra=never)
    leader.wait_state("serving")
    leader.sidecar.client().append(ROLES, roles(0, 1000))
    first = 0
    for generation in (2, 3, 4, 5):
        upgrade = generation % 2 == 0
        extra = never if upgrade else [*never, "--rollback-from", str(release_file(V2))]
        green = launch(V2 if upgrade else V1, generation, f"g{generation}", extra=extra)
        green.wait_state("ready", timeout=60)
        urls = [f"http://{p.sidecar.http}" for p in (leader, green)]
        clients = FollowingClients(urls, TABLES, ROLES, row, writers=3, first=first).start()
        time.sleep(0.5)
        done = cli("promote", "--deploy-generation", str(generation), "--wait", "60",
                   "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
        assert done.returncode == EXIT_OK, done.stderr
        time.sleep(0.5)
        clients.stop()
        assert clients.errors == [], clients.errors
        assert leader.wait_exit() == EXIT_FENCED
        lines = [json.loads(line) for line in leader.log_file.read_text().splitlines()
                 if '"handed_over"' in line or '"not_handing_over"' in line]  # fmt: skip
        # The fenced leader hands its reads over until its successor serves; or, when the
        # successor switched the catalog before the leader got there, it has nothing to hand
        # over and says why (the client reads at the successor).
        assert len(lines) == 1, lines
        if lines[0]["event"] == "handed_over":
            assert (lines[0]["successor"], lines[0]["outcome"]) == (generation, "serving")
        else:
            assert "the catalog is at version" in lines[0]["reason"], lines[0]
        assert clients.acked and clients.reads
        read = SidecarClient(urls[1]).read_rows(TABLES)
        ids = Counter(r["id"] for r in read)
        assert all(ids[f"w{n}"] == 1 for n in clients.acked), "an acknowledged append once"
        event = cutover_line(green)
        timeline = event["timeline"]
        assert isinstance(timeline, dict) and set(MARKS) <= set(timeline), timeline
        assert "old leader's last commit" in timeline, timeline
        assert timeline["took over"] <= timeline["appends taken"] <= timeline["first append"]
        gap = event["write_gap_seconds"]
        assert isinstance(gap, float) and gap >= 0  # its bound: benchmarks/bench_cutover.py
        metrics = green.http("GET", "/metrics")[1].decode().splitlines()
        gauge = next(m for m in metrics if m.startswith("catalog_upgrade_cutover_seconds "))
        assert abs(float(gauge.split()[1]) - gap) < 0.002, gauge
        first = clients.next_row
        leader = green


def hand_over_lines(process: SidecarProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in process.log_file.read_text().splitlines()
            if '"handed_over"' in line or '"not_handing_over"' in line]  # fmt: skip


def test_a_fenced_leader_hands_its_reads_over_to_a_successor_of_its_release(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """A redeploy of the same release at a new generation: the catalog stays at the old
    leader's release, so, fenced, it always hands its reads over until the successor serves.
    A reader following the leader is never refused as fenced: a read under way when the
    leadership ends is the first the old leader hands over (it used to be refused, and the
    client waited at the successor for its catalog switch)."""
    leader = launch(V1, 1, "g1", auto_promote=True)
    leader.wait_state("serving")
    leader.sidecar.client().append(ROLES, roles(0, 1000))
    green = launch(V1, 2, "g2")
    green.wait_state("ready", timeout=60)
    urls = [f"http://{p.sidecar.http}" for p in (leader, green)]
    clients = FollowingClients(urls, TABLES, ROLES, row, writers=1).start()
    time.sleep(0.5)
    done = cli("promote", "--deploy-generation", "2", "--wait", "60",
               "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert leader.wait_exit() == EXIT_FENCED
    time.sleep(0.3)
    clients.stop()
    assert clients.errors == [], clients.errors
    assert "409 fenced" not in clients.read_detours(), clients.read_detours()
    (line,) = hand_over_lines(leader)
    assert (line["event"], line["successor"], line["outcome"]) == ("handed_over", 2, "serving")


def test_a_fenced_leader_that_wakes_after_the_switch_has_nothing_to_hand_over(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """The old leader is stopped (SIGSTOP) through the promotion of another release, and woken
    once the successor switched the catalog: it has nothing to hand over and says why."""
    leader = launch(V1, 1, "g1", auto_promote=True)
    leader.wait_state("serving")
    green = launch(V2, 2, "g2")
    green.wait_state("ready", timeout=60)
    leader.sidecar.pause()
    try:
        done = cli("promote", "--deploy-generation", "2", "--wait", "60",
                   "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
        assert done.returncode == EXIT_OK, done.stderr
        assert green.wait_state("serving")["version"] == V2
    finally:
        leader.sidecar.resume()
    assert leader.wait_exit() == EXIT_FENCED
    (line,) = hand_over_lines(leader)
    assert line["event"] == "not_handing_over", line
    assert f"the catalog is at version {V2}" in str(line["reason"]), line
