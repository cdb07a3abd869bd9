"""Benchmark: the test suite's wall time, and where it goes by file (budget: 15 minutes).

Runs the suite as ``make test`` does (pytest-xdist, ``--workers`` workers, the units of
``tests/support/parallel.py``, then the ``quiet`` tests in two workers), with JUnit reports,
and times the run. Run it on a quiet machine from a checkout whose ``.venv`` is installed,
after ``make packages``: a suite that skips what a machine lacks is shorter than the real one,
and the record says how many tests skipped.

Writes ``benchmarks/results/suite.json``::

    {"run": {...}, "wall_seconds": ..., "budget_seconds": 900, "verdict": "met", "tests": ...,
     "files": [{"file": "tests/integration/test_scenarios.py", "tests": 62, "seconds": ...}]}

``seconds`` of a file is the sum of its tests' times (setup and teardown included) across the
workers; their sum exceeds the wall time by about the workers' overlap.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "suite.json"
#: The suite's budget on the two-core machine of the figures (docs/design.md, "Testing").
BUDGET_SECONDS = 15 * 60


def _file_of(case: ET.Element) -> str:
    """``tests/integration/test_x.py`` from a JUnit test case's class name."""
    module = case.get("classname", "").split("::")[0]
    parts = module.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()  # a test class inside the module
    return "/".join(parts) + ".py"


def measure(workers: int, extra: list[str]) -> dict[str, Any]:
    """Both parts of ``make test``: the parallel one, then the quiet tests in two workers."""
    parts = [
        ["-n", str(workers), "--dist", "loadscope", "-m", "not quiet"],
        ["-n", "2", "--dist", "loadscope", "-m", "quiet"],
    ]
    cases: list[ET.Element] = []
    codes: list[int] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for index, part in enumerate(parts):
            report = Path(tmp) / f"junit-{index}.xml"
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       f"--junitxml={report}", *part, *extra]  # fmt: skip
            codes.append(subprocess.run(command, cwd=ROOT).returncode)
            cases.extend(ET.parse(report).getroot().iter("testcase"))
    wall = time.monotonic() - started
    exit_code = max(codes)
    by_file: dict[str, list[float]] = collections.defaultdict(list)
    outcomes: collections.Counter[str] = collections.Counter()
    for case in cases:
        by_file[_file_of(case)].append(float(case.get("time", "0")))
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        outcomes[outcome] += 1
    files = sorted(
        ({"file": f, "tests": len(t), "seconds": round(sum(t), 1)} for f, t in by_file.items()),
        key=lambda row: -float(row["seconds"]),  # type: ignore[arg-type]
    )
    return {
        "run": {**provenance.run(), "workers": workers},
        "wall_seconds": round(wall, 1),
        "budget_seconds": BUDGET_SECONDS,
        "verdict": "met" if wall <= BUDGET_SECONDS and exit_code == 0 else "missed",
        "exit_code": exit_code,
        "tests": sum(outcomes.values()),
        "passed": outcomes["passed"],
        "failed": outcomes["failure"] + outcomes["error"],
        "skipped": outcomes["skipped"],
        "files": files,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "4")))
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. a path)")
    args = parser.parse_args()
    result = measure(args.workers, args.pytest_args)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "files"}, indent=2))
    sys.exit(0 if result["exit_code"] == 0 else 1)


if __name__ == "__main__":
    main()
