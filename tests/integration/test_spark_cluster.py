"""The pipeline on a real Spark standalone cluster (a master and two 1-core workers started from
the pyspark wheel, orchestrator.testing.sparkcluster), driven through the real CLI in its own
process (this test process already runs a local SparkSession, and Spark allows one per process).

Reads on the cluster agree with arrow; a compaction and a REWRITE copy on the cluster with
``spark.driver.maxResultSize=1m`` keep every row of a shard far larger than 1 MiB (executors
write the batches, the driver only commits their references); a read whose result passes that
limit is one error line naming the setting, not a Py4J traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import SHARDS_KEY, CatalogState, CollectionRef, catalog_write_op
from catalog.shard import DIFF, TS, Shard
from orchestrator.testing.sparkcluster import SparkStandaloneCluster
from orchestrator.testing.zkserver import free_port
from support.objectstore import ObjectStore
from support.shards import canonical
from support.sidecars import SidecarProcess, json_lines, sidecars
from support.sidecars import cli as tool
from support.spark import EXECUTOR_JAVA_OPTIONS
from support.zookeeper import ZkEnv

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.spark,
]

COLLECTION = "mz_catalog.items"
V0 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("owner", pa.struct([pa.field("uid", pa.int32()), pa.field("role", pa.string())])),
    ]
)
V1 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("owner", pa.struct([pa.field("uid", pa.int32()), pa.field("team", pa.string())])),
        pa.field("score", pa.float64()),
    ]
)
ROWS_PER_BATCH = 40_000


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, object_store: ObjectStore
) -> Iterator[SparkStandaloneCluster]:
    """Two workers whose environment holds the object store's credentials (what an instance
    role gives a real cluster's machines): executors reach an s3:// store on their own."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in object_store.credentials.environment().items():
            patch.setenv(name, value)
        with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
            yield running


def batch(schema: pa.Schema, start: int, ts: int, diff: int = 1) -> pa.Table:
    ids = range(start, start + ROWS_PER_BATCH)
    columns: dict[str, Any] = {
        "id": list(ids),
        "name": [f"name-{i:08d}-{'x' * (i % 17)}" for i in ids],
        "owner": [None if i % 5 == 0 else {"uid": i % 97, schema.field("owner").type[1].name: "r"}
                  for i in ids],
    }  # fmt: skip
    if "score" in schema.names:
        columns["score"] = [(-0.0 if i % 3 else 0.0) if i % 7 == 0 else i / 8 for i in ids]
    table = pa.Table.from_pydict(columns, schema=schema)
    table = table.append_column(TS, pa.array([ts] * table.num_rows, pa.uint64()))
    return table.append_column(DIFF, pa.array([diff] * table.num_rows, pa.int64()))


def build_shard(zk_client: KazooClient, zk_env: ZkEnv, blob: BlobStore) -> Shard:
    """A collection of 160,000 stored rows (several MB of Parquet) under two schemas, with a
    retraction, named in a catalog so the CLI finds it."""
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure()
    shard = Shard(consensus, blob, f"c-{uuid.uuid4().hex[:8]}")
    shard.create(V0)
    for number, table in enumerate([batch(V0, 0, 0), batch(V0, 0, 1, diff=-1)]):
        assert shard.compare_and_append(table, number, number + 1).ok
    assert shard.compare_and_append(batch(V0, 40_000, 2), 2, 3).ok
    assert shard.compare_and_evolve_schema(shard.state().schema_id, V1).ok
    assert shard.compare_and_append(batch(V1, 80_000, 3), 3, 4).ok
    consensus.ensure(SHARDS_KEY)
    ref = CollectionRef(global_id="s1", name=COLLECTION, shard_id=shard.shard_id, fingerprint="x")
    state = CatalogState(
        version="0.1.0", deploy_generation=1, blob_uri=blob.uri, collections={"s1": ref}
    )
    consensus.commit([catalog_write_op(state, -1)])
    return shard


