"""Benchmark: shard append throughput, and snapshot cost against a plain Parquet read.

Appends ``--batches`` batches of ``--rows`` rows (default 100 x 100,000) to one shard on a real
ZooKeeper, with real Parquet files in a temporary blob directory, evolving the schema twice on
the way (after a third of the batches a nullable ``comment`` column is added, after two thirds
``owner_id`` is deleted). Every batch inserts 90% new rows and retracts 10% of the previous
batch's rows, so consolidation has real work: by default its first rows (a block, so the rows
that survive form long ranges that consolidation slices instead of copying), with
``--scattered`` a random sample of them in random order (every surviving row is copied: the
harder case). Then it times:

* ``Shard.snapshot()``: read every batch, migrate it lazily to the latest schema, consolidate;
* a plain ``pyarrow.parquet.read_table`` of the same files (one call per schema, as the
  snapshot reads them), in the same run;
* the same read verifying page checksums, as the shard's blob store reads (what a snapshot
  costs before it consolidates anything).

It also builds the same history with the last evolution widening two types (``oid`` uint32 to
int64, ``name`` string to large_string) and renaming one field (``size`` to ``bytes``): two
thirds of the batches are cast and read under the new name when read. It times that snapshot
against the first one's (target: at most 1.2x).

The plain read and the snapshot are timed again after :data:`IDLE_SECONDS` idle before each
run (``cold_*``), and so is filling 1 GiB of fresh memory (``first_touch_gib_*``): on a VM
whose balloon reports free pages to the host, memory a process freed a second ago is the
host's again and costs many times more to touch, and a snapshot allocates more than a plain
read does.

Then it advances ``since`` to the last time, compacts (one consolidated batch remains) and times
the snapshot against a plain read of the compacted file.

Target: the snapshot costs at most 1.15x the plain read. Each timing is the best of ``--repeat``
rounds (files are in the page cache for both). ZooKeeper: ``CATALOG_UPGRADE_ZK`` if set, else an
embedded server in a temporary directory.

Prints one JSON object and writes it to ``benchmarks/results/shard_io.json`` (with
``--scattered``: ``shard_io_scattered.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from kazoo.client import KazooClient

import provenance
from catalog.blob import BlobStore
from catalog.consensus import Consensus, env_root
from catalog.environment import CONTAINER_KEYS
from catalog.schema import renamed
from catalog.shard import DIFF, TS, Shard, consolidate, new_shard_id, update_schema
from orchestrator.logs import configure_logging
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results" / "shard_io.json"
RESULTS_SCATTERED = RESULTS.with_name("shard_io_scattered.json")
RETRACTED = 0.1
IDLE_SECONDS = 2.0

S0 = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("oid", pa.uint32(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("owner_id", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("created_at", pa.timestamp("ms", tz="UTC")),
    ]
)
S1 = pa.schema([*S0, pa.field("comment", pa.string())])
S2 = pa.schema([f for f in S1 if f.name != "owner_id"])
# The same last evolution widening and renaming too (catalog.schema.lossless and .ids): oid
# uint32 -> int64, name string -> large_string, size renamed bytes. Two thirds of the batches
# are then cast and read under the new name, through field ids.
S2_WIDE = pa.schema(
    [
        f.with_type(pa.int64()) if f.name == "oid"
        else f.with_type(pa.large_string()) if f.name == "name"
        else renamed(pa.field("bytes", f.type), "size") if f.name == "size" else f
        for f in S2
    ]
)  # fmt: skip


def _numbers(first: int, count: int) -> pa.Array:
    return pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count)), first - 1)


def _columns(schema: pa.Schema, numbers: pa.Array) -> dict[str, pa.Array]:
    """The synthetic collection's rows ``numbers``; a row is a function of its number, so a
    later batch can retract an earlier row exactly."""
    count = len(numbers)
    text = pc.cast(numbers, pa.string())
    values = {
        "id": pc.binary_join_element_wise("u", text, ""),
        "oid": pc.cast(pc.bit_wise_and(numbers, 0xFFFFFFF), pa.uint32()),
        "name": pc.binary_join_element_wise("object_", text, ""),
        "owner_id": pc.binary_join_element_wise(
            "u", pc.cast(pc.bit_wise_and(numbers, 63), pa.string()), ""
        ),
        "size": pc.multiply(numbers, 7),
        "bytes": pc.multiply(numbers, 7),  # size, renamed
        "created_at": pc.cast(pc.add(numbers, 1_700_000_000_000), pa.timestamp("ms", tz="UTC")),
        "comment": pa.nulls(count, pa.string()),
    }
    return {f.name: values[f.name].cast(f.type) for f in schema}


def batch(schema: pa.Schema, index: int, rows: int, scattered: bool = False) -> pa.Table:
    """Batch ``index``: new rows, plus retractions of rows the previous batch inserted: its
    first ones (a block), or with ``scattered`` a random sample of them in random order."""
    retracted = int(rows * RETRACTED) if index else 0
    inserted = rows - retracted
    parts = [(_numbers(index * rows, inserted), 1)]
    if retracted:
        first = (index - 1) * rows
        if scattered:
            previous = rows - (int(rows * RETRACTED) if index > 1 else 0)
            chosen = np.random.default_rng(index).choice(previous, retracted, replace=False)
            parts.append((pa.array(chosen + first, pa.int64()), -1))
        else:
            parts.append((_numbers(first, retracted), -1))
    tables = []
    for numbers, diff in parts:
        columns = _columns(schema, numbers)
        columns[TS] = pa.repeat(pa.scalar(index, pa.uint64()), len(numbers))
        columns[DIFF] = pa.repeat(pa.scalar(diff, pa.int64()), len(numbers))
        tables.append(pa.Table.from_pydict(columns, schema=update_schema(schema)))
    return pa.concat_tables(tables)


@contextlib.contextmanager
def zookeeper(data_dir: Path) -> Iterator[tuple[str, str]]:
    hosts = os.environ.get("CATALOG_UPGRADE_ZK")
    if hosts:
        yield hosts, "env"
        return
    with EmbeddedZooKeeper(data_dir=data_dir) as server:
        yield server.hosts, "embedded"


def first_touch(size: int = 1 << 30) -> tuple[float, float]:
    """Seconds to fill ``size`` fresh bytes right after the same amount was freed (warm), and
    after :data:`IDLE_SECONDS` idle (cold: a balloon may have handed the pages back)."""
    times = []
    for idle in (0.0, IDLE_SECONDS):
        np.ones(size // 8, dtype=np.int64)  # touched, then freed
        time.sleep(idle)
        started = time.perf_counter()
        np.ones(size // 8, dtype=np.int64)
        times.append(time.perf_counter() - started)
    return times[0], times[1]


def best_of(repeat: int, *runs: Any, idle: float = 0.0) -> list[tuple[float, Any]]:
    """The best time of each of ``runs`` over ``repeat`` rounds, and its last result.

    The contenders take turns within each round, so drift of the machine (page cache, other
    load) hits them alike, and a result is dropped before its next run, so no run pays for
    the memory of the one before. ``idle``: seconds to wait before each run.
    """
    best = [float("inf")] * len(runs)
    results: list[Any] = [None] * len(runs)
    for _ in range(repeat):
        for index, run in enumerate(runs):
            results[index] = None
            time.sleep(idle)
            started = time.perf_counter()
            results[index] = run()
            best[index] = min(best[index], time.perf_counter() - started)
    return list(zip(best, results, strict=True))


def _filled(
    consensus: Consensus,
    blob: BlobStore,
    batches: int,
    rows: int,
    scattered: bool,
    last: pa.Schema,
) -> tuple[Shard, float, int]:
    """A shard of ``batches`` batches evolving S0 -> S1 -> ``last``; the append time and bytes."""
    shard = Shard(consensus, blob, new_shard_id())
    shard.create(S0)
    schemas = {0: S0, batches // 3: S1, (2 * batches) // 3: last}
    schema, append_seconds, data_bytes = S0, 0.0, 0
    for index in range(batches):
        if index in schemas and index:
            schema = schemas[index]
            assert shard.compare_and_evolve_schema(shard.state().schema_id, schema).ok
        data = batch(schema, index, rows, scattered)
        data_bytes += data.nbytes
        started = time.perf_counter()
        result = shard.compare_and_append(data, index, index + 1)
        append_seconds += time.perf_counter() - started
        assert result.ok
    return shard, append_seconds, data_bytes


def run(batches: int, rows: int, repeat: int, work: Path, scattered: bool) -> dict[str, Any]:
    with zookeeper(work / "zookeeper") as (hosts, zk_kind):
        client = KazooClient(hosts=hosts, timeout=15)
        client.start(timeout=30)
        try:
            consensus = Consensus(client, env_root(f"bench-shard-io-{os.getpid()}"))
            consensus.ensure(*CONTAINER_KEYS)
            blob = BlobStore.from_uri(str(work / "blobs"))
            shard, append_seconds, data_bytes = _filled(
                consensus, blob, batches, rows, scattered, S2
            )
            widened, _, _ = _filled(consensus, blob, batches, rows, scattered, S2_WIDE)
            state = shard.state()
            groups: dict[int, list[str]] = {}
            for ref in shard.batches(state):
                groups.setdefault(ref.schema_id, []).append(blob.path(ref.key(shard.shard_id)))

            def read_files(**options: Any) -> int:
                total = 0
                for paths in groups.values():
                    total += pq.read_table(paths, filesystem=blob.filesystem, **options).num_rows
                return total

            def plain_read() -> int:
                return read_files()

            def verified_read() -> int:
                """The read verifying page checksums, as the shard's blob store reads: what a
                snapshot costs before it consolidates anything."""
                return read_files(page_checksum_verification=True, pre_buffer=True)

            plain_read()  # warm the page cache for both contenders
            (
                (plain_seconds, plain_rows),
                (verified_seconds, _),
                (snapshot_seconds, snap),
                (widened_seconds, wide),
            ) = best_of(repeat, plain_read, verified_read, shard.snapshot, widened.snapshot)
            assert wide.num_rows == snap.num_rows and wide.schema.field("oid").type == pa.int64()
            del wide, snap
            # Cold memory: on a VM whose balloon reports free pages, memory freed a second ago
            # is the host's again, and touching it costs many times more (first_touch below).
            (cold_plain_seconds, _), (cold_snapshot_seconds, snap) = best_of(
                repeat, plain_read, shard.snapshot, idle=IDLE_SECONDS
            )
            warm_touch, cold_touch = first_touch()
            expected_rows = batches * rows - (batches - 1) * 2 * int(rows * RETRACTED)
            assert snap.num_rows == expected_rows, (snap.num_rows, expected_rows)
            assert snap.schema.names == [*S2.names, TS, DIFF]
            snapshot_rows = snap.num_rows
            merged = pa.concat_tables(
                [pq.read_table(paths, filesystem=blob.filesystem) for paths in groups.values()],
                promote_options="permissive",
            ).drop_columns(["owner_id"])
            del snap
            ((consolidate_seconds, _),) = best_of(repeat, lambda: consolidate(merged))
            stored = sum(i.size for i in blob.list_info(f"shards/{shard.shard_id}"))
            # Compaction amortizes consolidation: since at the last time, one batch remains.
            shard.advance_since(state.upper - 1)
            started = time.perf_counter()
            compaction = shard.compact()
            compact_seconds = time.perf_counter() - started
            assert compaction.output is not None
            compacted = blob.path(compaction.output.key(shard.shard_id))
            pq.read_table(compacted, filesystem=blob.filesystem)
            (plain_compacted_seconds, _), (compacted_seconds, after) = best_of(
                repeat, lambda: pq.read_table(compacted, filesystem=blob.filesystem), shard.snapshot
            )
            assert after.num_rows == expected_rows
            consensus.delete_tree("")
        finally:
            client.stop()
            client.close()
    total_rows = batches * rows
    return {
        "benchmark": "shard_io",
        "batches": batches,
        "rows_per_batch": rows,
        "rows": total_rows,
        "evolutions": 2,
        "retractions": "scattered" if scattered else "block",
        "rounds": repeat,
        "append_seconds": round(append_seconds, 3),
        "append_rows_per_second": round(total_rows / append_seconds),
        "append_mb_per_second": round(data_bytes / append_seconds / 1e6, 1),
        "append_ms_per_batch": round(1000 * append_seconds / batches, 2),
        "plain_read_seconds": round(plain_seconds, 3),
        "plain_read_rows": plain_rows,
        "verified_read_seconds": round(verified_seconds, 3),
        "verified_read_to_plain_read_ratio": round(verified_seconds / plain_seconds, 2),
        "snapshot_seconds": round(snapshot_seconds, 3),
        "snapshot_rows": snapshot_rows,
        "snapshot_to_plain_read_ratio": round(snapshot_seconds / plain_seconds, 2),
        "target_ratio": 1.15,
        "cold_plain_read_seconds": round(cold_plain_seconds, 3),
        "cold_snapshot_seconds": round(cold_snapshot_seconds, 3),
        "cold_snapshot_to_plain_read_ratio": round(cold_snapshot_seconds / cold_plain_seconds, 2),
        "first_touch_gib_warm_seconds": round(warm_touch, 3),
        "first_touch_gib_cold_seconds": round(cold_touch, 3),
        "widened_snapshot_seconds": round(widened_seconds, 3),
        "widened_to_snapshot_ratio": round(widened_seconds / snapshot_seconds, 2),
        "widened_target_ratio": 1.2,
        "consolidate_only_seconds": round(consolidate_seconds, 3),
        "compact_seconds": round(compact_seconds, 3),
        "compacted_plain_read_seconds": round(plain_compacted_seconds, 3),
        "compacted_snapshot_seconds": round(compacted_seconds, 3),
        "compacted_snapshot_to_plain_read_ratio": round(
            compacted_seconds / plain_compacted_seconds, 2
        ),
        "parquet_bytes": stored,
        "shard_state_bytes": len(state.encode()),
        "zookeeper": zk_kind,
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "cpus": os.cpu_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows", type=int, default=100_000)
    # Best of 9 rounds: of 5, the ratios of two runs in a row differed by a third
    # (snapshot against a plain read 1.48 and 1.8) on the 2-core machine of the figures.
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--scattered",
        action="store_true",
        help="retract a random sample of the previous batch's rows instead of its first ones",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.batches < 3 or args.rows < 10:
        parser.error("need at least 3 batches (two evolutions) of at least 10 rows")
    configure_logging("WARNING")  # stdout carries only the JSON result
    with tempfile.TemporaryDirectory(prefix="shard-io-") as work:
        result = run(args.batches, args.rows, args.repeat, Path(work), args.scattered)
    output = args.output or (RESULTS_SCATTERED if args.scattered else RESULTS)
    result = provenance.record(output, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
