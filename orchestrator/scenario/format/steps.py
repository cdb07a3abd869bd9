"""Scenario steps: one class per action, each with exactly the fields that action takes.

A step is one of the classes in :data:`STEP_KINDS` (a tagged union on ``action``). Every field
names the check of :mod:`orchestrator.scenario.format.fields` that its values must pass
(``metadata={"check": ...}``); :mod:`orchestrator.scenario.format.structure` builds steps from
TOML tables with cattrs and reports every problem by field. ``number`` counts from 1 and
``line`` is the step's ``[[step]]`` header; both are 0 for steps built in code (simulation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

import attrs

from orchestrator.scenario.format.toml import toml_entries, toml_value

__all__ = [
    "STEP_KINDS",
    "AppendStep",
    "ExpectExitStep",
    "ExpectStatusStep",
    "ExpireStep",
    "FinalizeStep",
    "HealStep",
    "HealZooKeeperStep",
    "KillStep",
    "KillZooKeeperStep",
    "PartitionStep",
    "PartitionZooKeeperStep",
    "PauseStep",
    "PauseStepsStep",
    "PromoteStep",
    "ReadStep",
    "RestartZooKeeperStep",
    "ResumeStep",
    "ResumeStepsStep",
    "SleepStep",
    "StartStep",
    "StartZooKeeperStep",
    "Step",
    "StopStep",
    "SustainStep",
    "ThrottleStep",
    "WaitStep",
]


def _field(check: str, **kwargs: Any) -> Any:
    """An attrs field whose raw value must pass the ``check`` of ``fields.FIELDS``."""
    return attrs.field(metadata={"check": check}, **kwargs)


@attrs.frozen(kw_only=True)
class Step:
    """What every step has; the subclasses add their action's fields."""

    action: ClassVar[str] = ""
    help: ClassVar[str] = ""
    number: int = 0
    line: int = 0
    note: str | None = _field("note", default=None)

    @property
    def process_names(self) -> tuple[str, ...]:
        """The processes the step acts on (empty for steps without one)."""
        names: tuple[str, ...] = getattr(self, "processes", ())
        return names

    @property
    def process(self) -> str:
        """The single process the step acts on ('' for steps without one)."""
        names = self.process_names
        return names[0] if names else ""

    def describe(self) -> str:
        """A one-line summary for the timeline."""
        return f"{self.action} {','.join(self.process_names)}".strip()

    def to_toml(self) -> str:
        """This step as a ``[[step]]`` table (simulate prints failing walks this way)."""
        out = ["[[step]]", f"action = {toml_value(self.action)}"]
        for field in attrs.fields(type(self)):
            if field.name in ("number", "line"):
                continue
            value = getattr(self, field.name)
            if value is None or value == field.default or (value == () and field.name != "rows"):
                continue
            out += toml_entries(field.name, value)
        return "\n".join(out)


@attrs.frozen(kw_only=True)
class _ProcessStep(Step):
    processes: tuple[str, ...] = _field("process")


@attrs.frozen(kw_only=True)
class StartStep(_ProcessStep):
    action: ClassVar[str] = "start"
    help: ClassVar[str] = "start sidecar process(es) of a release at a deploy generation"
    release: str = _field("release")
    generation: int = _field("generation")
    auto_promote: bool = _field("auto_promote", default=False)
    session_timeout: float | None = _field("session_timeout", default=None)
    crash_before_write: int | None = _field("crash_before_write", default=None)
    lose_answer_after_write: int | None = _field("lose_answer_after_write", default=None)
    # --finalize-after (None: "0", a rehearsal finalizes at once unless it asks for a window),
    # and for a rollback the pending upgrade's release and the collections it may drop.
    finalize_after: str | None = _field("finalize_after", default=None)
    rollback_from: str | None = _field("rollback_from", default=None)
    discard_writes_to: tuple[str, ...] = _field("discard_writes_to", default=())
    # --copy-rate: the rows per second its long steps start at (None: no limit).
    copy_rate: float | None = _field("copy_rate", default=None)

    def describe(self) -> str:
        extra = " auto-promote" if self.auto_promote else ""
        if self.copy_rate is not None:
            extra += f", copying at most {self.copy_rate:g} rows/s"
        if self.finalize_after is not None:
            extra += f", finalizing after {self.finalize_after}"
        if self.rollback_from is not None:
            extra += f", rolling back from {self.rollback_from}"
        if self.discard_writes_to:
            extra += f", discarding writes to {', '.join(self.discard_writes_to)}"
        if self.crash_before_write is not None:
            extra += f", crashing before leader write {self.crash_before_write}"
        if self.lose_answer_after_write is not None:
            extra += f", losing the answer of leader write {self.lose_answer_after_write}"
        who = ",".join(self.processes)
        return f"start {who}: {self.release} generation {self.generation}{extra}"


