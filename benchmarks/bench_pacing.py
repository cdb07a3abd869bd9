"""What pacing costs a REWRITE copy: the same 5M-row copy on the arrow engine (real ZooKeeper,
real Parquet), without a pacer and with one reporting progress once a second (as the sidecar
does), best of ``--repeat`` each, alternated in one run.

Writes ``benchmarks/results/pacing.json``: rows, the best seconds of each, and the ratio.
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
import pyarrow.compute as pc
from kazoo.client import KazooClient

import provenance
from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.pipeline import copy_transformed
from catalog.pipeline.pacing import Pacer, StepProgress
from catalog.shard import Shard, new_shard_id, with_updates
from orchestrator.logs import configure_logging
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results" / "pacing.json"
SOURCE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
TARGET = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("label", pa.string())])


def to_target(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [batch.column("id"), pc.utf8_upper(batch.column("name"))], schema=TARGET
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows", type=int, default=50_000, help="Rows per source batch.")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    configure_logging("WARNING")
    total = args.batches * args.rows
    with tempfile.TemporaryDirectory(prefix="pacing-") as tmp:
        zookeeper = EmbeddedZooKeeper(data_dir=Path(tmp) / "zk").start()
        client = KazooClient(hosts=zookeeper.hosts)
        client.start(timeout=15)
        try:
            consensus = Consensus(client, "/catalog-upgrade/bench-pacing")
            consensus.ensure()
            blob = BlobStore.from_uri(str(Path(tmp) / "blob"))
            source = Shard(consensus, blob, new_shard_id())
            source.create(SOURCE)
            for n in range(args.batches):
                ids = pa.array(range(n * args.rows, (n + 1) * args.rows), pa.int64())
                table = pa.table({"id": ids, "name": pc.cast(ids, pa.string())}, schema=SOURCE)
                source.compare_and_append(with_updates(table, n, 1), n, n + 1)
            reports: list[StepProgress | None] = []

            def copy(paced: bool) -> float:
                target = Shard(consensus, blob, new_shard_id())
                target.create(TARGET)
                pacer = Pacer(report=reports.append, every=1.0) if paced else None
                started = time.perf_counter()
                if pacer is not None:
                    pacer.begin("rewrite", "bench")
                rows = copy_transformed(source, target, [to_target], TARGET, fence=None,
                                        engine="arrow", pacer=pacer)  # fmt: skip
                if pacer is not None:
                    pacer.end()
                seconds = time.perf_counter() - started
                assert rows == total
                return seconds

            best = {"plain": float("inf"), "paced": float("inf")}
            copy(False)  # warm up
            for _ in range(args.repeat):
                for name in best:
                    best[name] = min(best[name], copy(name == "paced"))
        finally:
            client.stop()
            zookeeper.stop()
    result: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "rows": total,
        "source_batches": args.batches,
        "seconds": {name: round(seconds, 3) for name, seconds in best.items()},
        "rows_per_s": {name: round(total / seconds) for name, seconds in best.items()},
        "paced_of_plain": round(best["paced"] / best["plain"], 3),
    }
    result = provenance.record(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
