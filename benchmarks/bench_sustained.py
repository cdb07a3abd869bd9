"""Reads during sustained appends, through a real serving sidecar: what an hour of writes does to
a read.

A serving leader on a real ZooKeeper (blobs on local disk) holds ``mz_catalog.mz_tables`` with
``--small-rows`` rows (1,000) and ``mz_catalog.mz_roles`` with ``--large-rows`` (100,000).
First, idle: ``--idle-reads`` Arrow reads of the small collection, timed, next to pyarrow
reading the shard's Parquet files in this process, and the ZooKeeper writes each read makes
(the server's zxid before and after, less the process's own heartbeats over the same time).

Then, for each count of ``--writers`` (4, then 16), ``--minutes`` minutes of: that many clients
appending one row each in a loop to ``mz_catalog.mz_views`` (the *written* collection), one
client appending NDJSON bodies of ``--ndjson-rows`` rows to a fourth collection, and one reader,
a process of its own, reading the small, the large and the written collection in turns. The
small and large reads keep their size, so their figures are a read of 1,000 and 100,000 rows in
a process under that load; the written collection grows (each minute records its rows), so its
read measures what its history costs: the batches piling up under it. Every ``--interval``
seconds (a minute) it records the reads' p50 and p99, the most batches each shard listed (its
state in ZooKeeper): the live ones, which the merges bound and the cap counts, and all of them,
settled ones included (one per million rows at most), the merge lag (``/metrics``) and the
appends per second.
Prints one JSON object and writes it to ``benchmarks/results/sustained.json``; the targets are in
``benchmarks/targets.py``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from kazoo.client import KazooClient

import provenance
from bench_reads import rows as small_rows  # the same mz_tables rows, numbered
from catalog.blob import BlobStore
from catalog.consensus import Consensus, env_root
from catalog.environment import read_catalog
from catalog.shard import Shard
from catalog.shard.merges import live_batches
from catalog_client import SidecarClient
from orchestrator.logs import configure_logging
from orchestrator.testing.harness import SidecarProcess, metric_samples
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results" / "sustained.json"
RELEASE = Path(__file__).resolve().parents[1] / "scenarios" / "releases" / "v0_10_0.py"
SMALL, LARGE = "mz_catalog.mz_tables", "mz_catalog.mz_roles"
#: What the one-row writers append to: it grows all along.
WRITTEN = "mz_catalog.mz_views"
#: Every collection the reader reads, by its name in the results.
READ = {"small": SMALL, "large": LARGE, "written": WRITTEN}
#: What the NDJSON writer appends to: its own collection, so the large read stays its size.
BULK = "mz_catalog.mz_databases"
#: Every collection whose batches are counted each minute: the read ones, and the bulk one
#: (not read, but its batches are what a read of it would open).
LISTED = {**READ, "bulk": BULK}


def large_lines(first: int, count: int) -> bytes:
    return b"".join(
        json.dumps({"id": n, "oid": n % 4_000_000_000, "name": f"role-{n}",
                    "inherit": bool(n % 2)}).encode() + b"\n"
        for n in range(first, first + count)
    )  # fmt: skip


def bulk_lines(first: int, count: int) -> bytes:
    return b"".join(
        json.dumps({"id": f"u{n}", "oid": n % 4_000_000_000, "name": f"db-{n}",
                    "owner_id": "u1"}).encode() + b"\n"
        for n in range(first, first + count)
    )  # fmt: skip


def view_line(n: int) -> bytes:
    return json.dumps({"id": f"u{n}", "oid": n % 4_000_000_000, "schema_id": "u3",
                       "name": f"view-{n}", "definition": f"SELECT {n}",
                       "owner_id": "u1"}).encode() + b"\n"  # fmt: skip


def zxid(zookeeper: EmbeddedZooKeeper) -> int:
    for line in zookeeper.four_letter_word("srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split()[1], 16)
    raise RuntimeError("srvr gave no Zxid")


def percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50_ms": None, "p99_ms": None, "reads": 0}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "reads": len(ordered),
    }


def read_in_turns(url: str, timings: Any, stop: Any) -> None:
    """The reader of a phase, in a process of its own (as a database reading its catalog is):
    the collections in turns, each read's (collection, seconds, rows) put on ``timings``."""
    client = SidecarClient(url, timeout=120, retry_deadline=60)
    while not stop.is_set():
        for collection in READ.values():
            started = time.perf_counter()
            read = client.read(collection).num_rows
            timings.put((collection, time.perf_counter() - started, read))