@attrs.frozen(kw_only=True)
class WaitStep(_ProcessStep):
    action: ClassVar[str] = "wait"
    help: ClassVar[str] = "wait until a process reaches a state"
    state: str = _field("state")
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        return f"wait {self.process} {self.state}"


@attrs.frozen(kw_only=True)
class PromoteStep(Step):
    action: ClassVar[str] = "promote"
    help: ClassVar[str] = "promote a generation (CLI `promote`, or POST /promote on `process`)"
    generation: int = _field("generation")
    processes: tuple[str, ...] = _field("process", default=())
    wait: float | None = _field("wait", default=None)
    code: int | None = _field("code", default=None)
    expect_http: tuple[int, ...] | None = _field("expect_http", default=None)
    timeout: float | None = _field("timeout", default=None)
    # A generation no process registered, on purpose (CLI `--before-deploy`).
    before_deploy: bool = _field("before_deploy", default=False)

    def describe(self) -> str:
        via = f" via {self.process}" if self.processes else ""
        ahead = " before its deploy" if self.before_deploy else ""
        return f"promote generation {self.generation}{via}{ahead}"


@attrs.frozen(kw_only=True)
class FinalizeStep(Step):
    action: ClassVar[str] = "finalize"
    help: ClassVar[str] = (
        "make the pending upgrade final (CLI `finalize`, or POST /finalize on `process`)"
    )
    processes: tuple[str, ...] = _field("process", default=())
    version: str | None = _field("version", default=None)
    wait: float | None = _field("wait", default=None)
    code: int | None = _field("code", default=None)
    expect_http: tuple[int, ...] | None = _field("expect_http", default=None)
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        via = f" via {self.process}" if self.processes else ""
        return f"finalize{' ' + self.version if self.version else ''}{via}"


@attrs.frozen(kw_only=True)
class AppendStep(_ProcessStep):
    action: ClassVar[str] = "append"
    help: ClassVar[str] = "POST /append rows to a process"
    collection: str = _field("collection")
    rows: tuple[Mapping[str, Any], ...] = _field("rows")
    expect_http: tuple[int, ...] | None = _field("expect_http", default=None)
    refused: bool = _field("refused", default=False)
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        return f"append {len(self.rows)} row(s) {self.collection} @ {self.process}"


@attrs.frozen(kw_only=True)
class ReadStep(_ProcessStep):
    action: ClassVar[str] = "read"
    help: ClassVar[str] = "GET /read from a process and compare the rows"
    collection: str = _field("collection")
    as_of: int | None = _field("as_of", default=None)
    expect_rows: tuple[Mapping[str, Any], ...] | None = _field("expect_rows", default=None)
    expect_count: int | None = _field("expect_count", default=None)
    expect_http: tuple[int, ...] | None = _field("expect_http", default=None)
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        return f"read {self.collection} @ {self.process}"


@attrs.frozen(kw_only=True)
class SustainStep(_ProcessStep):
    action: ClassVar[str] = "sustain"
    help: ClassVar[str] = (
        "append rows from many clients for a while, reading all along (orchestrator.scenario."
        "sustain)"
    )
    collection: str = _field("collection")
    rows: tuple[Mapping[str, Any], ...] = _field("rows")
    seconds: float = _field("seconds")
    clients: int = _field("clients", default=4)
    max_read_seconds: float | None = _field("max_read_seconds", default=None)

    def describe(self) -> str:
        return (
            f"sustain {self.clients} client(s) x {self.seconds:g} s on {self.collection} "
            f"@ {self.process}"
        )