@pytest.fixture
def shard(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> Shard:
    return build_shard(zk_client, zk_env, BlobStore.from_uri(str(tmp_path / "blob")))


def cli(
    zk_env: ZkEnv, cluster: SparkStandaloneCluster, *args: str
) -> subprocess.CompletedProcess[str]:
    """``catalog-upgrade ARGS`` on the cluster, in its own process (its own driver)."""
    command = [
        sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", *args,
        "--collection", COLLECTION, "--engine", "spark", "--spark-master", cluster.master_url,
        "--blob-shared", "--spark-conf", "spark.executor.memory=512m",
        "--spark-conf", "spark.driver.memory=512m",
        "--spark-conf", "=".join(EXECUTOR_JAVA_OPTIONS), "--zk", zk_env.hosts, "--env", zk_env.name,
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_under_a_1m_result_limit_a_collected_read_fails_naming_it_and_a_written_one_passes(
    shard: Shard, zk_env: ZkEnv, cluster: SparkStandaloneCluster, tmp_path: Path
) -> None:
    """Under spark.driver.maxResultSize=1m on the cluster, a table of every row (collected) is
    an error line naming the setting, while read --output (the executors write the parts)
    passes. The streamed read and the compaction under the same limit are on the object store
    (below)."""
    expected = shard.snapshot()
    assert expected.num_rows == 80_000  # the first batch was retracted
    small = ("--spark-conf", "spark.driver.maxResultSize=1m")
    done = cli(zk_env, cluster, "read", "--limit", "80000", *small)  # a table of every row
    assert done.returncode == 2, done.stderr[-3000:]
    assert "spark.driver.maxResultSize" in done.stderr
    assert "Traceback" not in done.stderr and "Py4J" not in done.stderr

    # The same read written by the executors (read --output) passes under the limit.
    out = tmp_path / "snapshot"
    done = cli(zk_env, cluster, "read", "--json", "--output", str(out), *small)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["rows"] == expected.num_rows
    parts = json.loads((out / "_SUCCESS").read_text())["parts"]
    got = pa.concat_tables([pq.read_table(out / part) for part in parts])
    assert got.schema == expected.schema and canonical(got) == canonical(expected)


COPY_SCRIPT = """
import json, sys
import pyarrow as pa, pyarrow.compute as pc
from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.pipeline import SparkConfig, copy_transformed
from catalog.shard import Shard
from orchestrator.zookeeper.clients import close, connect

NEW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("label", pa.string())])

def to_new(batch):
    return pa.RecordBatch.from_arrays([batch.column("id"), pc.utf8_upper(batch.column("name"))],
                                      schema=NEW)

hosts, root, blob_uri, source_id, target_id, master = sys.argv[1:7]
client = connect(hosts, timeout=30)  # the sidecars' client: it reconnects as they do
consensus = Consensus(client, root)
blob = BlobStore.from_uri(blob_uri)
config = SparkConfig.of(master, {"spark.driver.maxResultSize": "1m",
                                 "spark.executor.memory": "512m", KEY: VALUE}, blob_shared=True)
rows = copy_transformed(Shard(consensus, blob, source_id), Shard(consensus, blob, target_id),
                        [to_new], NEW, fence=None, engine="spark", spark=config)
print(json.dumps({"rows": rows}))
close(client)
"""


def copy_on_the_cluster(
    shard: Shard, zk_env: ZkEnv, cluster: SparkStandaloneCluster
) -> tuple[Shard, subprocess.CompletedProcess[str]]:
    """COPY_SCRIPT (a REWRITE copy of ``shard`` into a new shard, on the cluster) in a process
    of its own; the target and the finished process."""
    new = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("label", pa.string())])
    target = Shard(shard.consensus, shard.blob, f"t-{uuid.uuid4().hex[:8]}")
    target.create(new)
    args = [zk_env.hosts, shard.consensus.root, shard.blob.uri, shard.shard_id, target.shard_id]
    script = f"KEY, VALUE = {EXECUTOR_JAVA_OPTIONS!r}\n{COPY_SCRIPT}"
    command = [sys.executable, "-c", script, *args, cluster.master_url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return target, done


def test_rewrite_copy_on_a_cluster_passes_no_rows_through_the_driver(
    shard: Shard, zk_env: ZkEnv, cluster: SparkStandaloneCluster
) -> None:
    """A REWRITE copy of 160,000 stored rows on the cluster with maxResultSize=1m: the
    executors write the target's batches and the driver commits their references; the target
    holds the transformed source."""
    target, done = copy_on_the_cluster(shard, zk_env, cluster)
    assert json.loads(done.stdout.splitlines()[-1])["rows"] == 160_000
    state = target.state()
    assert state.upper == shard.state().upper and state.batch_count >= 2  # one per partition
    source_rows = shard.snapshot().to_pylist()
    expected = sorted((r["id"], r["name"].upper(), r[DIFF]) for r in source_rows)
    got = sorted((r["id"], r["label"], r[DIFF]) for r in target.snapshot().to_pylist())
    assert got == expected


def test_blue_green_upgrade_with_a_rewrite_copied_on_the_cluster(
    zk_client: KazooClient, zk_env: ZkEnv, cluster: SparkStandaloneCluster, tmp_path: Path
) -> None:
    """0.10.0 -> 0.11.0 rewrites mz_roles (numeric ids become 'u<id>'): the read-only green
    sidecar copies it on the cluster, the promoted green copies the delta the blue leader
    appended meanwhile, and reads every role through the new schema."""
    spark = [
        "--engine", "spark", "--spark-master", cluster.master_url, "--blob-shared",
        "--spark-conf", "spark.cores.max=1", "--spark-conf", "spark.executor.memory=512m",
        "--spark-conf", "spark.driver.memory=512m",
        "--spark-conf", "=".join(EXECUTOR_JAVA_OPTIONS),
    ]  # fmt: skip
    roles = "mz_catalog.mz_roles"

    def role(i: int) -> bytes:
        return (
            json.dumps({"id": i, "oid": 30000 + i, "name": f"r{i}", "inherit": True}) + "\n"
        ).encode()

    with sidecars() as started:

        def launch(version: str, generation: int, name: str, **options: Any) -> SidecarProcess:
            process = SidecarProcess.start(
                zk_client, zk_env.hosts, zk_env.name, version, generation, process_id=name,
                log_dir=tmp_path, blob=tmp_path / "blob", **options,
            )  # fmt: skip
            started.append(process)
            return process

        blue = launch("0.10.0", 1, "blue", auto_promote=True)
        blue.wait_state("serving")
        assert blue.http("POST", f"/append?collection={roles}", role(7))[0] == 200
        green = launch("0.11.0", 2, "green", extra=spark)
        green.wait_state("ready", timeout=180)
        assert blue.http("POST", f"/append?collection={roles}", role(8))[0] == 200
        done = tool("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                   "--deploy-generation", "2", "--wait", "180", timeout=240)  # fmt: skip
        assert done.returncode == 0, done.stderr + green.log_tail()
        green.wait_state("serving", timeout=60)
        status, body = green.http("GET", f"/read?collection={roles}")
        assert status == 200, body
        assert sorted(r["id"] for r in json_lines(body)) == ["u7", "u8"]
        log = green.log_tail(400)
    apps = (cluster.state() or {}).get("completedapps", []) + (cluster.state() or {}).get(
        "activeapps", []
    )
    assert any(app.get("name") == "catalog-upgrade" for app in apps)
    assert '"engine": "spark"' in log and "rewrite_append" in log


def test_read_compaction_and_rewrite_copy_on_an_object_store_on_the_cluster(
    zk_client: KazooClient, zk_env: ZkEnv, cluster: SparkStandaloneCluster, s3_blob: str
) -> None:
    """The same shard on the S3 server: the pyspark wheel has no hadoop-aws, so the executors
    read and write its batches through pyarrow; a read and a compaction on the cluster, under a
    1m result limit, agree with arrow, and a REWRITE copy holds the transformed source."""
    shard = build_shard(zk_client, zk_env, BlobStore.from_uri(s3_blob))
    expected = shard.snapshot()
    assert expected.num_rows == 80_000  # the first batch was retracted
    small = ("--spark-conf", "spark.driver.maxResultSize=1m")
    # Streamed (read --json, a partition at a time), the read of both schemas' batches passes
    # under a 1m result limit.
    done = cli(zk_env, cluster, "read", "--json", *small)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert canonical(pa.Table.from_pylist(rows, schema=expected.schema)) == canonical(expected)
    done = cli(zk_env, cluster, "compact", "--json", *small)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["applied"] and summary["engine"] == "spark" and summary["inputs"] == 4
    assert summary["rows"] == 160_000  # the retraction is at a later time: kept
    state = shard.state()
    assert all(b.schema_id == state.schema_id for b in shard.batches(state))
    assert canonical(shard.snapshot()) == canonical(expected)
    apps = (cluster.state() or {}).get("completedapps", [])
    assert len(apps) >= 2, "the jobs did not run on the cluster"

    target, _ = copy_on_the_cluster(shard, zk_env, cluster)
    expected_copy = sorted((r["id"], r["name"].upper(), r[DIFF]) for r in expected.to_pylist())
    got = sorted((r["id"], r["label"], r[DIFF]) for r in target.snapshot().to_pylist())
    assert got == expected_copy


def remote_cli(zk_env: ZkEnv, remote: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``catalog-upgrade ARGS`` through a Spark Connect server (no Spark session of its own)."""
    command = [
        sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", *args,
        "--collection", COLLECTION, "--engine", "spark", "--spark-remote", remote,
        "--blob-shared", "--zk", zk_env.hosts, "--env", zk_env.name,
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_spark_connect_runs_reads_and_compactions_in_a_warm_application(
    shard: Shard, zk_env: ZkEnv, cluster: SparkStandaloneCluster
) -> None:
    """A Spark Connect server on the cluster, started from the wheel: read and compaction
    through --spark-remote agree with arrow, the catalog package reaches its executors as an
    artifact, and a command no longer starts a Spark session (the second read is timed against
    a read that starts one, and printed)."""
    remote = cluster.start_connect(free_port())
    expected = shard.snapshot()
    started = time.monotonic()
    done = remote_cli(zk_env, remote, "read", "--json")
    first = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert canonical(pa.Table.from_pylist(rows, schema=expected.schema)) == canonical(expected)
    started = time.monotonic()
    done = remote_cli(zk_env, remote, "read", "--json")
    warm = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]

    done = remote_cli(zk_env, remote, "compact", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["applied"] and summary["engine"] == "spark"
    state = shard.state()
    assert all(b.schema_id == state.schema_id for b in shard.batches(state))
    assert canonical(shard.snapshot()) == canonical(expected)
    done = remote_cli(zk_env, remote, "read", "--json", "--spark-master", "local[1]")
    assert done.returncode == 2 and "not both" in done.stderr, done.stderr[-2000:]
    print(f"read through Spark Connect: first {first:.1f} s, warm {warm:.1f} s")
