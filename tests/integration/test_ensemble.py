"""Real sidecars against a real 3-server ZooKeeper ensemble (orchestrator.testing.ensemble).

A dead follower, a dead ensemble leader at the moment of promotion, and a lost quorum: no
process is fenced by mistake, no acknowledged row is lost, and after a quorum loss the same
leader serves again within a couple of seconds (its reconnect attempts stay well inside the
session timeout, so the session ZooKeeper kept is still there).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.errors import EXIT_FENCED
from orchestrator.testing.ensemble import ZooKeeperEnsemble
from orchestrator.zookeeper.clients import close, connect
from support.sidecars import SidecarProcess, cli, json_lines, sidecars

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.quiet]

V1, V2 = "0.10.0", "0.11.0"
TABLES = "mz_catalog.mz_tables"
SESSION = 4.0


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("ensemble"), 3) as running:
        yield running


@pytest.fixture
def client(ensemble: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    started = connect(ensemble.hosts)
    yield started
    close(started)


def row(i: int) -> bytes:
    fields = {"id": f"u{i}", "oid": 20000 + i, "schema_id": "u3", "name": f"t{i}"}
    return (json.dumps({**fields, "owner_id": "u1"}) + "\n").encode()


def start(
    client: KazooClient, ensemble: ZooKeeperEnsemble, env: str, tmp_path: Path, version: str,
    generation: int, name: str, started: list[SidecarProcess], **options: object,
) -> SidecarProcess:  # fmt: skip
    process = SidecarProcess.start(
        client, ensemble.hosts, env, version, generation,
        process_id=name, log_dir=tmp_path, blob=tmp_path / "blob", session_timeout=SESSION,
        **options,  # type: ignore[arg-type]
    )  # fmt: skip
    started.append(process)
    return process


def names(process: SidecarProcess) -> list[str]:
    status, body = process.http("GET", f"/read?collection={TABLES}")
    assert status == 200, body
    return sorted(r["name"] for r in json_lines(body))


def test_quorum_loss_pauses_writes_and_the_same_leader_serves_again(
    ensemble: ZooKeeperEnsemble, client: KazooClient, tmp_path: Path
) -> None:
    """Two of three servers die for longer than half the session timeout, five times in a
    row: appends are refused meanwhile (503, nothing acknowledged), and each time the same
    leader serves again within a few seconds of the quorum's return, with every row."""
    env = f"quorum-{uuid.uuid4().hex[:8]}"
    with sidecars() as started:
        leader = start(client, ensemble, env, tmp_path, V1, 1, "q1", started, auto_promote=True)
        leader.wait_state("serving")
        acknowledged = []
        for round_ in range(5):
            assert leader.http("POST", f"/append?collection={TABLES}", row(round_))[0] == 200
            acknowledged.append(f"t{round_}")
            survivor = ensemble.leader() or 1
            down = [n for n in (1, 2, 3) if n != survivor]
            for number in down:
                ensemble.kill_member(number)
            time.sleep(SESSION * 0.6)
            status, body = leader.http("POST", f"/append?collection={TABLES}", row(100 + round_))
            # Refused for a retry, as documented: paused writes, or ZooKeeper unreachable (an
            # attempt sent may have landed: the retry with its key resolves it).
            assert status == 503, f"a write acknowledged (or failed) without quorum: {body!r}"
            assert json.loads(body)["error"] in ("writes-paused", "zookeeper-unreachable"), body
            status, body = leader.http("GET", "/readyz?verbose")
            assert status == 503 and b"no quorum: 1 of 3 server(s) running" in body, body
            if round_ == 0:
                done = cli("status", "--zk", ensemble.hosts, "--env", env,
                           env={"CATALOG_UPGRADE_CONNECT_TIMEOUT": "2"})  # fmt: skip
                assert done.returncode == 1, done.stderr
                assert "no quorum: 1 of 3 server(s) running, none serving" in done.stderr
            for number in down:
                ensemble.start_member(number, wait=False)
            for number in down:
                ensemble.member(number).wait_serving(60)
            returned = time.monotonic()  # the quorum serves again
            leader.wait_state("serving", timeout=SESSION + 10)
            deadline = time.monotonic() + SESSION + 5
            while leader.http("GET", "/readyz")[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            took = time.monotonic() - returned
            assert leader.process.poll() is None, f"round {round_}: exited\n{leader.log_tail()}"
            assert leader.http("GET", "/readyz")[0] == 200, f"round {round_}: {took:.1f} s"
            assert took < SESSION, f"round {round_}: serving again only after {took:.1f} s"
            print(f"round {round_}: serving again {took:.2f} s after the quorum returned")
            assert set(acknowledged) <= set(names(leader)), f"round {round_}: rows lost"


def test_follower_dies_during_migration_and_leader_dies_at_promotion(
    ensemble: ZooKeeperEnsemble, client: KazooClient, tmp_path: Path
) -> None:
    """A blue-green upgrade while one ZooKeeper follower is down, promoted just as the
    ensemble's leader is killed: the upgrade completes, the old leader exits fenced (and only
    it), and every acknowledged row is read through the new release."""
    env = f"ensemble-{uuid.uuid4().hex[:8]}"
    with sidecars() as started:
        old = start(client, ensemble, env, tmp_path, V1, 1, "old", started, auto_promote=True)
        old.wait_state("serving")
        assert old.http("POST", f"/append?collection={TABLES}", row(1))[0] == 200
        new = start(client, ensemble, env, tmp_path, V2, 2, "new", started)
        new.wait_state("ready")
        followers = [n for n in (1, 2, 3) if ensemble.mode(n) == "follower"]
        # A rolling restart of the followers: whichever server the leader's session uses dies
        # at some point, and its appends wait for the client to move instead of failing.
        for number in followers:
            ensemble.kill_member(number)
            status, body = old.http("POST", f"/append?collection={TABLES}", row(2 + number))
            assert status == 200, body
            ensemble.start_member(number)
        follower = followers[0]
        ensemble.kill_member(follower)
        assert old.http("POST", f"/append?collection={TABLES}", row(2))[0] == 200
        zk_leader = ensemble.leader()
        assert zk_leader is not None
        status, body = new.http("POST", "/promote")
        assert status == 200, body
        ensemble.kill_member(zk_leader)  # quorum lost until a server comes back
        ensemble.start_member(follower)
        new.wait_state("serving", timeout=30)
        assert old.wait_exit(timeout=30) == EXIT_FENCED
        ensemble.start_member(zk_leader)
        assert {"t1", "t2", *(f"t{2 + n}" for n in followers)} <= set(names(new))
        assert new.process.poll() is None
