"""Parsing a scenario file: every problem found at once, each naming the file, line and field."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from catalog.errors import BadInputError, CatalogError
from catalog.release import Release, Version
from orchestrator.scenario.format.fields import boolean_field, number_field
from orchestrator.scenario.format.releases import ReleaseIndex
from orchestrator.scenario.format.steps import StartStep, Step
from orchestrator.scenario.format.structure import build_step
from orchestrator.scenario.format.values import (
    DEFAULT_KEYS,
    TOP_LEVEL_KEYS,
    WORKLOAD_KEYS,
    Defaults,
    Problem,
    Scenario,
    WorkloadSpec,
)

_STEP_HEADER = re.compile(r"^\s*\[\[\s*step\s*\]\]")


_ANY_HEADER = re.compile(r"^\s*\[")


def _step_lines(text: str) -> list[tuple[int, int]]:
    """``(first, last)`` line numbers of every ``[[step]]`` table, in order."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines, start=1) if _STEP_HEADER.match(line)]
    spans = []
    for header in headers:
        end = len(lines)
        for j in range(header, len(lines)):
            if _ANY_HEADER.match(lines[j]):
                end = j
                break
        spans.append((header, end))
    return spans


def _key_line(text: str, span: tuple[int, int] | None, key: str) -> int | None:
    """The line of ``key = ...`` inside a step's lines (the header line when not found)."""
    if span is None:
        return None
    lines = text.splitlines()
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for number in range(span[0], min(span[1], len(lines)) + 1):
        if pattern.match(lines[number - 1]):
            return number
    return span[0]


def _top_key_line(text: str, key: str) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=|^\s*\[\s*{re.escape(key)}\s*\]")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


@attrs.define
class _Collector:
    text: str
    spans: list[tuple[int, int]]
    problems: list[Problem] = attrs.field(factory=list)

    def add(self, message: str, step: int | None = None, field: str | None = None) -> None:
        span = self.spans[step - 1] if step is not None and step <= len(self.spans) else None
        if step is None:
            line = _top_key_line(self.text, field) if field else None
        else:
            line = _key_line(self.text, span, field) if field else (span[0] if span else None)
        self.problems.append(Problem(message=message, step=step, line=line, field=field))


def load_scenario(path: str | Path, *, indexes: dict[Path, ReleaseIndex] | None = None) -> Scenario:
    """Read and validate a scenario file; BadInputError (exit 2) listing every problem.

    ``indexes`` caches release directories (loading a release imports it) across files.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(
            f"cannot read scenario {file}: {exc.strerror or exc}", path=str(file)
        ) from exc
    return parse_scenario(text, file, indexes=indexes)


def parse_scenario(
    text: str, file: Path, *, indexes: dict[Path, ReleaseIndex] | None = None
) -> Scenario:
    """Validate scenario ``text`` (read from ``file``, which anchors relative paths)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(
            f"{file}: not valid TOML: {exc}",
            path=str(file),
            problems=[Problem(message=f"not valid TOML: {exc}").to_json()],
        ) from exc
    found = _Collector(text, _step_lines(text))
    for key in sorted(set(data) - TOP_LEVEL_KEYS):
        found.add(
            f"unknown top-level key {key!r} (allowed: {', '.join(sorted(TOP_LEVEL_KEYS))})",
            field=key,
        )
    name = data.get("name", file.stem)
    description = data.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            found.add(f"{key} must be a string", field=key)
    releases_dir = _releases_dir(data, file, found)
    defaults = _defaults(data.get("defaults", {}), found)
    workload = _workload(data["workload"], found) if "workload" in data else None
    raw_steps = data.get("step")
    if raw_steps is None:
        found.add("no steps: add [[step]] tables", field=None)
        raw_steps = []
    elif not isinstance(raw_steps, list) or not all(isinstance(s, dict) for s in raw_steps):
        found.add("step must be an array of tables ([[step]])", field="step")
        raw_steps = []
    steps = [
        step
        for number, raw in enumerate(raw_steps, start=1)
        if (step := _step(number, raw, found)) is not None
    ]
    index = None
    if releases_dir is not None:
        cache = indexes if indexes is not None else {}
        index = cache.setdefault(releases_dir, ReleaseIndex(releases_dir))
    release_files = _check_semantics(steps, file, found, index)
    for step in steps:
        server = getattr(step, "server", None)
        if isinstance(server, int) and server > defaults.zookeeper_servers:
            found.add(
                f"server {server} is not in the scenario's ZooKeeper (servers 1 to "
                f"{defaults.zookeeper_servers}: set [defaults] zookeeper_servers)",
                step=step.number,
                field="server",
            )
    cuts_servers = [s for s in steps if s.action == "partition_zookeeper"]
    if cuts_servers and defaults.zookeeper_servers == 1:
        found.add(
            "a ZooKeeper server is cut off from its peers only in an ensemble: set [defaults] "
            "zookeeper_servers = 3",
            step=cuts_servers[0].number,
            field="action",
        )
    cuts_processes = [s for s in steps if s.action == "partition"]
    if cuts_servers and cuts_processes:
        found.add(
            "a scenario partitions processes or ZooKeeper servers, not both (processes in "
            "namespaces of their own reach the host, not the servers' bridge)",
            step=cuts_processes[0].number,
            field="action",
        )
    _raise_if_any(found.problems, file)
    assert releases_dir is not None
    return Scenario(
        path=file,
        name=str(name),
        description=str(description),
        releases_dir=releases_dir,
        defaults=defaults,
        steps=tuple(steps),
        release_files=release_files,
        history=tuple(_history(index)),
        workload=workload,
    )


