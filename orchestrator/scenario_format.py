"""The scenario file format: TOML, validated completely before anything runs.

A scenario names the release history it uses and lists steps (``scenarios/README.md`` documents
every action and field)::

    name = "blue-green happy path"
    releases = "releases"            # directory of release files, relative to this file

    [defaults]
    session_timeout = 2              # --session-timeout of every started process
    timeout = 30                     # default timeout of every waiting step

    [[step]]
    action = "start"
    process = "old"
    release = "0.10.0"
    generation = 1

Validation is strict and total: an unknown action, an unknown or misplaced field, a value of the
wrong type, a process used before it is started, a release the directory does not have -- every
problem of the file is collected and reported in one :class:`~catalog.errors.BadInputError`
(exit 2) naming the file, the step number and its line. Nothing here touches ZooKeeper or starts a
process; :mod:`orchestrator.scenario` runs what this module accepted.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from catalog.errors import BadInputError, CatalogError
from catalog.release import Release, Version, load_release

__all__ = [
    "ACTIONS",
    "WAIT_STATES",
    "Defaults",
    "PathPart",
    "Problem",
    "ReleaseIndex",
    "Scenario",
    "Step",
    "is_missing",
    "load_scenario",
    "parse_path",
    "parse_scenario",
    "resolve_path",
]

# States a `wait` step can wait for: the process node's states, plus `exited`.
WAIT_STATES: Final = (
    "starting",
    "checking",
    "ready",
    "migrating",
    "serving",
    "fenced",
    "failed",
    "exited",
)
COMPARATORS: Final = ("equals", "not_equals", "length", "contains", "exists")


@attrs.frozen
class ActionSpec:
    """Which fields an action requires and which it accepts (``note`` is accepted everywhere)."""

    required: frozenset[str]
    optional: frozenset[str] = frozenset()
    help: str = ""

    @property
    def allowed(self) -> frozenset[str]:
        return self.required | self.optional | {"action", "note"}


def _spec(required: str = "", optional: str = "", help: str = "") -> ActionSpec:
    return ActionSpec(frozenset(required.split()), frozenset(optional.split()), help)


ACTIONS: Final[Mapping[str, ActionSpec]] = {
    "start": _spec(
        "process release generation",
        "auto_promote session_timeout crash_before_write",
        "start sidecar process(es) of a release at a deploy generation",
    ),
    "wait": _spec("process state", "timeout", "wait until a process reaches a state"),
    "promote": _spec(
        "generation",
        "process wait code expect_http timeout",
        "promote a generation (CLI `promote`, or POST /promote on `process`)",
    ),
    "append": _spec(
        "process collection rows",
        "expect_http refused timeout",
        "POST /append rows to a process",
    ),
    "read": _spec(
        "process collection",
        "as_of expect_rows expect_count expect_http timeout",
        "GET /read from a process and compare the rows",
    ),
    "kill": _spec("process", "", "SIGKILL a process"),
    "pause": _spec("process", "", "SIGSTOP a process (a zombie until resumed)"),
    "resume": _spec("process", "", "SIGCONT a paused process"),
    "expire": _spec(
        "process",
        "timeout",
        "expire a process's ZooKeeper session (SIGSTOP until the server expires it, then SIGCONT)",
    ),
    "restart_zookeeper": _spec("", "down", "stop and start the embedded ZooKeeper server"),
    "stop": _spec("process", "code timeout", "SIGTERM a process and expect its exit code"),
    "expect_status": _spec(
        "path", " ".join(COMPARATORS) + " timeout", "check a field of `status --json`"
    ),
    "expect_exit": _spec(
        "process code", "timeout log_contains", "wait for a process to exit with a code"
    ),
    "sleep": _spec("seconds", "", "let time pass on purpose (e.g. for a zombie)"),
}

TOP_LEVEL_KEYS: Final = frozenset({"name", "description", "releases", "defaults", "step"})
DEFAULT_KEYS: Final = frozenset({"session_timeout", "timeout", "invariants"})
DEFAULT_SESSION_TIMEOUT: Final = 2.0
DEFAULT_TIMEOUT: Final = 30.0


# --- values ---------------------------------------------------------------------------------


@attrs.frozen
class Problem:
    """One thing wrong with a scenario file, located."""

    message: str
    step: int | None = None
    line: int | None = None
    field: str | None = None

    def render(self, file: str) -> str:
        where = file
        if self.line is not None:
            where += f":{self.line}"
        if self.step is not None:
            where += f": step {self.step}"
        return f"{where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Defaults:
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    timeout: float = DEFAULT_TIMEOUT
    invariants: bool = True  # check orchestrator.invariants after every step


@attrs.frozen
class Step:
    """One validated step. ``number`` counts from 1; ``line`` is its ``[[step]]`` header."""

    number: int
    line: int
    action: str
    processes: tuple[str, ...] = ()
    release: str | None = None
    generation: int | None = None
    auto_promote: bool = False
    session_timeout: float | None = None
    crash_before_write: int | None = None
    state: str | None = None
    timeout: float | None = None
    collection: str | None = None
    rows: tuple[Mapping[str, Any], ...] = ()
    expect_rows: tuple[Mapping[str, Any], ...] | None = None
    expect_count: int | None = None
    expect_http: tuple[int, ...] | None = None
    refused: bool = False
    code: int | None = None
    path: str | None = None
    comparator: str | None = None
    expected: Any = None
    seconds: float | None = None
    wait: float | None = None
    log_contains: str | None = None
    as_of: int | None = None
    down: float | None = None
    note: str | None = None

    @property
    def process(self) -> str:
        """The single process the step acts on ('' for steps without one)."""
        return self.processes[0] if self.processes else ""

    def describe(self) -> str:
        """A one-line summary for the timeline."""
        who = ",".join(self.processes)
        a = self.action
        if a == "start":
            extra = " auto-promote" if self.auto_promote else ""
            if self.crash_before_write is not None:
                extra += f", crashing before leader write {self.crash_before_write}"
            return f"start {who}: {self.release} generation {self.generation}{extra}"
        if a == "wait":
            return f"wait {who} {self.state}"
        if a == "promote":
            via = f" via {who}" if who else ""
            return f"promote generation {self.generation}{via}"
        if a in ("append", "read"):
            n = f" {len(self.rows)} row(s)" if a == "append" else ""
            return f"{a}{n} {self.collection} @ {who}"
        if a == "expect_status":
            return f"expect status {self.path} {self.comparator} {self.expected!r}"
        if a == "expect_exit":
            return f"expect {who} exits {self.code}"
        if a == "sleep":
            return f"sleep {self.seconds:g} s"
        if a == "restart_zookeeper":
            return "restart ZooKeeper" + (f" (down {self.down:g} s)" if self.down else "")
        return f"{a} {who}".strip()

    def to_toml(self) -> str:
        """This step as a ``[[step]]`` table (simulate prints failing walks this way)."""
        out = ["[[step]]", f"action = {_toml_value(self.action)}"]
        if self.processes:
            value: Any = self.processes[0] if len(self.processes) == 1 else list(self.processes)
            out.append(f"process = {_toml_value(value)}")
        for name in [
            "release",
            "generation",
            "session_timeout",
            "crash_before_write",
            "state",
            "timeout",
            "collection",
            "code",
            "path",
            "seconds",
            "wait",
            "log_contains",
            "as_of",
            "down",
            "expect_count",
            "note",
        ]:
            value = getattr(self, name)
            if value is not None:
                out.append(f"{name} = {_toml_value(value)}")
        if self.auto_promote:
            out.append("auto_promote = true")
        if self.refused:
            out.append("refused = true")
        if self.expect_http is not None:
            http: Any = self.expect_http[0] if len(self.expect_http) == 1 else self.expect_http
            out.append(f"expect_http = {_toml_value(http)}")
        if self.comparator is not None:
            out.append(f"{self.comparator} = {_toml_value(self.expected)}")
        if self.rows:
            out.append(f"rows = {_toml_value(list(self.rows))}")
        if self.expect_rows is not None:
            out.append(f"expect_rows = {_toml_value(list(self.expect_rows))}")
        return "\n".join(out)


@attrs.frozen
class Scenario:
    """A validated scenario file."""

    path: Path
    name: str
    description: str
    releases_dir: Path
    defaults: Defaults
    steps: tuple[Step, ...]
    release_files: Mapping[str, Path] = attrs.field(factory=dict)  # step release -> file
    history: tuple[Release, ...] = ()  # every release of the directory, oldest first

    def release_file(self, release: str) -> Path:
        return self.release_files[release]

    @property
    def uses_zookeeper_restart(self) -> bool:
        return any(step.action == "restart_zookeeper" for step in self.steps)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


# --- releases --------------------------------------------------------------------------------


@attrs.define
class ReleaseIndex:
    """The release files of one directory by version, loaded once (loading imports them)."""

    directory: Path
    _by_version: dict[str, Path] | None = attrs.field(default=None, init=False)
    _releases: dict[Path, Release] = attrs.field(factory=dict, init=False)

    def versions(self) -> dict[str, Path]:
        if self._by_version is None:
            by_version: dict[str, Path] = {}
            for path in sorted(self.directory.glob("*.py")):
                if path.name.startswith("_"):
                    continue
                release = self.load(path)
                by_version[str(release.version)] = path
            self._by_version = by_version
        return self._by_version

    def load(self, path: Path) -> Release:
        path = path.resolve()
        if path not in self._releases:
            self._releases[path] = load_release(path)
        return self._releases[path]

    def sorted_versions(self) -> list[str]:
        return sorted(self.versions(), key=Version.parse)

    def releases(self) -> list[Release]:
        """Every release of the directory, oldest first."""
        return [self.load(self.versions()[v]) for v in self.sorted_versions()]


# --- parsing ---------------------------------------------------------------------------------

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


Checker = Callable[[Any], str | None]  # an error message, or None when the value is fine


def _number(minimum: float) -> Checker:
    def check(value: Any) -> str | None:
        if not _is_number(value) or value < minimum:
            return f"must be a number >= {minimum:g}, not {value!r}"
        return None

    return check


def _integer(minimum: int, maximum: int | None = None) -> Checker:
    def check(value: Any) -> str | None:
        if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
            bound = f" and <= {maximum}" if maximum is not None else ""
            return f"must be an integer >= {minimum}{bound}, not {value!r}"
        return None

    return check


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty string: {value!r}"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, not {value!r}"


def _rows(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        return 'must be an array of tables (rows), e.g. [{ id = 1, name = "a" }]'
    return None


def _http(value: Any) -> str | None:
    codes = value if isinstance(value, list) else [value]
    if not codes or not all(_is_int(c) and 100 <= c <= 599 for c in codes):
        return f"must be an HTTP status (100-599) or an array of them, not {value!r}"
    return None


def _any(_value: Any) -> str | None:
    return None


def _collection(value: Any) -> str | None:
    if not isinstance(value, str) or value.count(".") != 1 or "" in value.split("."):
        return f"must name a collection as SCHEMA.NAME, not {value!r}"
    return None


def _process_names(value: Any) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(n, str) and _PROCESS_NAME.fullmatch(n) for n in names):
        return (
            f"must be a process name (letters, digits, '-', '_'; up to 40) or, for start, an "
            f"array of them, not {value!r}"
        )
    return None


def _state(value: Any) -> str | None:
    if value not in WAIT_STATES:
        return f"must be one of {', '.join(WAIT_STATES)}, not {value!r}"
    return None


_PROCESS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")

FIELDS: Final[Mapping[str, Checker]] = {
    "process": _process_names,
    "release": _string,
    "generation": _integer(0),
    "auto_promote": _boolean,
    "session_timeout": _number(1.0),
    "crash_before_write": _integer(1),
    "state": _state,
    "timeout": _number(0.1),
    "collection": _collection,
    "rows": _rows,
    "expect_rows": _rows,
    "expect_count": _integer(0),
    "expect_http": _http,
    "refused": _boolean,
    "code": _integer(-64, 255),  # negative: killed by that signal (-9: SIGKILL)
    "path": _string,
    "equals": _any,
    "not_equals": _any,
    "length": _integer(0),
    "contains": _any,
    "exists": _boolean,
    "seconds": _number(0.0),
    "wait": _number(0.0),
    "log_contains": _string,
    "as_of": _integer(0),
    "down": _number(0.0),
    "note": _string,
}


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
    for key, checker in (("session_timeout", _number(1.0)), ("timeout", _number(0.1))):
        if key in value:
            problem = checker(value[key])
            if problem:
                found.add(f"[defaults] {key} {problem}", field=key)
            elif key == "timeout":
                out = attrs.evolve(out, timeout=float(value[key]))
            else:
                out = attrs.evolve(out, session_timeout=float(value[key]))
    if "invariants" in value:
        problem = _boolean(value["invariants"])
        if problem:
            found.add(f"[defaults] invariants {problem}", field="invariants")
        else:
            out = attrs.evolve(out, invariants=value["invariants"])
    return out


def _step(number: int, raw: Mapping[str, Any], found: _Collector) -> Step | None:
    action = raw.get("action")
    if action is None:
        found.add(f"missing 'action' (one of: {', '.join(ACTIONS)})", step=number)
        return None
    if action not in ACTIONS:
        found.add(
            f"unknown action {action!r} (one of: {', '.join(ACTIONS)})",
            step=number,
            field="action",
        )
        return None
    spec = ACTIONS[action]
    ok = True
    for key in sorted(set(raw) - spec.allowed):
        hint = (
            f" ({key!r} belongs to {', '.join(a for a, s in ACTIONS.items() if key in s.allowed)})"
            if key in FIELDS
            else ""
        )
        found.add(
            f"unknown field {key!r} for action {action!r}{hint}; allowed: "
            f"{', '.join(sorted(spec.allowed - {'action'}))}",
            step=number,
            field=key,
        )
        ok = False
    for key in sorted(spec.required - set(raw)):
        found.add(f"action {action!r} needs field {key!r}", step=number, field=None)
        ok = False
    for key, value in raw.items():
        checker = FIELDS.get(key)
        if checker is None or key not in spec.allowed:
            continue
        problem = checker(value)
        if problem:
            found.add(f"{key} {problem}", step=number, field=key)
            ok = False
    if not ok:
        return None
    return _build_step(number, found, action, raw)


def _build_step(number: int, found: _Collector, action: str, raw: Mapping[str, Any]) -> Step | None:
    span = found.spans[number - 1] if number <= len(found.spans) else (0, 0)
    process = raw.get("process")
    processes = tuple(process) if isinstance(process, list) else ((process,) if process else ())
    if len(processes) > 1 and action != "start":
        found.add("only start takes several processes", step=number, field="process")
        return None
    comparators = [c for c in COMPARATORS if c in raw]
    if action == "expect_status" and len(comparators) != 1:
        found.add(
            f"expect_status needs exactly one of {', '.join(COMPARATORS)}"
            + (f" (got {', '.join(comparators)})" if comparators else ""),
            step=number,
        )
        return None
    if action == "start" and raw["generation"] < 1:
        found.add("generation must be at least 1 for start", step=number, field="generation")
        return None
    if action == "append" and raw.get("refused") and "expect_http" in raw:
        found.add("give refused or expect_http, not both", step=number, field="refused")
        return None
    if "path" in raw:
        try:
            parse_path(raw["path"])
        except BadInputError as exc:
            found.add(exc.message, step=number, field="path")
            return None
    http = raw.get("expect_http")
    return Step(
        number=number,
        line=span[0],
        action=action,
        processes=processes,
        release=raw.get("release"),
        generation=raw.get("generation"),
        auto_promote=bool(raw.get("auto_promote", False)),
        session_timeout=_opt_float(raw.get("session_timeout")),
        crash_before_write=raw.get("crash_before_write"),
        state=raw.get("state"),
        timeout=_opt_float(raw.get("timeout")),
        collection=raw.get("collection"),
        rows=tuple(raw.get("rows", ())),
        expect_rows=tuple(raw["expect_rows"]) if "expect_rows" in raw else None,
        expect_count=raw.get("expect_count"),
        expect_http=None if http is None else tuple(http if isinstance(http, list) else [http]),
        refused=bool(raw.get("refused", False)),
        code=raw.get("code"),
        path=raw.get("path"),
        comparator=comparators[0] if comparators else None,
        expected=raw[comparators[0]] if comparators else None,
        seconds=_opt_float(raw.get("seconds")),
        wait=_opt_float(raw.get("wait")),
        log_contains=raw.get("log_contains"),
        as_of=raw.get("as_of"),
        down=_opt_float(raw.get("down")),
        note=raw.get("note"),
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _check_semantics(
    steps: Sequence[Step], file: Path, found: _Collector, index: ReleaseIndex | None
) -> dict[str, Path]:
    """Cross-step rules: processes started once and before use; releases that exist."""
    started: dict[str, int] = {}
    release_files: dict[str, Path] = {}
    for step in steps:
        if step.action == "start":
            for name in step.processes:
                if name in started:
                    found.add(
                        f"process {name!r} was already started in step {started[name]}: give a "
                        "restarted process a new name",
                        step=step.number,
                        field="process",
                    )
                started[name] = step.number
            assert step.release is not None
            if index is not None and step.release not in release_files:
                resolved = _resolve_release(step.release, index, file, found, step.number)
                if resolved is not None:
                    release_files[step.release] = resolved
        elif step.processes and step.process not in started:
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


# --- status paths ------------------------------------------------------------------------------

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?((?:\[[^\[\]]*\])*)")


@attrs.frozen
class PathPart:
    """``key``, ``[index]``, ``[field=value]`` (first match) or ``[*field=value]`` (all)."""

    kind: str  # "key" | "index" | "match" | "filter"
    key: str = ""
    index: int = 0
    value: str = ""


def parse_path(path: str) -> tuple[PathPart, ...]:
    """Parse ``processes[id=old].state``, ``events[-1].kind``, ``catalog.version``.

    A segment is a key optionally followed by selectors: ``[n]`` (list index, negative from
    the end), ``[field=value]`` (the first list element whose field equals value; the value
    may contain dots) or ``[*field=value]`` (the list of all such elements, e.g. to check a
    ``length``). BadInputError for anything else.
    """
    parts: list[PathPart] = []
    segments: list[str] = []
    depth = 0
    current = ""
    for char in path:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "." and depth == 0:
            segments.append(current)
            current = ""
        else:
            current += char
    segments.append(current)
    for segment in segments:
        match = _SEGMENT.fullmatch(segment)
        if not segment or match is None or (match.group(1) is None and not match.group(2)):
            raise BadInputError(f"invalid status path {path!r} at {segment!r}", path=path)
        if match.group(1):
            parts.append(PathPart("key", key=match.group(1)))
        for selector in re.findall(r"\[([^\[\]]*)\]", match.group(2)):
            if re.fullmatch(r"-?\d+", selector):
                parts.append(PathPart("index", index=int(selector)))
            elif "=" in selector and selector.lstrip("*").split("=", 1)[0]:
                field, value = selector.split("=", 1)
                kind = "filter" if field.startswith("*") else "match"
                parts.append(PathPart(kind, key=field.lstrip("*"), value=value))
            else:
                raise BadInputError(
                    f"invalid selector [{selector}] in status path {path!r}: use [n] or "
                    "[field=value]",
                    path=path,
                )
    return tuple(parts)


_MISSING: Final = object()


def resolve_path(document: Any, path: str) -> Any:
    """The value at ``path`` in ``document``; a sentinel :func:`is_missing` recognises when
    it is absent."""
    value = document
    for part in parse_path(path):
        if part.kind == "key":
            if not isinstance(value, Mapping) or part.key not in value:
                return _MISSING
            value = value[part.key]
        elif part.kind == "index":
            if not isinstance(value, list) or not -len(value) <= part.index < len(value):
                return _MISSING
            value = value[part.index]
        elif part.kind == "filter":
            if not isinstance(value, list):
                return _MISSING
            value = [
                item
                for item in value
                if isinstance(item, Mapping) and str(item.get(part.key)) == part.value
            ]
        else:
            if not isinstance(value, list):
                return _MISSING
            value = next(
                (
                    item
                    for item in value
                    if isinstance(item, Mapping) and str(item.get(part.key)) == part.value
                ),
                _MISSING,
            )
            if value is _MISSING:
                return _MISSING
    return value


def is_missing(value: Any) -> bool:
    return value is _MISSING
