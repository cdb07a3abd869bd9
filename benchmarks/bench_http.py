"""The sidecar's HTTP server under a crowd: 500 idle connections plus 500 slowloris ones (a header
line a second, never the end), against a real serving leader on a real ZooKeeper.

Measures, quiet and then under the crowd:

* ``healthz_ms``: ``GET /healthz`` on a fresh connection each (as a kubelet probes), p50/p99/max;
* ``append_ms``: an authenticated one-row ``POST /append`` on a fresh connection each;
* ``peak_threads`` and ``peak_rss_mib`` of the sidecar process (sampled every 50 ms).

Target (issue 27): under the crowd, /healthz and the append answer within 100 ms, and threads and
memory stay bounded. JSON on stdout and in ``benchmarks/results/http.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import provenance
from catalog_client import Answer
from orchestrator.logs import configure_logging
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.procstat import Peaks, rss_kib, thread_count
from orchestrator.testing.slowclients import SlowClients
from orchestrator.testing.zkserver import EmbeddedZooKeeper

RESULTS = Path(__file__).resolve().parent / "results"
RELEASE = Path(__file__).resolve().parents[1] / "scenarios" / "releases" / "v0_10_0.py"
COLLECTION = "mz_catalog.mz_tables"


def timed(calls: int, call: Callable[[int], Answer]) -> dict[str, float]:
    """``calls`` calls, one after another; their latency in ms (each must answer 200)."""
    seconds = []
    for n in range(calls):
        started = time.perf_counter()
        answer = call(n)
        seconds.append(time.perf_counter() - started)
        if answer.status != 200:
            raise AssertionError(f"call {n} answered {answer.status}: {answer.body[:500]!r}")
        time.sleep(0.01)
    ms = sorted(s * 1000 for s in seconds)
    return {
        "p50": round(statistics.median(ms), 2),
        "p99": round(ms[max(0, round(len(ms) * 0.99) - 1)], 2),
        "max": round(ms[-1], 2),
    }


def measure(sidecar: SidecarProcess, probes: int, appends: int, offset: int) -> dict[str, Any]:
    def healthz(_n: int) -> Answer:
        return sidecar.request("GET", "/healthz", timeout=10)

    def append(n: int) -> Answer:
        row = {"id": f"b{offset + n}", "oid": 900000 + offset + n, "schema_id": "u3",
               "name": f"bench{offset + n}", "owner_id": "u1"}  # fmt: skip
        return sidecar.request(
            "POST",
            f"/append?collection={COLLECTION}",
            json.dumps(row).encode() + b"\n",
            timeout=10,
            headers={"Content-Type": "application/x-ndjson"},
        )

    return {"healthz_ms": timed(probes, healthz), "append_ms": timed(appends, append)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--appends", type=int, default=100)
    args = parser.parse_args()
    configure_logging("WARNING")  # stdout carries only the JSON result
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        token = work / "token"
        token.write_text("bench-token-0123456789abcdef\n")
        token.chmod(0o600)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        sidecar = SidecarProcess.start(
            zk=zookeeper.hosts, env=f"http-{os.getpid()}", name="bench", version="0.10.0",
            release_file=RELEASE, deploy_generation=1, log_path=work / "sidecar.log",
            blob=work / "blob", auto_promote=True, log_level="WARNING", http_token_file=token,
            extra=["--http-header-timeout", "600", "--http-idle-timeout", "600"],
        )  # fmt: skip
        try:
            sidecar.wait_serving(zookeeper.hosts)
            measure(sidecar, 20, 20, 0)  # warm up
            threads, rss = thread_count(sidecar.pid), rss_kib(sidecar.pid)
            quiet = measure(sidecar, args.probes, args.appends, 1000)
            host, _, port = sidecar.http.rpartition(":")
            with (
                Peaks(sidecar.pid) as peaks,
                SlowClients(host, int(port), idle=args.idle, slow=args.slow) as crowd,
            ):
                time.sleep(2)
                crowded = measure(sidecar, args.probes, args.appends, 2000)
                held = crowd.outcomes()
        finally:
            sidecar.terminate()
            sidecar.wait_exit(10)
            zookeeper.stop()
    result = {
        "idle_connections": args.idle,
        "slow_connections": args.slow,
        "crowd_still_open": sum(c["open"] for c in held.values()),
        "cpu_count": os.cpu_count(),
        "quiet": quiet,
        "crowd": crowded,
        "threads_before": threads,
        "peak_threads": peaks.threads,
        "rss_mib_before": round(rss / 1024, 1),
        "peak_rss_mib": round(peaks.rss_kib / 1024, 1),
    }
    result = provenance.record(RESULTS / "http.json", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
