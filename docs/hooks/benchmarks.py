"""The benchmark page's figures, generated from ``benchmarks/results/*.json``.

The page's marker holds one section per results file: its scalar
figures as a table, and any list of levels (appends, reads) as a table of its own. Nothing on
the page is typed by hand, so a figure cannot drift from what a script wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def latest_cutover() -> dict[str, Any] | None:
    """The last run ``cutover.json`` holds (None: no such file yet), for the operating
    page's cut-over section."""
    path = RESULTS / "cutover.json"
    if not path.exists():
        return None
    runs = json.loads(path.read_text())
    return runs[list(runs)[-1]] if runs else None


def verdicts() -> str:
    """Each target of ``benchmarks/targets.py`` with the figure last measured and its verdict."""
    targets = _targets()
    lines = ["| figure | target | measured | verdict |", "| --- | ---: | ---: | --- |"]
    for target in targets.TARGETS:
        value = target.measured(RESULTS)
        sign = "<=" if target.at_most else ">="
        shown = "not run" if value is None else f"{_number(value)} {target.unit}"
        verdict = "" if value is None else ("met" if target.met(value) else "**missed**")
        lines.append(
            f"| {target.name} (`{target.results}`) | {sign} {_number(target.bound)} "
            f"{target.unit} | {shown} | {verdict} |"
        )
    return "\n".join(lines)


def runs(results: Path) -> str:
    """What ran each results file (each run of a file of labelled runs): date, commit, machine."""
    provenance = _benchmark_module("provenance")
    lines = ["| results | run | date, commit, machine |", "| --- | --- | --- |"]
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        for name, run in _labelled(data).items():
            shown = f"`{name}`" if name else ""
            lines.append(f"| `{path.name}` | {shown} | {provenance.label(run)} |")
    return "\n".join(lines)


def _labelled(data: Any) -> dict[str | None, Any]:
    """The runs of a results file: its labelled runs, or the file itself as one run."""
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        return dict(data)
    return {None: data}


def _targets() -> Any:
    return _benchmark_module("targets")


def _benchmark_module(name: str) -> Any:
    """A module of ``benchmarks/``, loaded from its file as the build loads its hooks."""
    import importlib.util

    path = RESULTS.parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module of its classes
    spec.loader.exec_module(module)
    return module


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def cutover_timeline(run: dict[str, Any] | None) -> str:
    """One promotion's marks per pair and kind, in seconds after the target was written."""
    timelines = (run or {}).get("timelines") or {}
    if not timelines:
        return "(`bench_cutover.py` has not run yet)"
    shown = sorted(k for k in timelines if k.startswith("example")) or sorted(timelines)
    shown.sort(key=lambda k: "rollback" in k)  # the upgrade first: its marks set the order
    marks = list(dict.fromkeys(m for k in shown for m in timelines[k]))
    marks.sort(key=lambda m: next(timelines[k][m] for k in shown if m in timelines[k]))
    lines = ["| mark | " + " | ".join(shown) + " |", "| --- |" + " ---: |" * len(shown)]
    for mark in marks:
        cells = [_seconds(timelines[k].get(mark)) for k in shown]
        lines.append(f"| {mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cutover_figures(run: dict[str, Any] | None) -> str:
    """Per pair and kind: the gaps and ``promote --wait``, median / max, and what failed."""
    summary = (run or {}).get("summary") or {}
    if not summary:
        return "(`bench_cutover.py` has not run yet)"
    fields = [("write gap", "write_gap_ms"), ("leader's", "leader_write_gap_ms"),
              ("read wait", "read_wait_ms"), ("before", "read_before_ms"),
              ("promote", "promote_ms")]  # fmt: skip
    lines = [
        "| run | n | " + " | ".join(name for name, _ in fields) + " | errors | once |",
        "| --- | ---: |" + " ---: |" * len(fields) + " ---: | --- |",
    ]
    for name, figures_ in summary.items():
        cells = [_median_max(figures_.get(key)) for _, key in fields]
        once = "yes" if figures_.get("exactly_once") else "**no**"
        lines.append(f"| {name} | {figures_['promotions']} | " + " | ".join(cells)
                     + f" | {figures_.get('errors', 0)} | {once} |")  # fmt: skip
    return "\n".join(lines)


def latest_sustained() -> dict[str, Any] | None:
    """``bench_sustained.py``'s last run (None: it has not run)."""
    path = RESULTS / "sustained.json"
    return json.loads(path.read_text()) if path.exists() else None


def sustained_curve(run: dict[str, Any] | None) -> str:
    """Per phase and minute: the reads' p99 (the 1,000-row, the 100,000-row and the written
    collection, with its rows), the most batches a shard listed, and the appends per second."""
    if not run:
        return "(`bench_sustained.py` has not run yet)"
    idle = run["idle"]["read"]
    lines = [
        f"Idle, the 1,000-row read: p50 {idle['p50_ms']:.2f} ms, p99 {idle['p99_ms']:.2f} ms.",
        "",
        "| writers | min | 1k p99 | 100k p99 | written p99 | its rows | batches | appends/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for phase in run["phases"]:
        for m in phase["minutes"]:
            cells = [
                str(phase["writers"]), str(m["minute"]), _ms(m["small"]["p99_ms"]),
                _ms(m["large"]["p99_ms"]), _ms(m["written"]["p99_ms"]),
                f"{m['rows']['written']:,}", str(max(m["batches"].values())),
                f"{m['appends_per_s']:.0f}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} ms"


def _seconds(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def _median_max(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    return f"{value['median']:,.0f} / {value['max']:,.0f}"


def figures(results: Path) -> str:
    sections = []
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        sections.append(f"### `{path.name}`\n\n{_render(data)}")
    return "\n\n".join(sections) + "\n"


def _render(data: Any, depth: int = 0) -> str:
    if isinstance(data, list):
        return _rows(data) if all(isinstance(d, dict) for d in data) else _cell(data)
    if not isinstance(data, dict):
        return _cell(data)
    data = {k: v for k, v in data.items() if k != "run"}  # the runs table shows it
    scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
    nested = {k: v for k, v in data.items() if isinstance(v, (dict, list))}
    parts = []
    if scalars:
        lines = ["| figure | value |", "| --- | --- |"]
        lines += [f"| {k} | {_cell(v)} |" for k, v in scalars.items()]
        parts.append("\n".join(lines))
    for key, value in nested.items():
        if isinstance(value, dict) and not any(isinstance(v, (dict, list)) for v in value.values()):
            lines = [f"**{key}**", "", "| figure | value |", "| --- | --- |"]
            lines += [f"| {k} | {_cell(v)} |" for k, v in value.items()]
            parts.append("\n".join(lines))
        elif depth < 2:
            parts.append(f"**{key}**\n\n{_render(value, depth + 1)}")
    return "\n\n".join(parts)


#: A list of levels is shown as tables of the first columns (what names a level) and at most
#: this many more, so each stays readable.
KEY_COLUMNS, MORE_COLUMNS = 3, 6


def _rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    flat = [_flat(row) for row in rows]
    columns = list(dict.fromkeys(k for row in flat for k in row))
    keys, rest = columns[:KEY_COLUMNS], columns[KEY_COLUMNS:]
    tables = []
    for start in range(0, max(len(rest), 1), MORE_COLUMNS):
        shown = keys + rest[start : start + MORE_COLUMNS]
        lines = ["| " + " | ".join(shown) + " |", "|" + " --- |" * len(shown)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in shown) + " |" for row in flat]
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a dict of figures as columns of their own (``step_ms.parse``)."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _cell(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return f"{len(value)} rows"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text.replace("|", "\\|")
