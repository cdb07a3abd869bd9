"""A blob store whose file system fills, on a real small file system (a tmpfs mounted for the
test): appends are refused with 503 ``blob-store-full`` and write nothing, every acknowledged
row reads back once, status and a restarted leader work while it is full, and once space is
freed the refused appends, retried with their keys, land exactly once."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from catalog.errors import EXIT_OK
from support.sidecars import Launch, SidecarProcess, cli, json_lines
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V1 = "0.10.0"
TABLES = "mz_catalog.mz_tables"
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def row(n: int) -> bytes:
    """One row whose name is 300 KB of incompressible text."""
    name = base64.b64encode(os.urandom(225_000)).decode()
    line = {"id": f"u{n}", "oid": 20000 + n, "schema_id": "u3", "name": name, "owner_id": "u1"}
    return (json.dumps(line) + "\n").encode()


def append(leader: SidecarProcess, n: int, body: bytes) -> tuple[int, dict[str, object]]:
    answer = leader.sidecar.request(
        "POST", f"/append?collection={TABLES}", body, timeout=60,
        headers={**NDJSON, "Idempotency-Key": f"key-{n}"},
    )  # fmt: skip
    return answer.status, json.loads(answer.body)


def ids(leader: SidecarProcess) -> list[str]:
    status, body = leader.http("GET", f"/read?collection={TABLES}")
    assert status == 200, body[:500]
    return sorted(r["id"] for r in json_lines(body))


def full_warnings(zk_env: ZkEnv, process: str) -> list[str]:
    done = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json")
    warnings = json.loads(done.stdout)["warnings"]
    return [w for w in warnings if w.startswith(f"{process} reports the blob store full")]


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.5)


@pytest.mark.slow
def test_a_full_blob_store_refuses_appends_with_503_and_loses_nothing(
    launch: Launch, zk_env: ZkEnv, small_disk: Path
) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(os.urandom(1_000_000))  # what the operator frees later
    blob = small_disk / "blob"
    leader = launch(V1, 1, "blue-full", auto_promote=True, blob=blob)
    leader.wait_state("serving")
    acknowledged: list[str] = []
    refused: dict[int, bytes] = {}
    for n in range(40):
        body = row(n)
        status, answer = append(leader, n, body)
        if status == 200:
            acknowledged.append(f"u{n}")
            continue
        assert status == 503 and answer["error"] == "blob-store-full", answer
        assert "No space left" in str(answer["message"]) or "full" in str(answer["message"])
        refused[n] = body
        if len(refused) == 2:
            break
    assert refused and acknowledged, "the tmpfs never filled"
    metrics = leader.http("GET", "/metrics")[1].decode()
    assert 'catalog_upgrade_refusals_total{error="blob-store-full"}' in metrics
    assert "catalog_upgrade_blob_store_full 1.0" in metrics
    # Full: reads, status and a restarted leader work; nothing refused was written.
    assert ids(leader) == sorted(acknowledged)
    shown = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert shown.returncode == EXIT_OK, shown.stderr
    wait_for("status names the full store", lambda: full_warnings(zk_env, "blue-full"))
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK
    again = launch(V1, 1, "blue-full-2", blob=blob)
    again.wait_state("serving")
    assert ids(again) == sorted(acknowledged)
    # The restarted leader meets the full store at its first append, ...
    first = next(iter(refused))
    status, answer = append(again, first, refused[first])
    assert status == 503 and answer["error"] == "blob-store-full", answer
    wait_for("status names the full store", lambda: full_warnings(zk_env, "blue-full-2"))
    # ... and, space freed, learns it by itself (its probe every finalize interval).
    filler.unlink()
    wait_for("the full store cleared", lambda: not full_warnings(zk_env, "blue-full-2"))
    assert "catalog_upgrade_blob_store_full 0.0" in again.http("GET", "/metrics")[1].decode()
    # Each refused append, retried with its key, lands once.
    for n, body in refused.items():
        status, answer = append(again, n, body)
        assert status == 200 and answer["replayed"] is False, answer
        status, answer = append(again, n, body)
        assert status == 200 and answer["replayed"] is True, answer
    assert ids(again) == sorted([*acknowledged, *(f"u{n}" for n in refused)])
