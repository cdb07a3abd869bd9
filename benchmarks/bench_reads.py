"""Reads of a collection through a real sidecar's ``GET /read``, in Arrow IPC and in NDJSON,
next to the plain in-process read of the same Parquet files.

A serving leader on a real ZooKeeper (blobs on local disk) takes ``--appends`` Arrow appends of
``--rows`` rows each to ``mz_catalog.mz_tables`` (default 100 x 100,000: 10M rows). Then, each
the best of ``--repeat`` rounds taken in turns:

* ``GET /read`` with ``Accept: application/vnd.apache.arrow.stream``, the stream read whole by
  the client (``pyarrow.ipc``);
* ``GET /read`` in NDJSON (one round: it is the slow one), the lines counted by the client;
* the plain read: ``pyarrow.parquet.read_table`` of the shard's Parquet files in this process.

Targets (issue 37): Arrow >= 5M rows/s, NDJSON >= 500k rows/s. Prints one JSON object and
writes it to ``benchmarks/results/reads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import provenance
from catalog.release import load_release
from catalog_client import SidecarClient
from orchestrator.logs import configure_logging
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results" / "reads.json"
RELEASE = Path(__file__).resolve().parents[1] / "scenarios" / "releases" / "v0_10_0.py"
COLLECTION = "mz_catalog.mz_tables"
SCHEMA = load_release(RELEASE).builtin(COLLECTION).schema  # type: ignore[union-attr]


def rows(first: int, count: int) -> pa.Table:
    numbers = pa.array(range(first, first + count), pa.uint32())
    text = pa.compute.cast(numbers, pa.string())
    return pa.Table.from_arrays(
        [
            pa.compute.binary_join_element_wise("t", text, ""),
            numbers,
            pa.array(["u3"] * count),
            pa.compute.binary_join_element_wise("table-", text, ""),
            pa.array(["u1"] * count),
            pa.nulls(count, SCHEMA.field("privileges").type),
            pa.nulls(count, pa.string()),
        ],
        schema=SCHEMA,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    configure_logging("WARNING")
    total = args.appends * args.rows
    with tempfile.TemporaryDirectory(prefix="reads-") as tmp:
        work = Path(tmp)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        sidecar = SidecarProcess.start(
            zk=zookeeper.hosts, env=f"reads-{os.getpid()}", name="bench", version="0.10.0",
            release_file=RELEASE, deploy_generation=1, log_path=work / "sidecar.log",
            blob=work / "blob", auto_promote=True, log_level="WARNING",
            extra=("--http-max-body", str(256 * 1024 * 1024)),
        )  # fmt: skip
        try:
            sidecar.wait_serving(zookeeper.hosts)
            client = SidecarClient(f"http://{sidecar.http}", timeout=600, retry_deadline=120)
            shard = client.append(COLLECTION, rows(0, args.rows)).shard_id  # waits until serving
            began = time.perf_counter()
            for n in range(1, args.appends):
                client.append(COLLECTION, rows(n * args.rows, args.rows))
            loaded = time.perf_counter() - began
            files = sorted(str(p) for p in (work / "blob").rglob(f"*{shard}*/**/*.parquet"))

            def arrow() -> int:
                return int(client.read(COLLECTION).num_rows)

            def ndjson() -> int:
                # The JSON lines as they stream, counted but not parsed: the sidecar's rate.
                count = 0
                with client.stream("GET", f"/read?collection={COLLECTION}") as answer:
                    while chunk := answer.read(1 << 20):
                        count += chunk.count(b"\n")
                return count

            def plain() -> int:
                return sum(pq.read_table(f).num_rows for f in files)

            best = {"arrow": float("inf"), "plain": float("inf")}
            for _ in range(args.repeat):
                for name, run in (("arrow", arrow), ("plain", plain)):
                    started = time.perf_counter()
                    assert (name, run()) == (name, total)
                    best[name] = min(best[name], time.perf_counter() - started)
            started = time.perf_counter()
            assert ndjson() == total
            best["ndjson"] = time.perf_counter() - started
        finally:
            sidecar.terminate()
            sidecar.wait_exit(10)
            zookeeper.stop()
    result: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "rows": total,
        "files": len(files),
        "arrow_appends_rows_per_s": round((total - args.rows) / loaded),
        "seconds": {name: round(seconds, 3) for name, seconds in best.items()},
        "rows_per_s": {name: round(total / seconds) for name, seconds in best.items()},
        "arrow_of_plain": round(best["arrow"] / best["plain"], 2),
    }
    result = provenance.record(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