class Load:
    """The writers of one phase on threads, its reader in a process; counters read by the
    sampler."""

    def __init__(self, url: str, writers: int, ndjson_rows: int, first: int) -> None:
        self._url = url
        self._writers = writers
        self._ndjson_rows = ndjson_rows
        self._next = first
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.appends = 0
        self.refused = 0
        #: Rows the NDJSON writer appended (its collection is not read).
        self.bulk_rows = 0
        #: Rows the last read of each collection returned (the written one grows).
        self.rows: dict[str, int] = dict.fromkeys(READ.values(), 0)
        self.threads = [
            *(threading.Thread(target=self._one_row, daemon=True) for _ in range(writers)),
            threading.Thread(target=self._ndjson, daemon=True),
        ]
        spawn = multiprocessing.get_context("spawn")
        self._timings = spawn.Queue()
        self._reading = spawn.Event()
        self._reader = spawn.Process(
            target=read_in_turns, args=(url, self._timings, self._reading), daemon=True
        )

    def start(self) -> None:
        self._reader.start()
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        self._reading.set()
        for thread in self.threads:
            thread.join(timeout=120)
        self._reader.join(timeout=120)

    def take(self) -> tuple[int, int, dict[str, list[float]]]:
        """The counts since the last take."""
        reads: dict[str, list[float]] = {name: [] for name in READ.values()}
        while True:
            try:
                collection, seconds, rows = self._timings.get_nowait()
            except queue.Empty:
                break
            reads[collection].append(seconds)
            self.rows[collection] = rows
        with self._lock:
            taken = (self.appends, self.refused, reads)
            self.appends, self.refused = 0, 0
        return taken

    def _number(self, count: int) -> int:
        with self._lock:
            first, self._next = self._next, self._next + count
        return first

    def _one_row(self) -> None:
        client = SidecarClient(self._url, timeout=60, retry_deadline=60)
        while not self.stop.is_set():
            line = view_line(self._number(1))
            client.append_body(WRITTEN, line, content_type="application/x-ndjson")
            with self._lock:
                self.appends += 1

    def _ndjson(self) -> None:
        client = SidecarClient(self._url, timeout=60, retry_deadline=60)
        while not self.stop.is_set():
            body = bulk_lines(self._number(self._ndjson_rows), self._ndjson_rows)
            client.append_body(BULK, body, content_type="application/x-ndjson")
            with self._lock:
                self.appends += 1
                self.bulk_rows += self._ndjson_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per sample")
    parser.add_argument("--writers", default="4,16", help="one-row writers of each phase")
    parser.add_argument("--small-rows", type=int, default=1_000)
    parser.add_argument("--large-rows", type=int, default=100_000)
    parser.add_argument("--ndjson-rows", type=int, default=1_000)
    parser.add_argument("--idle-reads", type=int, default=200)
    args = parser.parse_args()
    configure_logging("WARNING")
    phases = [int(w) for w in args.writers.split(",") if w]
    env = f"sustained-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="sustained-") as tmp:
        work = Path(tmp)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        sidecar = SidecarProcess.start(
            zk=zookeeper.hosts, env=env, name="bench", version="0.10.0", release_file=RELEASE,
            deploy_generation=1, log_path=work / "sidecar.log", blob=work / "blob",
            auto_promote=True, log_level="WARNING",
        )  # fmt: skip
        zk = KazooClient(hosts=zookeeper.hosts)
        zk.start()
        try:
            sidecar.wait_serving(zookeeper.hosts)
            url = f"http://{sidecar.http}"
            client = SidecarClient(url, timeout=600, retry_deadline=120)
            client.append(SMALL, small_rows(0, args.small_rows))
            for first in range(0, args.large_rows, 10_000):
                count = min(10_000, args.large_rows - first)
                client.append_body(LARGE, large_lines(first, count),
                                   content_type="application/x-ndjson")  # fmt: skip
            consensus = Consensus(zk, env_root(env))
            blob = BlobStore.from_uri(str(work / "blob"))
            found = read_catalog(consensus)
            assert found is not None
            refs = found[0].by_name()
            shards = {name: Shard(consensus, blob, refs[name].shard_id) for name in LISTED.values()}
            result: dict[str, Any] = {
                "cpu_count": os.cpu_count(),
                "minutes": args.minutes,
                "interval_seconds": args.interval,
                "idle": idle(zookeeper, client, shards[SMALL], work / "blob", args.idle_reads),
                "phases": [],
            }
            first = 10_000_000
            for writers in phases:
                result["phases"].append(
                    phase(args, url, writers, first, shards, sidecar)
                )
                first += 10_000_000
        finally:
            zk.stop()
            sidecar.terminate()
            sidecar.wait_exit(10)
            zookeeper.stop()
    result = provenance.record(RESULTS, result)
    print(json.dumps(result))


