"""Every benchmark at a tiny size, so that none rots unseen: ``make bench-smoke``, in CI.

Benchmarks are not part of ``make test`` (they want a quiet machine and minutes each), so a
change could break one without a test failing; two had been, found only when run. This runs
each script with arguments that make it take seconds, its results written to a temporary
directory (``BENCH_RESULTS_DIR``, :mod:`provenance`) so the real figures stay. A script that
exits non-zero, or writes no results, fails the run. Figures at these sizes mean nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]

#: Each script, the arguments that make it small, and the results file it writes.
SMOKE: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bench_validate.py", ("--releases", "40", "--builtins", "30"), "validate.json"),
    ("bench_pacing.py", ("--batches", "4", "--rows", "5000", "--repeat", "1"), "pacing.json"),
    ("bench_shard_io.py", ("--batches", "4", "--rows", "5000", "--repeat", "1"),
     "shard_io.json"),
    ("bench_reads.py", ("--appends", "5", "--rows", "5000", "--repeat", "1"), "reads.json"),
    ("bench_http.py", ("--idle", "20", "--slow", "20", "--probes", "20", "--appends", "10"),
     "http.json"),
    ("bench_appends.py", ("--seconds", "0.3", "--label", "smoke"), "appends.json"),
    ("bench_sustained.py", ("--minutes", "0.1", "--interval", "3", "--writers", "2",
                            "--idle-reads", "10", "--large-rows", "5000"), "sustained.json"),
    ("bench_fleet.py", ("--environments", "10", "--repeats", "1"), "fleet.json"),
    ("bench_orchestrator.py", ("--collections", "20", "--batches", "10", "--runs", "1",
                               "--skip-failover"), "orchestrator.json"),
    ("bench_cutover.py", ("--promotions", "2", "--pairs", "example", "--writers", "2",
                          "--label", "smoke"), "cutover.json"),
    ("bench_resume.py", ("--rows", "200000", "--engines", "arrow", "--label", "smoke"),
     "resume.json"),
    ("bench_pipeline.py", ("--rows", "100000", "--batches", "4"), "pipeline.json"),
    ("bench_spark_connect.py", ("--rows", "20000", "--batches", "2", "--repeat", "1"),
     "spark_connect.json"),
    ("bench_spark_cluster.py", ("--rows", "100000", "--small-rows", "20000", "--batches", "4"),
     "spark_cluster.json"),
)  # fmt: skip

#: Not smoke-run: it is the test suite itself, which ``make test`` runs.
SKIPPED = ("bench_suite.py",)


def main() -> int:
    scripts = {p.name for p in (ROOT / "benchmarks").glob("bench_*.py")}
    listed = {name for name, _, _ in SMOKE} | set(SKIPPED)
    if scripts != listed:
        print(f"smoke list out of date: unlisted {sorted(scripts - listed)}, "
              f"gone {sorted(listed - scripts)}", file=sys.stderr)  # fmt: skip
        return 1
    failed = []
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as tmp:
        environment = {**os.environ, provenance.RESULTS_DIR_ENV: tmp}
        for number, (name, args, results) in enumerate(SMOKE, start=1):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / name), *args],
                cwd=ROOT,
                env=environment,
                capture_output=True,
                text=True,
            )
            seconds = time.monotonic() - started
            written = (Path(tmp) / results).exists()
            ok = done.returncode == 0 and written
            print(f"[{number}/{len(SMOKE)}] {name}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s",
                  flush=True)  # fmt: skip
            if not ok:
                why = f"exit {done.returncode}" if done.returncode else f"no {results}"
                failed.append(name)
                print(f"{name} ({why}):\n{done.stderr[-3000:]}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
