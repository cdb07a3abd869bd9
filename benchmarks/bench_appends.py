"""Acknowledged appends per second against a real sidecar (a serving leader on a real ZooKeeper,
blobs on local disk), each client on its own keep-alive connection, each append with its own
``Idempotency-Key``:

* NDJSON, one row an append: 1, 4, 16 and 64 clients;
* NDJSON, 1,000, 4,000 and 10,000 rows an append: 4 clients (the cost is per append);
* Arrow IPC, 10,000 rows an append: 4 clients; and one row an append: 16 clients.

Reports per level ``format``, ``clients``, ``rows_per_append``, ``appends_per_s``,
``rows_per_s``, ``p50_ms``/``p99_ms``, the sidecar's commits (``commits_per_s``, appends
per commit from ``catalog_upgrade_append_group_size``), where an append's time goes in the
sidecar (``step_ms``: the mean of each step of ``catalog_upgrade_append_seconds``: parse and
queue per append, write and commit per commit) and the CPU used, in CPU seconds per second
(from ``/proc``): the sidecar's (``sidecar_cores``), the ZooKeeper server's
(``zookeeper_cores``), this script's clients' (``clients_cores``) and the whole machine's
(``machine_cores``, of ``cpu_count``). In the same run it measures
what the same ZooKeeper server takes from one kazoo client: synchronous check-and-set multis per
second (``zookeeper_multis_per_s``, each a check and a set of one znode, as a commit's multi is
at least), and each level's commits as a fraction of it. Targets (issue 37): Arrow 4 x 10,000
rows >= 1M rows/s; NDJSON 4 x 1,000 rows >= 400k rows/s; 1-row appends at 16 clients >= 2,000/s
with p99 < 50 ms. JSON on stdout and in ``benchmarks/results/appends.json`` under ``--label``
(the file holds only what this script writes). ``--store s3`` keeps the blobs on a real S3
server (SeaweedFS, started here) instead of the local disk. ``BENCH_EXTRA`` in the environment
adds sidecar flags (e.g. ``--http-workers 8``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from kazoo.client import KazooClient

import provenance
from catalog.release import load_release
from catalog_client import SidecarClient, SidecarError
from orchestrator.logs import configure_logging
from orchestrator.testing.harness import SidecarProcess, metric_samples
from orchestrator.testing.procstat import busy_seconds, cpu_seconds
from orchestrator.testing.s3server import EmbeddedS3
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results"
RELEASE = Path(__file__).resolve().parents[1] / "scenarios" / "releases" / "v0_10_0.py"
COLLECTION = "mz_catalog.mz_tables"
SCHEMA = load_release(RELEASE).builtin(COLLECTION).schema  # type: ignore[union-attr]


def row(client: int, n: int, i: int = 0) -> dict[str, Any]:
    ident = f"c{client}-{n}-{i}"
    return {"id": ident, "oid": n, "schema_id": "u3", "name": ident, "owner_id": "u1"}


STEPS = ("parse", "queue", "write", "commit")


def append_metrics(url: str, token: str) -> dict[str, float]:
    """The sidecar's ``/metrics`` samples so far, by series."""
    return metric_samples(SidecarClient(url, token=token, timeout=10).metrics())


def body_of(fmt: str, client: int, n: int, rows: int) -> bytes:
    """One append's body: ``rows`` rows as JSON lines or as an Arrow IPC stream."""
    values = [row(client, n, i) for i in range(rows)]
    if fmt == "ndjson":
        return "".join(json.dumps(v) + "\n" for v in values).encode()
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(pa.Table.from_pylist(values, schema=SCHEMA))
    return sink.getvalue()


CONTENT_TYPES = {"ndjson": "application/x-ndjson", "arrow": "application/vnd.apache.arrow.stream"}


