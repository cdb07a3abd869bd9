"""Benchmark: a command's wall time with and without a Spark Connect server (issue 16).

Starts a master and two 1-core workers from the pyspark wheel with a Spark Connect server on
the cluster (``orchestrator.testing.sparkcluster``), builds a shard of ``--rows`` rows (default
1,000,000, in 20 batches over 3 schemas, ``bench_pipeline.build``) named in a catalog on a real
ZooKeeper, and times the real CLI, each run a fresh process as a user would run it:

* ``read --engine spark --output DIR`` with ``--spark-master spark://...``: every command starts
  its own Spark application (a driver JVM, executors, Python workers);
* the same with ``--spark-remote sc://...``: the command connects to the warm server (after one
  warm-up command, as a long-lived server would be).

Reports the median of ``--repeat`` runs of each (default 3) and their ratio. Prints one JSON
object and writes it to ``benchmarks/results/spark_connect.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

import provenance
from bench_pipeline import build, zookeeper
from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import SHARDS_KEY, CatalogState, CollectionRef, catalog_write_op
from catalog.pipeline import pyspark_version
from orchestrator.logs import configure_logging
from orchestrator.testing.sparkcluster import SparkStandaloneCluster
from orchestrator.testing.zkserver import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "spark_connect.json"
COLLECTION = "mz_catalog.items"


def command(hosts: str, env: str, spark: list[str], out: Path) -> float:
    """One ``read --output`` in a fresh process; its wall time."""
    args = [
        sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", "read",
        "--collection", COLLECTION, "--engine", "spark", "--output", str(out), "--json",
        "--blob-shared", "--zk", hosts, "--env", env, *spark,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"read failed: {done.stderr[-2000:]}")
    return seconds


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = f"bench-connect-{os.getpid()}"
    with (
        zookeeper(work) as hosts,
        SparkStandaloneCluster(work / "cluster", workers=2, cores=1, memory="2g") as cluster,
    ):
        client = KazooClient(hosts=hosts, timeout=15)
        client.start(timeout=30)
        consensus = Consensus(client, f"/catalog-upgrade/{env}")
        consensus.ensure()
        blob = BlobStore.from_uri(str(work / "blob"))
        try:
            shard = build(consensus, blob, "items", args.rows, args.batches)
            consensus.ensure(SHARDS_KEY)
            ref = CollectionRef("s1", COLLECTION, shard.shard_id, "x")
            catalog = CatalogState("0.1.0", 1, blob.uri, {"s1": ref})
            consensus.commit([catalog_write_op(catalog, -1)])
            master = ["--spark-master", cluster.master_url, "--spark-conf",
                      "spark.executor.memory=512m"]  # fmt: skip
            cold = [command(hosts, env, master, work / f"cold{i}") for i in range(args.repeat)]
            remote = cluster.start_connect(free_port())
            command(hosts, env, ["--spark-remote", remote], work / "warm-up")
            warm = [
                command(hosts, env, ["--spark-remote", remote], work / f"warm{i}")
                for i in range(args.repeat)
            ]
        finally:
            client.stop()
            client.close()
    with_session, with_connect = statistics.median(cold), statistics.median(warm)
    return {
        "benchmark": "spark_connect",
        "rows": args.rows,
        "batches": args.batches,
        "workers": 2,
        "read_with_own_session_seconds": round(with_session, 2),
        "read_with_spark_connect_seconds": round(with_connect, 2),
        "runs_with_own_session": [round(s, 2) for s in cold],
        "runs_with_spark_connect": [round(s, 2) for s in warm],
        "speedup": round(with_session / with_connect, 2),
        "python": platform.python_version(),
        "pyspark": pyspark_version(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    configure_logging("WARNING")  # stdout carries only the JSON result
    with tempfile.TemporaryDirectory(prefix="bench-spark-connect-") as work:
        result = run(args, Path(work))
    result = provenance.record(args.output, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
