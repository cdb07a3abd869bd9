"""The speed and memory targets, each with where its figure is in ``benchmarks/results/``.

One home for every target: the benchmarks page shows each with the figure last measured and
its verdict (``docs/hooks/benchmarks.py``). A figure is read from a results file's last run (a
file of labelled runs) or from the file itself (a file of one run).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from catalog.shard.merges import STOP_BATCHES

RESULTS = Path(__file__).resolve().parent / "results"


@attrs.frozen
class Target:
    """``figure`` of ``results`` (a function of its run) against ``bound``: at most
    (``at_most``) or at least. ``unit`` is how the page shows both."""

    results: str
    name: str
    figure: Callable[[dict[str, Any]], float | None]
    bound: float
    at_most: bool
    unit: str

    def measured(self, results: Path = RESULTS) -> float | None:
        """The figure of the last run (None: not measured yet)."""
        path = results / self.results
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        try:
            return self.figure(data)
        except (KeyError, IndexError, StopIteration, TypeError):
            return None

    def met(self, value: float) -> bool:
        return (operator.le if self.at_most else operator.ge)(value, self.bound)


def _last(data: dict[str, Any]) -> dict[str, Any]:
    """The last labelled run of a results file."""
    return data[list(data)[-1]]


def _appends(fmt: str, clients: int, rows: int, field: str) -> Callable[[dict[str, Any]], float]:
    """A level of ``bench_appends.py``'s last run on a local store."""

    def figure(data: dict[str, Any]) -> float:
        run = next(r for r in reversed(data.values()) if r.get("store") == "local")
        level = next(
            lv
            for lv in run["levels"]
            if (lv["format"], lv["clients"], lv["rows_per_append"]) == (fmt, clients, rows)
        )
        return float(level[field])

    return figure


def _cutover(kind: str, field: str) -> Callable[[dict[str, Any]], float]:
    return lambda data: float(_last(data)["summary"][kind][field]["max"])


def _redone(engine: str) -> Callable[[dict[str, Any]], float]:
    def figure(data: dict[str, Any]) -> float:
        engines = _last(data)["engines"]
        return float(next(e for e in engines if e["engine"] == engine)["redone_fraction"]) * 100

    return figure


def _sustained(writers: int, field: str) -> Callable[[dict[str, Any]], float]:
    """The worst minute of ``bench_sustained.py``'s phase with ``writers`` one-row writers."""

    def figure(data: dict[str, Any]) -> float:
        phase = next(p for p in data["phases"] if p["writers"] == writers)
        return float(max(m["small"][field] for m in phase["minutes"]))

    return figure


def _sustained_of_idle(data: dict[str, Any]) -> float:
    """The worst minute's p99 of the 1,000-row read under 4 writers, against the idle p99."""
    return _sustained(4, "p99_ms")(data) / float(data["idle"]["read"]["p99_ms"])


def _sustained_batches(data: dict[str, Any]) -> float:
    return float(max(max(m["batches"].values()) for p in data["phases"] for m in p["minutes"]))


TARGETS: tuple[Target, ...] = (
    Target("validate.json", "validate, 500 releases x 200 builtins", lambda d: d["seconds"],
           10, True, "s"),
    Target("orchestrator.json", "read-only ready, 1,000 collections",
           lambda d: d["ready_seconds"], 1.5, True, "s"),
    Target("orchestrator.json", "failover after a SIGKILL", lambda d: d["failover_seconds"],
           3, True, "s"),
    Target("appends.json", "Arrow, 4 clients x 10,000 rows",
           _appends("arrow", 4, 10_000, "rows_per_s"), 1_000_000, False, "rows/s"),
    Target("appends.json", "NDJSON, 4 clients x 1,000 rows",
           _appends("ndjson", 4, 1_000, "rows_per_s"), 400_000, False, "rows/s"),
    Target("appends.json", "16 one-row clients",
           _appends("ndjson", 16, 1, "appends_per_s"), 2_000, False, "appends/s"),
    Target("appends.json", "16 one-row clients, p99",
           _appends("ndjson", 16, 1, "p99_ms"), 50, True, "ms"),
    Target("reads.json", "GET /read in Arrow", lambda d: d["rows_per_s"]["arrow"],
           5_000_000, False, "rows/s"),
    Target("reads.json", "GET /read in NDJSON", lambda d: d["rows_per_s"]["ndjson"],
           500_000, False, "rows/s"),
    Target("shard_io.json", "snapshot with migration against a plain read",
           lambda d: d["snapshot_to_plain_read_ratio"], 1.15, True, "x"),
    Target("shard_io.json", "snapshot of a widened history against a plain snapshot",
           lambda d: d["widened_to_snapshot_ratio"], 1.2, True, "x"),
    Target("pipeline.json", "arrow compaction against a plain read+write",
           lambda d: d["arrow_vs_floor"], 2, True, "x"),
    Target("pipeline.json", "delta copy against a full copy", lambda d: d["delta_speedup"],
           20, False, "x faster"),
    Target("fleet.json", "fleet --json, 1,000 environments", lambda d: d["survey_seconds"],
           2, True, "s"),
    Target("fleet_10k.json", "fleet --json, 10,000 environments",
           lambda d: d["survey_seconds"], 2, True, "s"),
    Target("cutover.json", "write gap, example upgrade (max)",
           _cutover("example upgrade", "write_gap_ms"), 250, True, "ms"),
    Target("cutover.json", "write gap, example rollback (max)",
           _cutover("example rollback", "write_gap_ms"), 250, True, "ms"),
    Target("cutover.json", "write gap, 1,000 collections, upgrade (max)",
           _cutover("wide upgrade", "write_gap_ms"), 1_000, True, "ms"),
    Target("cutover.json", "write gap, 1,000 collections, rollback (max)",
           _cutover("wide rollback", "write_gap_ms"), 1_000, True, "ms"),
    Target("cutover.json", "a read's wait, example upgrade (max)",
           _cutover("example upgrade", "read_wait_ms"), 100, True, "ms"),
    Target("cutover.json", "a read's wait, 1,000 collections (max)",
           _cutover("wide upgrade", "read_wait_ms"), 100, True, "ms"),
    Target("resume.json", "a 4M-row copy's redo after a kill, arrow", _redone("arrow"),
           10, True, "%"),
    Target("resume.json", "a 4M-row copy's redo after a kill, Spark", _redone("spark"),
           10, True, "%"),
    Target("sustained.json", "1,000-row read p99 under 4 one-row writers (worst minute)",
           _sustained(4, "p99_ms"), 50, True, "ms"),
    Target("sustained.json", "the same, against the idle read's p99",
           _sustained_of_idle, 2, True, "x"),
    Target("sustained.json", "batches of a shard under sustained appends (most)",
           _sustained_batches, STOP_BATCHES, True, "batches"),
    Target("sustained.json", "ZooKeeper writes per idle read",
           lambda d: d["idle"]["zookeeper_writes_per_read"], 0, True, "writes"),
    Target("sustained.json", "idle 1,000-row read against pyarrow reading its files",
           lambda d: d["idle"]["read_of_pyarrow"], 1.3, True, "x"),
    Target("suite.json", "make test's pytest part", lambda d: d["wall_seconds"] / 60,
           15, True, "min"),
)  # fmt: skip
