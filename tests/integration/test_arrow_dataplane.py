"""The Arrow data plane against a real sidecar on a real ZooKeeper: appends and reads in Arrow
IPC, exactly once when the answer is lost, and every bad stream refused with nothing written
(rows, znodes, blobs)."""

from __future__ import annotations

import io
import json
import socket
import time
from pathlib import Path

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.release import load_release
from catalog_client.media import ARROW_STREAM_TYPE
from support.sidecars import Launch, SidecarProcess, ndjson, read_rows, release_file, tree_digest
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = "mz_catalog.mz_tables"
APPEND = f"/append?collection={TABLES}"
SCHEMA = load_release(release_file("0.10.0")).builtin(TABLES).schema  # type: ignore[union-attr]
ARROW = {"Content-Type": ARROW_STREAM_TYPE}


def table_rows(first: int, count: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"id": f"a{n}", "oid": 60000 + n, "schema_id": "u3", "name": f"arrow-{n}",
             "owner_id": "u1"}
            for n in range(first, first + count)
        ],
        schema=SCHEMA,
    )  # fmt: skip


def stream(*tables: pa.Table, schema: pa.Schema | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema or tables[0].schema) as writer:
        for table in tables:
            writer.write_table(table, max_chunksize=500)
    return sink.getvalue()


def append(leader: SidecarProcess, body: bytes, key: str | None = None) -> tuple[int, dict]:
    headers = {**ARROW, **({"Idempotency-Key": key} if key else {})}
    answer = leader.sidecar.request("POST", APPEND, body, headers=headers, timeout=30)
    return answer.status, json.loads(answer.body)


def read_arrow(leader: SidecarProcess) -> pa.Table:
    answer = leader.sidecar.request(
        "GET", f"/read?collection={TABLES}", headers={"Accept": ARROW_STREAM_TYPE}, timeout=60
    )
    assert answer.status == 200, answer.summary()
    assert answer.headers.get("Content-Type") == ARROW_STREAM_TYPE
    return pa.ipc.open_stream(answer.body).read_all()


def test_arrow_round_trip_in_both_formats(launch: Launch) -> None:
    """Rows appended in Arrow (several batches, and a projection in another order) read back
    in Arrow and in NDJSON alike; the Arrow read carries ``_ts`` and ``_diff``."""
    leader = launch("0.10.0", 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    first = table_rows(0, 2000)
    status, answer = append(leader, stream(first))
    assert status == 200 and answer["rows"] == 2000, answer
    projected = table_rows(2000, 3).select(["owner_id", "name", "id", "oid", "schema_id"])
    status, answer = append(leader, stream(projected))
    assert status == 200 and answer["rows"] == 3, answer
    assert leader.http("POST", APPEND, ndjson(table_rows(3000, 1).to_pylist()))[0] == 200

    read = read_arrow(leader)
    assert read.schema.names == [*SCHEMA.names, "_ts", "_diff"]
    data = read.drop_columns(["_ts", "_diff"]).sort_by("oid")
    expected = pa.concat_tables([first, table_rows(2000, 3), table_rows(3000, 1)])
    assert data.equals(expected.sort_by("oid"))
    as_json = read_rows(leader, TABLES)
    assert sorted(r["oid"] for r in as_json) == expected.column("oid").to_pylist()


def test_an_arrow_append_whose_answer_is_lost_lands_once(launch: Launch) -> None:
    """The client sends an Arrow append with a key and drops the connection before the answer:
    the sidecar still writes it, and a retry with the same key gets the first answer replayed
    (the rows are there once). The retry is sent once the rows show: sent at once, the server
    may take its turn first, and then the dropped request is the one replayed."""
    leader = launch("0.10.0", 1, "blue", auto_promote=True)
    leader.wait_state("serving")
    body = stream(table_rows(0, 5000))
    host, _, port = leader.sidecar.http.rpartition(":")
    head = (
        f"POST {APPEND} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {ARROW_STREAM_TYPE}\r\n"
        f"Idempotency-Key: lost-1\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + body)  # and gone, before any answer
    deadline = time.monotonic() + 30
    while (rows := read_arrow(leader).num_rows) == 0:
        assert time.monotonic() < deadline, "the dropped request was never written"
        time.sleep(0.1)
    assert rows == 5000
    status, answer = append(leader, body, key="lost-1")
    assert status == 200 and answer["replayed"] is True and answer["rows"] == 5000, answer
    again = append(leader, body, key="lost-1")
    assert again == (200, answer)
    assert read_arrow(leader).num_rows == 5000


def _blobs(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_every_bad_arrow_stream_is_refused_naming_it_and_writes_nothing(
    launch: Launch, zk_env: ZkEnv, zk_client: KazooClient, tmp_path: Path
) -> None:
    limits = ["--http-max-append-rows", "1000", "--http-max-body", "2000000"]
    leader = launch("0.10.0", 1, "blue", auto_promote=True, extra=limits)
    leader.wait_state("serving")
    assert append(leader, stream(table_rows(0, 10)))[0] == 200
    time.sleep(1.5)  # the process node's own heartbeat settles before the digests
    whole = stream(table_rows(100, 500), table_rows(600, 400))
    wide = SCHEMA.set(1, pa.field("oid", pa.int64(), nullable=False))
    nullable = pa.schema([f.with_nullable(True) for f in SCHEMA])
    dictionary = pa.table(
        {"id": pa.array(["d"]).dictionary_encode(), "oid": pa.array([1], pa.uint32()),
         "schema_id": ["u3"], "name": ["n"], "owner_id": ["u1"]}
    )  # fmt: skip
    cases: list[tuple[str, bytes, int, str]] = [
        ("garbage", b"\x00garbage bytes, not a stream", 400, "not an Arrow IPC stream"),
        ("truncated", whole[: len(whole) // 2], 400, "cut short"),
        ("empty", b"", 400, "empty body"),
        ("no rows", stream(schema=SCHEMA), 400, "no rows"),
        ("unknown field",
         stream(table_rows(0, 1).append_column("color", pa.array(["red"]))), 400,
         "unknown field color"),
        ("wrong type", stream(table_rows(0, 1).cast(wide)), 400, "field oid: type int64"),
        ("null", stream(pa.Table.from_pylist([{"id": "x", "oid": None, "schema_id": "u3",
                                               "name": "n", "owner_id": "u1"}],
                                             schema=nullable)), 400, "field oid"),
        ("dictionary", stream(dictionary), 400, "dictionary-encoded"),
        ("too many rows", stream(table_rows(0, 600), table_rows(600, 600)), 413,
         "more than 1000 rows"),
        ("over the body limit", stream(table_rows(0, 900)) + b"\x00" * 2_000_000, 413,
         "above the 2000000-byte limit"),
    ]  # fmt: skip
    before = (tree_digest(zk_client, zk_env.root + "/shards"), _blobs(tmp_path / "blob"))
    checked = 0
    for name, body, status, words in cases:
        got, answer = append(leader, body, key=f"bad-{name}")
        assert (got, words in answer["message"]) == (status, True), (name, answer)
        checked += 1
    assert checked == len(cases) == 10
    after = (tree_digest(zk_client, zk_env.root + "/shards"), _blobs(tmp_path / "blob"))
    assert after == before
    assert read_arrow(leader).num_rows == 10