def idle(
    zookeeper: EmbeddedZooKeeper, client: SidecarClient, shard: Shard, root: Path, reads: int
) -> dict[str, Any]:
    """Idle reads of the small collection: latency, against pyarrow, ZooKeeper writes each."""
    files = [root / b.key(shard.shard_id) for b in shard.batches(shard.state())]
    samples, plain = [], []
    for _ in range(5):  # warm both
        client.read(SMALL)
    quiet_before = zxid(zookeeper)
    time.sleep(2.0)
    quiet = (zxid(zookeeper) - quiet_before) / 2.0  # heartbeats and the like, per second
    before, began = zxid(zookeeper), time.perf_counter()
    for _ in range(reads):
        started = time.perf_counter()
        client.read(SMALL)
        samples.append(time.perf_counter() - started)
    spent = time.perf_counter() - began
    writes = max(0.0, zxid(zookeeper) - before - quiet * spent)
    for _ in range(reads):
        started = time.perf_counter()
        pa.concat_tables([pq.read_table(f) for f in files])
        plain.append(time.perf_counter() - started)
    read, direct = percentiles(samples), percentiles(plain)
    return {
        "files": len(files),
        "read": read,
        "pyarrow": direct,
        "read_of_pyarrow": round(read["p50_ms"] / direct["p50_ms"], 2),  # type: ignore[operator]
        "zookeeper_writes_per_read": round(writes / reads, 2),
    }


def phase(
    args: argparse.Namespace,
    url: str,
    writers: int,
    first: int,
    shards: dict[str, Shard],
    sidecar: SidecarProcess,
) -> dict[str, Any]:
    load = Load(url, writers, args.ndjson_rows, first)
    load.start()
    minutes: list[dict[str, Any]] = []
    most = dict.fromkeys(shards, 0)
    listed = dict.fromkeys(shards, 0)
    ended = time.monotonic() + args.minutes * 60
    try:
        while time.monotonic() < ended:
            window_end = min(ended, time.monotonic() + args.interval)
            began = time.monotonic()
            while time.monotonic() < window_end:
                for name, shard in shards.items():
                    state = shard.state()
                    most[name] = max(most[name], live_batches(state))
                    listed[name] = max(listed[name], state.batch_count)
                time.sleep(min(1.0, max(0.0, window_end - time.monotonic())))
            appends, refused, reads = load.take()
            lag = metric_samples(sidecar.request("GET", "/metrics").body.decode())
            minutes.append({
                "minute": len(minutes) + 1,
                **{name: percentiles(reads[collection]) for name, collection in READ.items()},
                "rows": {
                    **{name: load.rows[collection] for name, collection in READ.items()},
                    "bulk": load.bulk_rows,
                },
                "batches": {name: most[collection] for name, collection in LISTED.items()},
                "listed": {name: listed[collection] for name, collection in LISTED.items()},
                "merge_lag_s": max(
                    (v for k, v in lag.items() if k.startswith("catalog_upgrade_merge_lag")),
                    default=0.0,
                ),
                "appends_per_s": round(appends / (time.monotonic() - began), 1),
                "refused": refused,
            })  # fmt: skip
            print(json.dumps({"writers": writers, **minutes[-1]}), flush=True)
            most, listed = dict.fromkeys(shards, 0), dict.fromkeys(shards, 0)
    finally:
        load.join()
    return {"writers": writers, "minutes": minutes}


if __name__ == "__main__":
    main()
