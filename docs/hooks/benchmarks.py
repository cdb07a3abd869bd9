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
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text.replace("|", "\\|")