def run_level(
    url: str,
    fmt: str,
    clients: int,
    seconds: float,
    rows_per_append: int,
    token: str,
    pid: int | None = None,
    zookeeper_pid: int | None = None,
) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    stop = threading.Event()
    start = threading.Barrier(clients + 1)
    # Bodies are made before the clock starts: the benchmark measures the sidecar, not the
    # client's serialization (each client cycles through its own, under fresh keys).
    bodies = [[body_of(fmt, c, n, rows_per_append) for n in range(8)] for c in range(clients)]

    def client(c: int) -> None:
        # One keep-alive connection per thread, and no retry: a refusal is counted, not hidden.
        sidecar = SidecarClient(url, token=token, retry_deadline=0)
        start.wait()
        n = 0
        while not stop.is_set():
            n += 1
            body = bodies[c][n % len(bodies[c])]
            key = f"bench-{fmt}-{clients}-{rows_per_append}-{c}-{n}"
            began = time.perf_counter()
            try:
                sidecar.append_body(COLLECTION, body, CONTENT_TYPES[fmt], key=key)
            except SidecarError as exc:
                errors.append(f"{exc.status} {exc.code}")
                continue
            latencies[c].append(time.perf_counter() - began)

    before = append_metrics(url, token)
    watched = {"sidecar": pid, "zookeeper": zookeeper_pid, "clients": os.getpid()}
    processes = {name: p for name, p in watched.items() if p is not None}
    cpu_before = {name: cpu_seconds(p) for name, p in processes.items()}
    busy_before = busy_seconds()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    every = sorted(ms * 1000 for per in latencies for ms in per)
    done = len(every)
    cpu_after = {name: cpu_seconds(processes[name]) for name in cpu_before}
    busy = busy_seconds() - busy_before
    after = append_metrics(url, token)

    def delta(series: str) -> float:
        return after.get(series, 0.0) - before.get(series, 0.0)

    commits = delta("catalog_upgrade_append_group_size_count")
    steps = {}
    for step in STEPS:
        count = delta(f'catalog_upgrade_append_seconds_count{{step="{step}"}}')
        total = delta(f'catalog_upgrade_append_seconds_sum{{step="{step}"}}')
        steps[step] = round(total / count * 1000, 2) if count else None
    cores = {name: round((cpu_after[name] - cpu_before[name]) / elapsed, 2) for name in cpu_before}
    return {
        "format": fmt,
        "clients": clients,
        "rows_per_append": rows_per_append,
        "appends": done,
        "appends_per_s": round(done / elapsed, 1),
        "rows_per_s": round(done * rows_per_append / elapsed, 1),
        "p50_ms": round(statistics.median(every), 2) if every else None,
        "p99_ms": round(every[max(0, round(done * 0.99) - 1)], 2) if every else None,
        "commits": int(commits),
        "commits_per_s": round(commits / elapsed, 1),
        "appends_per_commit": round(delta("catalog_upgrade_append_group_size_sum") / commits, 2)
        if commits
        else None,
        "step_ms": steps,
        "sidecar_cores": cores.get("sidecar"),
        "zookeeper_cores": cores.get("zookeeper"),
        "clients_cores": cores["clients"],
        "machine_cores": round(busy / elapsed, 2),
        "errors": len(errors),
    }


def zookeeper_multis_per_s(hosts: str, seconds: float) -> float:
    """Synchronous check-and-set multis per second from one kazoo client on ``hosts``: each a
    version check and a set of one znode, answered before the next is sent."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    try:
        path = f"/bench-multis-{os.getpid()}"
        client.create(path, b"0")
        version, done = 0, 0
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            transaction = client.transaction()
            transaction.check(path, version)
            transaction.set_data(path, str(done).encode(), version)
            results = transaction.commit()
            assert not any(isinstance(r, Exception) for r in results), results
            version += 1
            done += 1
        rate = done / (time.perf_counter() - began)
        client.delete(path)
        return round(rate, 1)
    finally:
        client.stop()
        client.close()


#: (format, clients, rows per append) of each level after the warm-up.
LEVELS = [
    *(("ndjson", c, 1) for c in (1, 4, 16, 64)),
    *(("ndjson", 4, r) for r in (1000, 4000, 10_000)),  # the cost is per append: batch rows
    ("arrow", 4, 10_000),
    ("arrow", 16, 1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="per level")
    parser.add_argument("--label", default="current")
    parser.add_argument("--store", choices=("local", "s3"), default="local", help="the blobs'")
    args = parser.parse_args()
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        blob: Path | str = work / "blob"
        if args.store == "s3":
            s3 = stack.enter_context(EmbeddedS3(work / "s3").start())
            s3.create_bucket("bench-appends")
            os.environ.update(s3.credentials.environment())  # the sidecar's AWS chain
            blob = s3.blob_uri("bench-appends", "env")
        token_file = work / "token"
        token = "bench-token-0123456789abcdef"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        sidecar = SidecarProcess.start(
            zk=zookeeper.hosts, env=f"appends-{os.getpid()}", name="bench", version="0.10.0",
            release_file=RELEASE, deploy_generation=1, log_path=work / "sidecar.log",
            blob=blob, auto_promote=True, log_level="WARNING",
            http_token_file=token_file, extra=tuple(os.environ.get("BENCH_EXTRA", "").split()),
        )  # fmt: skip
        try:
            sidecar.wait_serving(zookeeper.hosts)
            url = f"http://{sidecar.http}"
            run_level(url, "ndjson", 2, 2.0, 1, token)  # warm up
            multis = zookeeper_multis_per_s(zookeeper.hosts, args.seconds)
            results = []
            for fmt, clients, rows in LEVELS:
                level = run_level(
                    url, fmt, clients, args.seconds, rows, token, sidecar.pid, zookeeper.pid
                )
                level["commits_of_zookeeper_multis"] = round(level["commits_per_s"] / multis, 3)
                results.append(level)
                print(json.dumps(level), flush=True)
        finally:
            sidecar.terminate()
            sidecar.wait_exit(10)
            zookeeper.stop()
    entry = provenance.record_labelled(RESULTS / "appends.json", args.label, {
        "cpu_count": os.cpu_count(),
        "store": args.store,
        "seconds_per_level": args.seconds,
        "zookeeper_multis_per_s": multis,
        "levels": results,
    })
    print(json.dumps({args.label: entry}))


if __name__ == "__main__":
    main()
