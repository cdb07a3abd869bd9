"""MkDocs hook: the benchmark page's figures, generated from ``benchmarks/results/*.json``.

The page holds a marker; this hook replaces it with one section per results file: its scalar
figures as a table, and any list of levels (appends, reads) as a table of its own. Nothing on
the page is typed by hand, so a figure cannot drift from what a script wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = "<!-- benchmark figures -->"
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, figures(RESULTS))


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


def _rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text.replace("|", "\\|")