def _history(index: ReleaseIndex | None) -> list[Release]:
    if index is None:
        return []
    try:
        return index.releases()
    except CatalogError:  # reported by the release checks of the steps
        return []


def _raise_if_any(problems: Sequence[Problem], file: Path) -> None:
    if not problems:
        return
    rendered = [p.render(str(file)) for p in problems]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    first = problems[0]
    raise BadInputError(
        "\n".join(rendered) if len(rendered) > 1 else rendered[0] + more,
        path=str(file),
        step=first.step,
        line=first.line,
        field=first.field,
        problems=[p.to_json() for p in problems],
    )


def _releases_dir(data: Mapping[str, Any], file: Path, found: _Collector) -> Path | None:
    value = data.get("releases")
    if value is None:
        found.add("missing key 'releases' (the release directory, relative to this file)")
        return None
    if not isinstance(value, str) or not value:
        found.add("releases must be a directory path string", field="releases")
        return None
    directory = (file.parent / value).resolve()
    if not directory.is_dir():
        found.add(f"release directory not found: {directory}", field="releases")
        return None
    return directory


def _defaults(value: Any, found: _Collector) -> Defaults:
    if not isinstance(value, dict):
        found.add("[defaults] must be a table", field="defaults")
        return Defaults()
    for key in sorted(set(value) - DEFAULT_KEYS):
        found.add(
            f"unknown key {key!r} in [defaults] (allowed: {', '.join(sorted(DEFAULT_KEYS))})",
            field=key,
        )
    out = Defaults()
    for key, checker in (("session_timeout", number_field(1.0)), ("timeout", number_field(0.1))):
        if key in value:
            problem = checker(value[key])
            if problem:
                found.add(f"[defaults] {key} {problem}", field=key)
            elif key == "timeout":
                out = attrs.evolve(out, timeout=float(value[key]))
            else:
                out = attrs.evolve(out, session_timeout=float(value[key]))
    if "zookeeper_servers" in value:
        servers = value["zookeeper_servers"]
        if not (isinstance(servers, int) and not isinstance(servers, bool)) or servers not in (
            1,
            3,
            5,
        ):
            found.add(
                f"[defaults] zookeeper_servers must be 1, 3 or 5, not {servers!r}",
                field="zookeeper_servers",
            )
        else:
            out = attrs.evolve(out, zookeeper_servers=servers)
    if "invariants" in value:
        problem = boolean_field(value["invariants"])
        if problem:
            found.add(f"[defaults] invariants {problem}", field="invariants")
        else:
            out = attrs.evolve(out, invariants=value["invariants"])
    return out


