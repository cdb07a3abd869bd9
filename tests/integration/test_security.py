"""Hostile HTTP against a real sidecar: every refused probe writes nothing (rows, znodes, blobs).

The probes: oversized bodies (declared and chunked), invalid UTF-8, JSON nested 100,000 deep,
reads without a credential, the read token on a write, foreign Host headers and browser-style
simple requests, a world-readable token file, a token rotated without a restart, and a thousand
idle and slow clients."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.environment import PROMOTION_KEY
from orchestrator.testing.procstat import Peaks, rss_kib, thread_count
from orchestrator.testing.slowclients import SlowClients
from support.sidecars import SidecarProcess, sidecars, tree_digest
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = "0.10.0"
TABLES = "mz_catalog.mz_tables"
ROW = b'{"id":"u1","oid":20001,"schema_id":"u3","name":"orders","owner_id":"u1"}\n'
WRITE_TOKEN = "write-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"


@pytest.fixture
def guarded(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> Iterator[tuple[SidecarProcess, Path, Path]]:
    """A serving leader with a write token (0644: readable by others) and a read token, a
    1 MiB body limit, on loopback."""
    write, read = tmp_path / "write-token", tmp_path / "read-token"
    write.write_text(WRITE_TOKEN + "\n")
    write.chmod(0o644)
    read.write_text(READ_TOKEN + "\n")
    read.chmod(0o600)
    with sidecars() as started:
        leader = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, V1, 1, process_id="guarded",
            log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True, http_token_file=write,
            extra=["--http-read-token-file", str(read), "--http-max-body", str(1 << 20)],
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        yield leader, write, tmp_path / "blob"


def request(
    leader: SidecarProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    """A raw request (no token unless given), on a connection of its own."""
    host, _, port = leader.sidecar.http.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        chunked = body is not None and not isinstance(body, bytes)
        connection.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        answer = connection.getresponse()
        return answer.status, answer.read(), dict(answer.getheaders())
    finally:
        connection.close()


def bearer(token: str, content_type: str | None = "application/x-ndjson") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    return headers


def written(client: KazooClient, zk_env: ZkEnv, blob: Path) -> tuple[str, list[str]]:
    """What a refused probe must leave unchanged: the environment's znodes (the process node's
    heartbeat aside, and the registration an allowed read holds) and the blob listing."""
    digest = tree_digest(client, f"{zk_env.root}/shards", readers=False)
    return digest, BlobStore.from_uri(str(blob)).list("")


def test_hostile_requests_are_refused_before_anything_is_written(
    guarded: tuple[SidecarProcess, Path, Path], zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    leader, _write, blob = guarded
    append = f"/append?collection={TABLES}"
    before = written(zk_client, zk_env, blob)
    probes: list[tuple[str, int, int]] = []

    def expect(name: str, status: int, answer: tuple[int, bytes, dict[str, str]]) -> None:
        probes.append((name, status, answer[0]))
        assert answer[0] == status, (name, answer[1][:300])
        assert written(zk_client, zk_env, blob) == before, f"{name} wrote something"

    # 1. A body past the limit, declared or chunked, is refused while reading (413).
    expect("declared", 413, request(leader, "POST", append, b"x" * (2 << 20), bearer(WRITE_TOKEN)))
    rss = rss_kib(leader.sidecar.pid)

    def chunks() -> Iterator[bytes]:
        for _ in range(128):  # 128 MiB
            yield b"{" + b" " * ((1 << 20) - 2) + b"}"

    try:
        answer = request(leader, "POST", append, chunks(),  # type: ignore[arg-type]
                         {**bearer(WRITE_TOKEN), "Transfer-Encoding": "chunked"})  # fmt: skip
    except (BrokenPipeError, ConnectionResetError):
        answer = (413, b"connection closed while sending past the limit", {})
    expect("chunked", 413, answer)
    grown = rss_kib(leader.sidecar.pid) - rss
    assert grown < 64 * 1024, f"RSS grew {grown} KiB reading a chunked body"

    # 2. Invalid UTF-8 names its line and field (400), never stored as replacement characters.
    status, body, _ = request(
        leader, "POST", append,
        b'{"id":"u1","oid":1,"schema_id":"u3","name":"\xe9 \xff\xfe","owner_id":"u1"}\n',
        bearer(WRITE_TOKEN),
    )  # fmt: skip
    expect("utf-8", 400, (status, body, {}))
    assert json.loads(body)["line"] == 1 and json.loads(body)["field"] == "name"

    # 3. JSON nested 100,000 deep is 400 naming the limit, with no traceback.
    deep = b'{"id":"u1","oid":1,"schema_id":"u3","name":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, body, _ = request(leader, "POST", append, deep, bearer(WRITE_TOKEN))
    expect("deep", 400, (status, body, {}))
    assert json.loads(body)["limit"] == 64

    # 5. Reads need a credential; the read token reads but cannot write.
    for path in (f"/read?collection={TABLES}", "/status", "/status?coverage", "/history",
                 "/metrics"):  # fmt: skip
        expect(f"anonymous {path}", 401, request(leader, "GET", path))
        expect(f"read {path}", 200, request(leader, "GET", path, headers=bearer(READ_TOKEN, None)))
    expect("read token appends", 403, request(leader, "POST", append, ROW, bearer(READ_TOKEN)))
    expect("read token promotes", 403, request(leader, "POST", "/promote", b"", bearer(READ_TOKEN)))
    for path in ("/healthz", "/readyz", "/"):
        expect(f"open {path}", 200, request(leader, "GET", path))

    # 6. A foreign Host (DNS rebinding) is 421; a browser's simple request cannot post (415).
    foreign = {**bearer(WRITE_TOKEN), "Host": "attacker.example"}
    expect("foreign host", 421, request(leader, "POST", append, ROW, foreign))
    expect("foreign host read", 421, request(leader, "GET", "/status", headers=foreign))
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        expect(kind, 415, request(leader, "POST", append, ROW, bearer(WRITE_TOKEN, kind)))
        expect(f"{kind} promote", 415,
               request(leader, "POST", "/promote", b"", bearer(WRITE_TOKEN, kind)))  # fmt: skip
    simple = {"Content-Type": "text/plain", "Origin": "http://attacker.example"}
    expect("simple cross-site", 401, request(leader, "POST", append, ROW, simple))
    # A bodyless fetch() POST is a simple request too: no media type, refused before anything.
    bare = {"Authorization": f"Bearer {WRITE_TOKEN}"}
    promote_nine = "/promote?deploy_generation=9"
    expect("bodyless promote", 415, request(leader, "POST", promote_nine, None, bare))

    # Peers that send a request the server refuses and reset the connection at once: the
    # server may find them gone as it ends its side. Nothing of that is a traceback.
    host, _, port = leader.sidecar.http.rpartition(":")
    for _ in range(20):
        with socket.create_connection((host, int(port))) as rude:
            rude.sendall(b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n")
            rude.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert request(leader, "GET", "/healthz")[0] == 200

    log = leader.log_file.read_text()
    assert "Traceback" not in log and "RecursionError" not in log
    # Every line is JSON, the standard library's loggers (kazoo, asyncio) included.
    assert all(isinstance(json.loads(line), dict) for line in log.splitlines() if line.strip())
    assert WRITE_TOKEN not in log and READ_TOKEN not in log
    # 4. The world-readable token file was named, with its mode.
    assert "http_token_file_readable_by_others" in log and '"mode": "0644"' in log
    # The write token still writes: the refusals were refusals, not a broken sidecar.
    assert request(leader, "POST", append, ROW, bearer(WRITE_TOKEN))[0] == 200
    print(f"{len(probes)} probes answered, the refused ones with nothing written")
    # A promotion is audited: which credential asked, from where (node and log). Generation
    # 2's candidacy, as its process would register it (a generation nobody runs is refused).
    zk_client.create(f"{zk_env.root}/election/2/n_", b"", ephemeral=True, sequence=True,
                     makepath=True)  # fmt: skip
    answer = request(leader, "POST", "/promote?deploy_generation=2", b"", bearer(WRITE_TOKEN))
    assert answer[0] == 200, answer[1]
    node = json.loads(zk_client.get(f"{zk_env.root}/{PROMOTION_KEY}")[0])
    assert node["requested_by"] == "http:write-token@127.0.0.1"
    assert '"event": "promotion_requested"' in leader.log_file.read_text()


def test_a_rotated_token_takes_effect_without_a_restart(
    guarded: tuple[SidecarProcess, Path, Path],
) -> None:
    leader, write, _blob = guarded
    append = f"/append?collection={TABLES}"
    assert request(leader, "POST", append, ROW, bearer(WRITE_TOKEN))[0] == 200
    rotated = "rotated-token-0123456789abcdef"
    staged = write.with_suffix(".new")
    staged.write_text(rotated + "\n")
    staged.chmod(0o600)
    os.replace(staged, write)  # an atomic rotation, as a secret manager does
    deadline = time.monotonic() + 5
    while request(leader, "POST", append, ROW, bearer(WRITE_TOKEN))[0] != 403:
        assert time.monotonic() < deadline, "the old token still writes"
        time.sleep(0.1)
    assert request(leader, "POST", append, ROW, bearer(rotated))[0] == 200
    assert leader.process.poll() is None
    assert "http_token_rotated" in leader.log_file.read_text()


def test_a_thousand_idle_and_slow_clients_hold_no_thread(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """500 idle connections and 500 slowloris ones (a header line a second, never the end):
    probes, reads and an authenticated append still answer, the sidecar's threads stay at what
    they were plus its worker pool, the slow clients get 408 at the header deadline and the idle
    ones are closed at the idle deadline, one connection past the limit gets 503, and none of it
    writes."""
    write = tmp_path / "write-token"
    write.write_text(WRITE_TOKEN + "\n")
    write.chmod(0o600)
    limits = ["--http-workers", "4", "--http-max-connections", "1010",
              "--http-header-timeout", "6", "--http-idle-timeout", "9"]  # fmt: skip
    with sidecars() as started:
        leader = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, V1, 1, process_id="crowded", log_dir=tmp_path,
            blob=tmp_path / "blob", auto_promote=True, http_token_file=write, extra=limits,
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        pid = leader.sidecar.pid
        append = f"/append?collection={TABLES}"
        assert request(leader, "POST", append, ROW, bearer(WRITE_TOKEN))[0] == 200  # warm
        reading = f"/read?collection={TABLES}"
        rows = request(leader, "GET", reading, None, bearer(WRITE_TOKEN, None))[1].count(b"\n")
        # After a first read: its reader registration's heartbeat is a thread of the process.
        threads, rss = thread_count(pid), rss_kib(pid)
        before = written(zk_client, zk_env, tmp_path / "blob")
        host, _, port = leader.sidecar.http.rpartition(":")
        with Peaks(pid) as peaks, SlowClients(host, int(port), idle=500, slow=500) as crowd:
            time.sleep(1.5)
            assert request(leader, "GET", "/healthz")[0] == 200
            assert request(leader, "GET", f"/read?collection={TABLES}",
                           headers=bearer(WRITE_TOKEN, None))[0] == 200  # fmt: skip
            crowd_row = ROW.replace(b'"u1","oid":20001', b'"u9","oid":20009')
            assert request(leader, "POST", append, crowd_row, bearer(WRITE_TOKEN))[0] == 200
            metrics = request(leader, "GET", "/metrics", headers=bearer(WRITE_TOKEN, None))[1]
            assert "catalog_upgrade_http_connections 100" in metrics.decode(), "1,000 and more"
            extra = [socket.create_connection((host, int(port))) for _ in range(12)]
            extra[-1].settimeout(5)
            refused = extra[-1].recv(4096)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"too-many-connections" in refused
            for sock in extra:
                sock.close()
            assert crowd.outcomes() == {"idle": {"open": 500}, "slow": {"open": 500}}
            deadline = time.monotonic() + 15
            while crowd.outcomes() != {"idle": {"closed": 500}, "slow": {"408": 500}}:
                assert time.monotonic() < deadline, crowd.outcomes()
                time.sleep(0.5)
        assert peaks.threads <= threads + 4, f"{peaks.threads} threads, {threads} before"
        assert peaks.rss_kib - rss < 64 * 1024, f"RSS {rss} -> {peaks.rss_kib} KiB"
        assert request(leader, "GET", "/healthz")[0] == 200
        after_rows = request(leader, "GET", reading, None, bearer(WRITE_TOKEN, None))[1]
        assert after_rows.count(b"\n") == rows + 1  # the append made among the crowd
        after = written(zk_client, zk_env, tmp_path / "blob")
        assert after[0] != before[0]  # the one append wrote ...
        assert not any("slow" in name for name in after[1])  # ... the slowloris nothing
