"""What ran a benchmark: the date, the commit and the machine, recorded beside its figures.

Every script writes :func:`run` under ``"run"`` in its results (a labelled run keeps it in its
own entry), and the benchmark page names each file's run by :func:`label`. The runs recorded
before scripts wrote theirs hold the date and commit of the commit that added them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


#: What a run's figures depend on: a change here, not yet committed, marks the commit.
_CODE = ("catalog", "client", "orchestrator", "benchmarks", "scenarios", "pyproject.toml")


def commit() -> str:
    """The checkout's short commit, ``+changes`` when its code differs from it."""
    found = _git("rev-parse", "--short", "HEAD")
    if not found:
        return "unknown"
    dirty = _git(
        "status", "--porcelain", "--untracked-files=no", "--", *_CODE, ":!benchmarks/results"
    )
    return found + ("+changes" if dirty else "")


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


def run() -> dict[str, str]:
    """This run's date (UTC), commit and machine."""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "machine": machine(),
    }


#: A directory that takes every results file instead of ``benchmarks/results`` (the smoke
#: runs of ``benchmarks/smoke.py``: their tiny figures must not replace the real ones).
RESULTS_DIR_ENV = "BENCH_RESULTS_DIR"


def record(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """Writes ``result`` to ``path`` with this run first; returns what it wrote."""
    written = {"run": run(), **result}
    _write(_redirected(path), written)
    return written


def record_labelled(path: Path, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Writes ``entry`` with this run as the run ``name`` of ``path``, keeping its other runs."""
    path = _redirected(path)
    runs = json.loads(path.read_text()) if path.exists() else {}
    runs[name] = {"run": run(), **entry}
    _write(path, runs)
    return runs[name]


def _redirected(path: Path) -> Path:
    directory = os.environ.get(RESULTS_DIR_ENV)
    return Path(directory) / path.name if directory else path


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def label(results: Any) -> str:
    """What ran ``results`` (a results file, or one run of a file of labelled runs): the date,
    commit and machine :func:`record` wrote. Runs recorded before :func:`run` existed had
    theirs added from the commit that recorded them, so the manual reads no git history."""
    recorded = results.get("run") if isinstance(results, dict) else None
    if isinstance(recorded, dict) and "commit" in recorded:
        return f"{recorded['date']}, {recorded['commit']}, {recorded['machine']}"
    return "not recorded"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
