"""Acknowledged appends per second against a real sidecar (a serving leader on a real ZooKeeper,
blobs on local disk): 1, 4, 16 and 64 clients, each on its own keep-alive connection, each
append one row with its own ``Idempotency-Key``; then 1,000-row appends.

Reports per level: appends/s, rows/s, p50/p99 latency (ms), and the sidecar's commits with the
appends each carried on average (``catalog_upgrade_append_group_size``; absent before group
commit). Target (issue 25): at 16 clients at least
10x the 73 appends/s measured before group commit, with p99 under 100 ms. JSON on stdout and
in ``benchmarks/results/appends.json`` (``--label`` names the run inside it). ``BENCH_EXTRA``
in the environment adds sidecar flags (e.g. ``--http-workers 8``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator.logs import configure_logging
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results"
RELEASE = Path(__file__).resolve().parents[1] / "scenarios" / "releases" / "v0_10_0.py"
COLLECTION = "mz_catalog.mz_tables"


def row(client: int, n: int, i: int = 0) -> dict[str, Any]:
    ident = f"c{client}-{n}-{i}"
    return {"id": ident, "oid": n, "schema_id": "u3", "name": ident, "owner_id": "u1"}


def group_sizes(host: str, port: int, token: str) -> tuple[float, float]:
    """The sidecar's ``catalog_upgrade_append_group_size`` sum and count so far."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    text = connection.getresponse().read().decode()
    connection.close()
    found = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in found:
            if line.startswith(f"catalog_upgrade_append_group_size_{part} "):
                found[part] = float(line.split()[-1])
    return found["sum"], found["count"]


def run_level(
    host: str, port: int, clients: int, seconds: float, rows_per_append: int, token: str
) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    stop = threading.Event()
    start = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        connection = http.client.HTTPConnection(host, port, timeout=30)
        headers = {
            "Content-Type": "application/x-ndjson",
            "Authorization": f"Bearer {token}",
        }
        start.wait()
        n = 0
        while not stop.is_set():
            n += 1
            body = "".join(json.dumps(row(c, n, i)) + "\n" for i in range(rows_per_append))
            began = time.perf_counter()
            connection.request(
                "POST",
                f"/append?collection={COLLECTION}",
                body=body.encode(),
                headers={
                    **headers,
                    "Idempotency-Key": f"bench-{clients}-{rows_per_append}-{c}-{n}",
                },
            )
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                errors.append(f"{answer.status}")
                continue
            latencies[c].append(time.perf_counter() - began)
        connection.close()

    appends_before, commits_before = group_sizes(host, port, token)
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
    appends_after, commits_after = group_sizes(host, port, token)
    commits = commits_after - commits_before
    return {
        "clients": clients,
        "rows_per_append": rows_per_append,
        "appends": done,
        "appends_per_s": round(done / elapsed, 1),
        "rows_per_s": round(done * rows_per_append / elapsed, 1),
        "p50_ms": round(statistics.median(every), 2) if every else None,
        "p99_ms": round(every[max(0, round(done * 0.99) - 1)], 2) if every else None,
        "commits": int(commits),
        "appends_per_commit": round((appends_after - appends_before) / commits, 2)
        if commits
        else None,
        "errors": len(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="per level")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    configure_logging("WARNING")
    levels = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        token_file = work / "token"
        token = "bench-token-0123456789abcdef"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        sidecar = SidecarProcess.start(
            zk=zookeeper.hosts, env=f"appends-{os.getpid()}", name="bench", version="0.10.0",
            release_file=RELEASE, deploy_generation=1, log_path=work / "sidecar.log",
            blob=work / "blob", auto_promote=True, log_level="WARNING",
            http_token_file=token_file, extra=tuple(os.environ.get("BENCH_EXTRA", "").split()),
        )  # fmt: skip
        try:
            sidecar.wait_ready()
            host, _, port = sidecar.http.rpartition(":")
            run_level(host, int(port), 2, 2.0, 1, token)  # warm up
            results = [
                run_level(host, int(port), clients, args.seconds, 1, token) for clients in levels
            ]
            results.append(run_level(host, int(port), 4, args.seconds, 1000, token))
        finally:
            sidecar.terminate()
            sidecar.wait_exit(10)
            zookeeper.stop()
    out = RESULTS / "appends.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[args.label] = {"cpu_count": os.cpu_count(), "levels": results}
    RESULTS.mkdir(exist_ok=True)
    out.write_text(json.dumps(previous, indent=2) + "\n")
    print(json.dumps({args.label: results}))


if __name__ == "__main__":
    main()