@attrs.frozen(kw_only=True)
class KillStep(_ProcessStep):
    action: ClassVar[str] = "kill"
    help: ClassVar[str] = "SIGKILL a process"


@attrs.frozen(kw_only=True)
class PauseStep(_ProcessStep):
    action: ClassVar[str] = "pause"
    help: ClassVar[str] = "SIGSTOP a process (a zombie until resumed)"


@attrs.frozen(kw_only=True)
class ResumeStep(_ProcessStep):
    action: ClassVar[str] = "resume"
    help: ClassVar[str] = "SIGCONT a paused process"


@attrs.frozen(kw_only=True)
class ExpireStep(_ProcessStep):
    action: ClassVar[str] = "expire"
    help: ClassVar[str] = (
        "expire a process's ZooKeeper session (SIGSTOP until the server expires it, then SIGCONT)"
    )
    timeout: float | None = _field("timeout", default=None)


@attrs.frozen(kw_only=True)
class PartitionStep(_ProcessStep):
    action: ClassVar[str] = "partition"
    help: ClassVar[str] = (
        'cut a process off from ZooKeeper (cut = "zookeeper") or from its clients '
        '(cut = "clients"); it runs in a network namespace of its own, the rest flows'
    )
    cut: str = _field("cut")

    def describe(self) -> str:
        return f"partition {self.process} from {self.cut}"


@attrs.frozen(kw_only=True)
class HealStep(_ProcessStep):
    action: ClassVar[str] = "heal"
    help: ClassVar[str] = "remove a process's partitions (cut: one of them; default every one)"
    cut: str | None = _field("cut", default=None)

    def describe(self) -> str:
        return f"heal {self.process}" + (f" from {self.cut}" if self.cut else "")


@attrs.frozen(kw_only=True)
class RestartZooKeeperStep(Step):
    action: ClassVar[str] = "restart_zookeeper"
    help: ClassVar[str] = "stop and start the embedded ZooKeeper server"
    down: float | None = _field("down", default=None)

    def describe(self) -> str:
        return "restart ZooKeeper" + (f" (down {self.down:g} s)" if self.down else "")


@attrs.frozen(kw_only=True)
class KillZooKeeperStep(Step):
    action: ClassVar[str] = "kill_zookeeper"
    help: ClassVar[str] = (
        "SIGKILL one ZooKeeper server ([defaults] zookeeper_servers): a number, "
        '"leader" or "follower"'
    )
    server: int | str = _field("server")

    def describe(self) -> str:
        return f"kill ZooKeeper server {self.server}"


@attrs.frozen(kw_only=True)
class StartZooKeeperStep(Step):
    action: ClassVar[str] = "start_zookeeper"
    help: ClassVar[str] = (
        "start a killed ZooKeeper server by number (default: every one not running) and wait "
        "until it serves"
    )
    server: int | None = _field("server_number", default=None)
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        which = "every stopped server" if self.server is None else f"server {self.server}"
        return f"start ZooKeeper {which}"


@attrs.frozen(kw_only=True)
class PartitionZooKeeperStep(Step):
    action: ClassVar[str] = "partition_zookeeper"
    help: ClassVar[str] = (
        'cut one ZooKeeper server off from its peers (a number, "leader" or "follower"); its '
        "clients still reach it. Each server then runs in a network namespace of its own"
    )
    server: int | str = _field("server")
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        return f"partition ZooKeeper server {self.server} from its peers"


@attrs.frozen(kw_only=True)
class HealZooKeeperStep(Step):
    action: ClassVar[str] = "heal_zookeeper"
    help: ClassVar[str] = (
        "heal a ZooKeeper server's partition (default: every partitioned one) and wait until "
        "it serves"
    )
    server: int | None = _field("server_number", default=None)
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        which = "every partitioned server" if self.server is None else f"server {self.server}"
        return f"heal ZooKeeper {which}"


