"""Idempotency keys by time against a real sidecar and ZooKeeper: a retry long after, a retry
after an upgrade rewrote its collection, concurrent requests with one key, and a million keys in
the retention window."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import attrs
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.errors import EXIT_OK
from catalog.release import load_release
from catalog.shard import Shard, WriteMark
from orchestrator.dataplane.idempotency import WriteIdentity
from orchestrator.testing.harness import metric_samples
from support.sidecars import Launch, SidecarProcess, cli, json_lines, release_file
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1, V2 = "0.10.0", "0.11.0"
TABLES = "mz_catalog.mz_tables"
ROLES = "mz_catalog.mz_roles"
APPEND = f"/append?collection={TABLES}"


def table_row(n: int) -> bytes:
    row = {"id": f"u{n}", "oid": 20000 + n, "schema_id": "u3", "name": f"t{n}", "owner_id": "u1"}
    return json.dumps(row).encode() + b"\n"


def post(leader: SidecarProcess, body: bytes, key: str | None = None, path: str = APPEND) -> dict:
    headers = {"Idempotency-Key": key} if key is not None else {}
    answer = leader.sidecar.request("POST", path, body, headers=headers)
    assert answer.status == 200, answer.summary()
    return {**json.loads(answer.body), "header": answer.headers.get("Idempotent-Replayed")}


def names(leader: SidecarProcess, collection: str = TABLES) -> list[str]:
    status, body = leader.http("GET", f"/read?collection={collection}")
    assert status == 200
    return sorted(str(r["name"]) for r in json_lines(body))


def test_a_retry_after_hundreds_of_other_appends_gets_its_first_answer(launch: Launch) -> None:
    """The ledger keeps the last 64 appends; a keyed append 300 appends ago (keyed and not) is
    in the key log: its retry answers the first answer, writes nothing, and the key with another
    body is still refused."""
    leader = launch(V1, 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    first = post(leader, table_row(1), key="order-1")
    assert first["replayed"] is False and first["header"] is None
    for n in range(2, 302):
        post(leader, table_row(n), key=f"order-{n}" if n % 2 else None)
    retried = post(leader, table_row(1), key="order-1")
    assert retried == {**first, "replayed": True, "header": "true"}
    other = leader.sidecar.request(
        "POST", APPEND, table_row(999), headers={"Idempotency-Key": "order-1"}
    )
    assert other.status == 422 and json.loads(other.body)["error"] == "idempotency-key-reused"
    assert names(leader).count("t1") == 1 and len(names(leader)) == 301


def test_concurrent_requests_with_one_key_write_once_and_the_rest_say_replayed(
    launch: Launch,
) -> None:
    leader = launch(V1, 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    answers: list[dict] = []
    gate = threading.Barrier(12)

    def client() -> None:
        gate.wait()
        answers.append(post(leader, table_row(5), key="same-key"))

    threads = [threading.Thread(target=client) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wrote = [a for a in answers if not a["replayed"]]
    assert len(answers) == 12 and len(wrote) == 1
    assert all(
        a["header"] == "true" and a["ts"] == wrote[0]["ts"] for a in answers if a["replayed"]
    )
    assert names(leader) == ["t5"]


def test_a_retry_after_an_upgrade_rewrote_its_collection_gets_its_first_answer(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """0.11.0 rewrites mz_roles (integer ids become strings): the retry of a 0.10.0 append,
    whose body 0.11.0 would refuse, is looked up before its body is read and answered."""
    blue = launch(V1, 1, "blue", auto_promote=True)
    blue.wait_state("serving")
    role = b'{"id": 7, "oid": 30007, "name": "analyst", "inherit": true}\n'
    roles = f"/append?collection={ROLES}"
    first = post(blue, role, key="role-7", path=roles)
    green = launch(V2, 2, "green")
    green.wait_state("ready")
    promoted = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                   "--deploy-generation", "2", "--wait", "30")  # fmt: skip
    assert promoted.returncode == EXIT_OK, promoted.stderr
    green.wait_state("serving")
    retried = post(green, role, key="role-7", path=roles)
    assert retried["replayed"] is True and retried["rows"] == first["rows"] == 1
    assert (retried["ts"], retried["upper"]) == (first["ts"], first["upper"])
    fresh = green.sidecar.request("POST", roles, role, headers={"Idempotency-Key": "role-8"})
    assert fresh.status == 400  # a new append of that body is still refused, as it should be
    assert names(green, ROLES) == ["analyst"]


def test_a_million_keys_in_the_window_stay_off_the_state(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """A million keyed appends in the retention window (written into the key log as the fold
    writes it, a segment per tier): the state stays a few kilobytes, any of the keys replays, a
    new key appends, and the next appends fold into the log without rewriting it."""
    leader = launch(V1, 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    post(leader, table_row(1), key="warm")
    consensus = Consensus(zk_client, zk_env.root)
    ref = read_catalog(consensus)[0].collections  # type: ignore[index]
    shard_id = next(r.shard_id for gid, r in ref.items() if gid == _global_id(TABLES))
    shard = Shard(consensus, BlobStore.from_uri(str(tmp_path / "blob")), shard_id)
    started = time.monotonic()
    now = time.time()
    marks = [
        WriteMark(WriteIdentity.of(f"million-{n}", table_row(n)).write_id, n, n + 1, 1)
        for n in range(1_000_000)
    ]
    tiers = [shard.keys.write_marks(marks[:900_000], now - 3600, tier=6)]
    tiers += [shard.keys.write_marks(marks[900_000:], now - 60, tier=5)]
    state = shard.state()
    writes = state.writes
    segments = (*writes.segments, *tiers)
    shard.cas(state, attrs.evolve(state, writes=attrs.evolve(writes, segments=segments)), None, ())
    filling = time.monotonic() - started
    size = len(zk_client.get(f"{zk_env.root}/{shard.key}")[0])
    assert size < 16 * 1024, f"state of {size} bytes"
    for n in (0, 499_999, 999_999):
        answer = post(leader, table_row(n), key=f"million-{n}")
        assert answer["replayed"] is True and answer["ts"] == n, answer
    assert post(leader, table_row(1_000_001), key="new-key")["replayed"] is False
    for n in range(200):  # past the ledger: folds into fresh segments beside the big ones
        post(leader, table_row(2_000_000 + n), key=f"after-{n}")
    after = shard.state().writes.segments
    assert {s.name for s in tiers} <= {s.name for s in after} and len(after) <= 12
    assert len(zk_client.get(f"{zk_env.root}/{shard.key}")[0]) < 16 * 1024
    assert post(leader, table_row(2_000_000), key="after-0")["replayed"] is True
    print(f"filled a million keys in {filling:.1f} s; state {size} bytes")


def _global_id(name: str) -> str:
    builtin = load_release(str(release_file(V1))).builtin(name)
    assert builtin is not None
    return builtin.global_id


def test_sixteen_clients_retrying_concurrently_write_each_append_once(launch: Launch) -> None:
    """16 clients, each sending 40 keyed appends and every second one again at once from a
    twin thread (a retry racing its original): group commits carry them together, every append
    is written once, the twin of each gets the same answer, and commits carried several
    appends."""
    leader = launch(V1, 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    answers: dict[tuple[int, int], list[dict]] = {}
    lock = threading.Lock()

    def send(c: int, n: int) -> None:
        answer = post(leader, table_row(100_000 + c * 1000 + n), key=f"c{c}-{n}")
        with lock:
            answers.setdefault((c, n), []).append(answer)

    def client(c: int) -> None:
        for n in range(40):
            if n % 2:
                twin = threading.Thread(target=send, args=(c, n))
                twin.start()
                send(c, n)
                twin.join()
            else:
                send(c, n)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 16 * 40
    for (_c, n), got in answers.items():
        assert len(got) == (2 if n % 2 else 1)
        assert sum(not a["replayed"] for a in got) == 1, got
        assert len({(a["ts"], a["rows"]) for a in got}) == 1, got
    assert len(names(leader)) == 16 * 40
    values = metric_samples(leader.sidecar.request("GET", "/metrics").text())
    count = values["catalog_upgrade_append_group_size_count"]
    sum_ = values["catalog_upgrade_append_group_size_sum"]
    assert sum_ == 16 * 40 and count < sum_, (sum_, count)  # commits carried several appends
    steps = {
        step: values[f'catalog_upgrade_append_seconds_count{{step="{step}"}}']
        for step in ("parse", "queue", "write", "commit")
    }
    # Every append parsed is queued once; every commit sent is timed once (each attempt's
    # write too), and none failed here: one per group landed.
    assert steps["parse"] == steps["queue"] >= 16 * 40, steps
    assert steps["write"] >= steps["commit"] == count, (steps, count)
    assert all(values[f'catalog_upgrade_append_seconds_sum{{step="{s}"}}'] > 0 for s in steps)
