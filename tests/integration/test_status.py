"""orchestrator.status against a real ZooKeeper: read_status, the command, --watch, events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence, encode_json
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    EVENTS_KEY,
    FINALIZE_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    SHARDS_KEY,
    CatalogState,
    CollectionRef,
)
from catalog.errors import EXIT_OK, CorruptStateError
from catalog.migration import MigrationEntry as Entry
from catalog.migration import MigrationShard
from orchestrator.cli import main
from orchestrator.events import KEEP_EVENTS, drop_events_of, own_key, read_events, record_event
from orchestrator.status import UpgradeStatus, read_status, watch_status
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

NOW = time.time()


@pytest.fixture
def store(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    return Consensus(zk_client, zk_env.root)


def run_cli(zk_env: ZkEnv, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--log-level", "WARNING", *args, "--zk", zk_env.hosts, "--env", zk_env.name]
    )


def put(store: Consensus, key: str, value: object) -> None:
    found = store.get(key)
    store.cas(key, encode_json(value), -1 if found is None else found.version)


def build_environment(store: Consensus, collections: int = 3) -> CatalogState:
    """A hand-built environment mid-upgrade: generation 3 leads and migrates, 2 was fenced."""
    store.ensure(PROCESSES_KEY, SHARDS_KEY, FINALIZE_KEY)
    state = CatalogState(
        version="0.11.0",
        deploy_generation=3,
        blob_uri="file:///tmp/blobs",
        updated_at=NOW,
        collections={
            f"s{i}": CollectionRef(
                global_id=f"s{i}",
                name=f"mz_catalog.t{i:04d}",
                shard_id=f"sh-{i}",
                fingerprint="f",
            )
            for i in range(collections)
        },
    )
    store.cas(CATALOG_KEY, state.encode(), -1)
    for i in range(collections):
        put(store, f"{SHARDS_KEY}/sh-{i}", {"shard_id": f"sh-{i}", "schemas": ["x"] * (1 + i % 3)})
    put(
        store,
        EPOCH_KEY,
        {
            "epoch": 4,
            "leader": "lead",
            "deploy_generation": 3,
            "session": "0x1f",
            "host": "h1",
            "pid": 42,
        },
    )
    put(store, PROMOTION_KEY, {"deploy_generation": 3})
    plan = {"migrations": [{"global_id": "s1", "name": "mz_catalog.t0001", "mechanism": "rewrite"}]}
    put(
        store,
        f"{PROCESSES_KEY}/lead",
        {
            "id": "lead",
            "version": "0.12.0",
            "deploy_generation": 3,
            "mode": "leader",
            "state": "migrating",
            "phase": "switching collections",
            "phase_since": NOW - 2,
            "plan": plan,
            "error": None,
            "host": "h1",
            "pid": 42,
            "session": "0x1f",
            "epoch": 4,
        },
    )
    put(
        store,
        f"{PROCESSES_KEY}/old",
        {
            "id": "old",
            "version": "0.11.0",
            "deploy_generation": 2,
            "mode": "read-only",
            "state": "fenced",
            "error": {"error": "FencedError", "message": "fenced", "exit_code": 3},
        },
    )
    put(store, f"{FINALIZE_KEY}/sh-retired", {"queued_at": NOW})
    record_event(store, "promoted", deploy_generation=3)
    return state


def test_empty_environment_status(store: Consensus, zk_env: ZkEnv) -> None:
    """An environment nobody created: JSON with nulls, a clear line, exit 0, nothing written."""
    result = run_cli(zk_env, "status", "--json")
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    assert document["environment"] == zk_env.name and document["bootstrapped"] is False
    assert document["catalog"]["version"] is None and document["catalog"]["epoch"] is None
    assert document["leader"] is None
    assert document["processes"] == document["collections"] == []
    assert document["migration_entries"] == document["pending_finalization"] == []
    table = run_cli(zk_env, "status")
    assert table.exit_code == EXIT_OK
    assert f"environment {zk_env.name} is empty (not bootstrapped)" in table.stdout
    assert not store.exists("")


def test_hand_built_environment_json(store: Consensus, zk_env: ZkEnv) -> None:
    """status --json reports catalog, leader, processes, collections with schema ids, and more."""
    build_environment(store)
    result = run_cli(zk_env, "status", "--json")
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    catalog = document["catalog"]
    assert (catalog["version"], catalog["deploy_generation"], catalog["epoch"]) == ("0.11.0", 3, 4)
    assert document["catalog"]["promotion_target"] == 3
    leader = document["leader"]
    assert (leader["id"], leader["session"], leader["host"], leader["pid"], leader["epoch"]) == (
        "lead",
        "0x1f",
        "h1",
        42,
        4,
    )
    assert leader["state"] == "migrating" and leader["registered"] is True
    processes = {p["id"]: p for p in document["processes"]}
    assert processes["lead"]["phase"] == "switching collections"
    assert processes["old"]["state"] == "fenced" and processes["old"]["error"]["exit_code"] == 3
    assert processes["old"]["mode"] == "read-only" and processes["old"]["plan"] is None
    assert [
        (c["global_id"], c["shard_id"], c["schema_id"], c["mechanism"])
        for c in document["collections"]
    ] == [
        ("s0", "sh-0", 0, "unchanged"),
        ("s1", "sh-1", 1, "rewrite"),
        ("s2", "sh-2", 2, "unchanged"),
    ]
    assert document["pending_finalization"] == ["sh-retired"]
    assert document["migration_entries"] == []
    assert [e["kind"] for e in document["events"]] == ["promoted"]


def test_table_lists_first_rows_and_all(store: Consensus, zk_env: ZkEnv) -> None:
    """The table shows the first 20 collections; --all shows every one."""
    build_environment(store, collections=30)
    short = run_cli(zk_env, "status")
    assert short.exit_code == EXIT_OK, short.output
    assert "mz_catalog.t0019" in short.stdout and "mz_catalog.t0029" not in short.stdout
    assert "switching collections" in short.stdout
    full = run_cli(zk_env, "status", "--all")
    assert "mz_catalog.t0029" in full.stdout


def test_read_status_is_pipelined(store: Consensus) -> None:
    """Reading 500 collections costs a handful of batched calls, not one per collection."""
    build_environment(store, collections=500)
    calls: Counter[str] = Counter()
    observed = Consensus(store.client, store.root, observer=lambda kind, _t: calls.update([kind]))
    status = read_status(observed)
    assert len(status.collections) == 500
    assert status.collections[-1].schema_id is not None
    assert calls["get"] == 0 and calls["get_many"] <= 3


def test_leader_gone_is_shown_unregistered(store: Consensus) -> None:
    """A leader whose process node vanished is still named, marked unregistered."""
    build_environment(store)
    store.delete_tree(f"{PROCESSES_KEY}/lead")
    status = read_status(store)
    assert status.leader is not None and status.leader.id == "lead"
    assert status.leader.to_json()["registered"] is False


@pytest.mark.quiet
def test_watch_status_follows_changes(store: Consensus) -> None:
    """--watch is driven by watches: a process state change shows up well before the refresh."""
    build_environment(store)
    first = threading.Event()
    serving = threading.Event()
    stop = threading.Event()

    def on_status(status: UpgradeStatus) -> None:
        first.set()
        if any(p.state == "serving" for p in status.processes):
            serving.set()

    thread = threading.Thread(
        target=watch_status, args=(store, on_status, stop), kwargs={"refresh": 30.0}
    )
    thread.start()
    try:
        assert first.wait(10)
        found = store.get_json(f"{PROCESSES_KEY}/lead")
        assert found is not None
        changed = {**found[0], "state": "serving"}
        started = time.monotonic()
        store.cas(f"{PROCESSES_KEY}/lead", encode_json(changed), found[1])
        assert serving.wait(5)
        assert time.monotonic() - started < 2
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_events_are_trimmed_to_the_newest(store: Consensus) -> None:
    """The event log keeps the newest entries once it grows past its bound."""
    for i in range(KEEP_EVENTS + 25):
        record_event(store, "ready", n=i)
    names = store.children(EVENTS_KEY)
    assert KEEP_EVENTS <= len(names) <= KEEP_EVENTS + 25
    newest = read_events(store, limit=3)
    assert [e.fields["n"] for e in newest] == [KEEP_EVENTS + 22, KEEP_EVENTS + 23, KEEP_EVENTS + 24]
    assert all(e.at > 0 for e in newest)


def test_read_only_events_go_to_their_own_log(store: Consensus) -> None:
    """A read-only process writes events only below its own (version, generation) key and
    trims only there; reading merges every log by time; the leader drops retracted logs."""
    record_event(store, "promoted", deploy_generation=2)
    for i in range(KEEP_EVENTS + 25):
        record_event(store, "ready", owner=("0.11.0", 2), n=i)
    record_event(store, "fenced", owner=("0.10.0", 1))
    assert [n for n in store.children(EVENTS_KEY) if n.startswith("e-")] == ["e-0000000000"]
    assert KEEP_EVENTS <= len(store.children(own_key("0.11.0", 2))) <= KEEP_EVENTS + 25
    kinds = [e.kind for e in read_events(store, limit=3)]
    assert kinds == ["ready", "ready", "fenced"]
    assert read_events(store, limit=KEEP_EVENTS + 50)[0].kind == "promoted"
    epoch = store.cas(EPOCH_KEY, encode_json({"epoch": 1}), -1)
    drop_events_of(store, [("0.10.0", 1)], fence=Fence(EPOCH_KEY, epoch))
    assert not store.exists(own_key("0.10.0", 1)) and store.exists(own_key("0.11.0", 2))


def test_corrupt_nodes_are_errors_never_an_empty_environment(
    store: Consensus, zk_env: ZkEnv
) -> None:
    """A catalog overwritten by hand (``{not json``) and an epoch that is not an object are
    shown as errors naming their keys (exit 1); --json still prints what could be read."""
    store.ensure()
    store.cas(CATALOG_KEY, b"{not json", -1)
    store.cas(EPOCH_KEY, b"[1]", -1)
    record_event(store, "promoted", deploy_generation=2)
    status = read_status(store)
    assert status.bootstrapped
    assert {e["key"] for e in status.errors} == {CATALOG_KEY, EPOCH_KEY}
    assert any("catalog is not JSON" in e["error"] for e in status.errors)
    shown = run_cli(zk_env, "status")
    assert shown.exit_code == 1 and "not JSON" in shown.output and "empty" not in shown.output
    document = run_cli(zk_env, "status", "--json")
    assert document.exit_code == 1
    parsed = json.loads(document.stdout)
    assert [e["key"] for e in parsed["errors"]] == [CATALOG_KEY, EPOCH_KEY]
    assert parsed["events"][-1]["kind"] == "promoted"
    with pytest.raises(CorruptStateError) as caught:
        CatalogState.decode(b'{"version": "1.0.0"}')
    assert caught.value.key == CATALOG_KEY and "deploy_generation" in caught.value.message


def test_migration_entries_come_from_the_migration_shard(
    store: Consensus, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """Live migration-shard entries (read from their Parquet batches) appear in the status."""
    blob = BlobStore.from_uri(str(tmp_path / "blobs"))
    store.ensure(SHARDS_KEY)
    state = CatalogState(version="0.11.0", deploy_generation=3, blob_uri=blob.uri)
    store.cas(CATALOG_KEY, state.encode(), -1)
    migration = MigrationShard(store, blob)
    kept = Entry("s1", "0.12.0", 3, "sh-new-1")
    retracted = Entry("s2", "0.12.0", 2, "sh-old-2")
    migration.append_entries([kept, retracted])
    migration.retract([retracted], fence=None)
    document = json.loads(run_cli(zk_env, "status", "--json").stdout)
    assert document["migration_entries"] == [
        {"global_id": "s1", "version": "0.12.0", "deploy_generation": 3, "shard_id": "sh-new-1"}
    ]
    assert document["warnings"] == []


def test_watch_without_a_terminal_prints_a_table_per_change(
    store: Consensus, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """``status --watch`` into a pipe or a log (no terminal): each change is a new table,
    not only the last frame at exit."""
    build_environment(store)
    output = tmp_path / "watch.txt"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "--log-level",
                "WARNING",
                "status",
                "--watch",
                "--zk",
                zk_env.hosts,
                "--env",
                zk_env.name,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 30
        while "migrating" not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "migrating" in output.read_text(), output.read_text()
        found = store.get_json(f"{PROCESSES_KEY}/lead")
        assert found is not None
        store.cas(f"{PROCESSES_KEY}/lead", encode_json({**found[0], "state": "serving"}), found[1])
        while "serving" not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "serving" in output.read_text(), output.read_text()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)