@attrs.frozen(kw_only=True)
class StopStep(_ProcessStep):
    action: ClassVar[str] = "stop"
    help: ClassVar[str] = "SIGTERM a process and expect its exit code"
    code: int | None = _field("code", default=None)
    timeout: float | None = _field("timeout", default=None)


@attrs.frozen(kw_only=True)
class ExpectStatusStep(Step):
    """``path`` compared by one comparator (``equals = ...``, ``length = ...``, ...)."""

    action: ClassVar[str] = "expect_status"
    help: ClassVar[str] = "check a field of `status --json`"
    path: str = _field("path")
    comparator: str = attrs.field()
    expected: Any = attrs.field()
    timeout: float | None = _field("timeout", default=None)

    def describe(self) -> str:
        return f"expect status {self.path} {self.comparator} {self.expected!r}"

    def to_toml(self) -> str:
        lines = ["[[step]]", f"action = {toml_value(self.action)}"]
        lines.append(f"path = {toml_value(self.path)}")
        lines.append(f"{self.comparator} = {toml_value(self.expected)}")
        for name in ("timeout", "note"):
            value = getattr(self, name)
            if value is not None:
                lines.append(f"{name} = {toml_value(value)}")
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class ExpectExitStep(_ProcessStep):
    action: ClassVar[str] = "expect_exit"
    help: ClassVar[str] = "wait for a process to exit with a code"
    code: int = _field("code")
    timeout: float | None = _field("timeout", default=None)
    log_contains: str | None = _field("log_contains", default=None)

    def describe(self) -> str:
        return f"expect {self.process} exits {self.code}"


@attrs.frozen(kw_only=True)
class _PaceStep(Step):
    """A change of a generation's pace, through the CLI (its exit code ``code``, default 0)."""

    generation: int = _field("generation")
    code: int | None = _field("code", default=None)


@attrs.frozen(kw_only=True)
class ThrottleStep(_PaceStep):
    action: ClassVar[str] = "throttle"
    help: ClassVar[str] = "limit a generation's long steps (`catalog-upgrade throttle`)"
    rows_per_second: float | str = _field("rows_per_second")

    def describe(self) -> str:
        return f"throttle generation {self.generation} to {self.rows_per_second} rows/s"


@attrs.frozen(kw_only=True)
class PauseStepsStep(_PaceStep):
    action: ClassVar[str] = "pause_steps"
    help: ClassVar[str] = "pause a generation's long steps (`catalog-upgrade pause`)"

    def describe(self) -> str:
        return f"pause the long steps of generation {self.generation}"


@attrs.frozen(kw_only=True)
class ResumeStepsStep(_PaceStep):
    action: ClassVar[str] = "resume_steps"
    help: ClassVar[str] = "resume a generation's long steps (`catalog-upgrade resume`)"

    def describe(self) -> str:
        return f"resume the long steps of generation {self.generation}"


@attrs.frozen(kw_only=True)
class SleepStep(Step):
    action: ClassVar[str] = "sleep"
    help: ClassVar[str] = "let time pass on purpose (e.g. for a zombie)"
    seconds: float = _field("seconds")

    def describe(self) -> str:
        return f"sleep {self.seconds:g} s"


#: Every step kind by its action name: the tag of the union.
STEP_KINDS: Final[Mapping[str, type[Step]]] = {
    kind.action: kind
    for kind in (
        StartStep,
        WaitStep,
        PromoteStep,
        FinalizeStep,
        AppendStep,
        ReadStep,
        SustainStep,
        KillStep,
        PauseStep,
        ResumeStep,
        ExpireStep,
        PartitionStep,
        HealStep,
        RestartZooKeeperStep,
        KillZooKeeperStep,
        StartZooKeeperStep,
        PartitionZooKeeperStep,
        HealZooKeeperStep,
        StopStep,
        ExpectStatusStep,
        ExpectExitStep,
        SleepStep,
        ThrottleStep,
        PauseStepsStep,
        ResumeStepsStep,
    )
}
