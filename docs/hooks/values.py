"""Figures in prose, written from the code's defaults and the benchmarks' results.

A page does not type a default or a measured figure; it names where the figure lives, and
``make docs-update`` writes it after the marker (``markers``):

* ``<!-- default orchestrator.http.exchange:ServerLimits.workers -->``: a module's value
  (a constant, or a field default of an attrs class);
* ``<!-- count scenarios/releases/v*.py -->``: how many files a pattern names, from the
  repository's root;
* ``<!-- appends 16 -->``: what ``bench_appends.py`` measured for that many one-row NDJSON
  clients on a local store, its last such run (acknowledged appends a second, and p99);
* ``<!-- alert CatalogUpgradeNoServingLeader -->``: how long an alert of
  ``deploy/prometheus/alerts.yaml`` waits before it fires (its ``for``), in words;
  ``<!-- alert CatalogUpgradeStepStalled:threshold -->``: the seconds its expression compares
  with (the first ``> N``), in words;
* ``<!-- result spark_connect.json:speedup .1f -->``: one figure of a results file, by its
  path of keys. ``@last`` is a file's last run, ``[clients=16,format=arrow]`` the first entry
  of a list whose fields match. An optional format spec follows any marker (``,.0f``,
  ``.1%``, or a unit: ``KiB``, ``MiB`` for bytes, ``min``, ``h`` for seconds).

A marker that names nothing fails ``make docs-update`` and the test of the pages.
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


def value(kind: str, name: str, spec: str | None = None) -> str:
    """The text of an inline marker: ``kind`` of ``markers.INLINE``, what it names, its spec."""
    if kind == "default":
        return _formatted(default(name), spec)
    if kind == "count":
        return str(len(list(ROOT.glob(name))))
    if kind == "result":
        return _formatted(result(name), spec)
    if kind == "alert":
        return alert_wait(name)
    return appends(int(name))


ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
_DURATION = re.compile(r"^(\d+)([smhd])$")
_DURATION_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def alert_wait(name: str) -> str:
    """How long alert ``name`` waits before it fires (its ``for``), in words: ``a minute``,
    ``5 minutes``, ``24 hours``; with ``:threshold``, the seconds its expression compares
    with."""
    import yaml  # the full install's (make docs-update); the site build reads the pages only

    alert, _, part = name.partition(":")
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    (rule,) = [r for r in rules if r.get("alert") == alert]
    if part == "threshold":
        found = re.search(r">\s*(\d+)\b", rule["expr"])
        if found is None:
            raise ValueError(f"alert {alert}: its expression compares with no number")
        seconds = int(found.group(1))
        count, unit = (seconds // 3600, "h") if seconds % 3600 == 0 else (seconds // 60, "m")
    else:
        match = _DURATION.match(str(rule.get("for", "0m")))
        if match is None:
            raise ValueError(f"alert {alert}: cannot read its for: {rule.get('for')!r}")
        count, unit = int(match.group(1)), match.group(2)
    words = _DURATION_UNITS[unit]
    if count == 1:
        return f"an {words}" if words == "hour" else f"a {words}"
    return f"{count} {words}s"


_SELECTOR = re.compile(r"^([^\[]*)(?:\[([^\]]+)\])?$")


def result(name: str) -> Any:
    """``file.json:key.key[field=value].key``: one figure of ``benchmarks/results``."""
    file, _, path = name.partition(":")
    value: Any = json.loads((RESULTS / file).read_text())
    for part in path.split("."):
        match = _SELECTOR.match(part)
        if match is None:
            raise ValueError(f"{name}: cannot read {part!r}")
        key, selector = match.groups()
        if key == "@last":
            value = value[list(value)[-1]]
        elif key:
            value = value[key]
        if selector:
            wanted = dict(pair.split("=", 1) for pair in selector.split(","))
            value = next(
                entry
                for entry in value
                if all(str(entry.get(k)) == v for k, v in wanted.items())
            )
    return value


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


#: Specs that write a count of bytes or seconds in a larger unit.
_UNITS = {
    "KiB": ("KiB", 2**10),
    "MiB": ("MiB", 2**20),
    "min": ("minutes", 60),
    "h": ("hours", 3600),
}


def _formatted(value: Any, spec: str | None) -> str:
    """``value`` by a format spec, or in one of :data:`_UNITS`."""
    if spec is None:
        return _cell(value)
    if spec in _UNITS:
        unit, size = _UNITS[spec]
        return f"{value / size:g} {unit}"
    return format(value, spec)


def _cell(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