def _workload(value: Any, found: _Collector) -> WorkloadSpec | None:
    if not isinstance(value, dict):
        found.add("[workload] must be a table", field="workload")
        return None
    for key in sorted(set(value) - WORKLOAD_KEYS):
        found.add(
            f"unknown key {key!r} in [workload] (allowed: {', '.join(sorted(WORKLOAD_KEYS))})",
            field=key,
        )
    out = WorkloadSpec()
    clients = value.get("clients", out.clients)
    if not (isinstance(clients, int) and not isinstance(clients, bool)) or not 1 <= clients <= 64:
        found.add(f"[workload] clients must be 1 to 64, not {clients!r}", field="clients")
    else:
        out = attrs.evolve(out, clients=clients)
    for key, checker in (
        ("rate", number_field(0.1)),
        ("reads", number_field(0.0)),
        ("op_timeout", number_field(1.0)),
    ):
        if key in value:
            problem = checker(value[key])
            if problem:
                found.add(f"[workload] {key} {problem}", field=key)
            else:
                changes: dict[str, Any] = {key: float(value[key])}
                out = attrs.evolve(out, **changes)
    collection = value.get("collection", out.collection)
    if not isinstance(collection, str) or collection.count(".") != 1:
        found.add(
            f"[workload] collection must name SCHEMA.NAME, not {collection!r}", field="collection"
        )
    else:
        out = attrs.evolve(out, collection=collection)
    return out


def _step(number: int, raw: Mapping[str, Any], found: _Collector) -> Step | None:
    span = found.spans[number - 1] if number <= len(found.spans) else (0, 0)
    built = build_step(number, span[0], raw)
    if isinstance(built, Step):
        return built
    for problem in built:
        found.add(problem.message, step=number, field=problem.field)
    return None


def _check_semantics(
    steps: Sequence[Step], file: Path, found: _Collector, index: ReleaseIndex | None
) -> dict[str, Path]:
    """Cross-step rules: processes started once and before use; releases that exist."""
    started: dict[str, int] = {}
    release_files: dict[str, Path] = {}
    for step in steps:
        if isinstance(step, StartStep):
            for name in step.processes:
                if name in started:
                    found.add(
                        f"process {name!r} was already started in step {started[name]}: give a "
                        "restarted process a new name",
                        step=step.number,
                        field="process",
                    )
                started[name] = step.number
            for release in (step.release, step.rollback_from):
                if index is not None and release is not None and release not in release_files:
                    resolved = _resolve_release(release, index, file, found, step.number)
                    if resolved is not None:
                        release_files[release] = resolved
        elif step.process_names and step.process not in started:
            found.add(
                f"process {step.process!r} is not started by an earlier step",
                step=step.number,
                field="process",
            )
    return release_files


def _resolve_release(
    release: str, index: ReleaseIndex, file: Path, found: _Collector, number: int
) -> Path | None:
    """A version of the release directory, or a ``.py`` path relative to the scenario file."""
    if release.endswith(".py"):
        path = (file.parent / release).resolve()
        if not path.is_file():
            found.add(f"release file not found: {path}", step=number, field="release")
            return None
        try:
            index.load(path)
        except CatalogError as exc:
            found.add(f"release {release} does not load: {exc.message}", step=number)
            return None
        return path
    try:
        versions = index.versions()
    except CatalogError as exc:
        found.add(
            f"the release directory {index.directory} does not load: {exc.message}",
            step=number,
            field="release",
        )
        return None
    if release not in versions:
        known = ", ".join(sorted(versions, key=Version.parse))
        found.add(
            f"no release {release!r} in {index.directory} (versions: {known})",
            step=number,
            field="release",
        )
        return None
    return versions[release]
