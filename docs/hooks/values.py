"""MkDocs hook: figures in prose, written from the code's defaults and the benchmarks' results.

A page does not type a default or a measured figure; it names where the figure lives, and the
build writes it:

* ``<!-- default orchestrator.sidecar.exchange:ServerLimits.workers -->``: a module's value
  (a constant, or a field default of an attrs class);
* ``<!-- count scenarios/releases/v*.py -->``: how many files a pattern names, from the
  repository's root;
* ``<!-- appends 16 -->``: what ``bench_appends.py`` measured for that many one-row NDJSON
  clients on a local store, its last such run (acknowledged appends a second, and p99).

A marker that names nothing fails the build, as a broken link does.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
_MARKER = re.compile(r"<!-- (default|count|appends) ([^ ]+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return _MARKER.sub(lambda m: _value(m.group(1), m.group(2)), markdown)


def _value(kind: str, name: str) -> str:
    if kind == "default":
        return _cell(default(name))
    if kind == "count":
        return str(len(list(ROOT.glob(name))))
    return appends(int(name))


def default(name: str) -> Any:
    """``module:Name.attr``: a module's value, or the default of an attrs class's field."""
    module_name, _, path = name.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in path.split("."):
        if attrs.has(value) and part in attrs.fields_dict(value):
            found: Any = attrs.fields_dict(value)[part].default
            value = found.factory() if hasattr(found, "factory") else found
        else:
            value = getattr(value, part)
    return value


def appends(clients: int) -> str:
    """The last local-store run of ``bench_appends.py``: ``clients`` one-row NDJSON clients."""
    runs = json.loads((RESULTS / "appends.json").read_text())
    for label in reversed(list(runs)):
        run = runs[label]
        if run.get("store") != "local":
            continue
        for level in run.get("levels", []):
            if (level["format"], level["clients"], level["rows_per_append"]) == (
                "ndjson",
                clients,
                1,
            ):
                return (
                    f"about {level['appends_per_s']:,.0f} acknowledged appends a second on "
                    f"{run['cpu_count']} cores, p99 {level['p99_ms']:g} ms"
                )
    raise ValueError(f"appends.json has no local run of {clients} one-row NDJSON clients")


def _cell(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
