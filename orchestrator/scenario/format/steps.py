"""Scenario values: actions and their fields, steps, defaults, problems; steps written as TOML."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from catalog.release import Release
from orchestrator.process_node import ProcessState

# States a `wait` step can wait for: the process node's states, plus `exited`.
WAIT_STATES: Final = (*(state.value for state in ProcessState), "exited")


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
    invariants: bool = True  # check orchestrator.scenario.invariants after every step


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
