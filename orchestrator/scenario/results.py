"""What a scenario run reports: step results, scenario results, appended rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

FAULT_ACTIONS = frozenset(
    {
        "kill",
        "pause",
        "expire",
        "partition",
        "restart_zookeeper",
        "kill_zookeeper",
        "start_zookeeper",
        "partition_zookeeper",
    }
)


# Steps after which durable changes by leaders are expected (the read-only invariant skips them).
WRITING_ACTIONS = frozenset({"append", "sustain", "promote", "finalize"})


# How long ready/serving may take to show on /readyz once the process node says so.
READYZ_GRACE = 3.0


# The runner's own ZooKeeper session outlives a server restart.
RUNNER_SESSION_TIMEOUT = 30.0


class StepFailed(Exception):
    """An expectation of a step did not hold (the message says what and what was seen)."""


@attrs.frozen
class StepResult:
    """What one step did: ok or not, how long it took, and a short description of the outcome."""

    number: int
    line: int
    action: str
    description: str
    ok: bool
    seconds: float
    detail: str = ""
    error: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class ScenarioResult:
    """The outcome of one scenario run."""

    path: str
    name: str
    env: str
    seed: int
    ok: bool
    seconds: float
    steps: tuple[StepResult, ...]
    error: str | None = None
    status: Mapping[str, Any] | None = None
    logs: Mapping[str, str] = attrs.field(factory=dict)
    work_dir: str | None = None
    faults: int = 0
    # The workload's outcome counts and whether its history held (None: no workload).
    workload: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "env": self.env,
            "seed": self.seed,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "faults": self.faults,
            "steps": [s.to_json() for s in self.steps],
            "error": self.error,
            "status": self.status,
            "logs": dict(self.logs),
            "work_dir": self.work_dir,
            "workload": self.workload,
        }


@attrs.frozen
class AppendRecord:
    """Rows a process acknowledged (HTTP 200), with its answer (shard id, ts, upper)."""

    process: str
    collection: str
    rows: tuple[Mapping[str, Any], ...]
    answer: Mapping[str, Any]
