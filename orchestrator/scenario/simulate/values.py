"""A simulation's configuration, its walk steps and its result."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from orchestrator.scenario.format import Step
from orchestrator.scenario.invariants import Violation

FAULT_KINDS = (
    "kill_checking",
    "kill_follower",
    "kill_leader",
    "kill_mid_migration",
    "zombie",
    "expire_follower",
    "expire_leader",
    "lost_answer",
    "zookeeper_server",
    "partition_leader",
    "partition_zookeeper",
    "rollback",
)


# Walk actions that must leave everything but read-only processes' own keys unchanged (the
# upgrade action is one unless it auto-promotes, which the quiescence check notices).
READ_ONLY_KINDS = frozenset(
    {
        "upgrade",
        "abort",
        "read",
        "start_older",
        "start_stale",
        "kill_checking",
        "kill_follower",
        "expire_follower",
    }
)


@attrs.frozen
class SimulationConfig:
    """What to simulate; everything a walk depends on besides timing."""

    releases_dir: Path
    seed: int
    steps: int
    fault_probability: float = 0.25
    session_timeout: float = 2.0
    timeout: float = 40.0
    max_processes: int = 5
    shrink_runs: int = 3
    # An embedded ensemble of this many servers (the zookeeper_server fault needs 3 or more).
    zookeeper_servers: int = 1
    # Where each run keeps its directory (history, result, every process's log); None: a
    # temporary one, kept only when the run failed.
    keep_dir: Path | None = None
    # Partitions (root, ip and nft needed: orchestrator.testing.netns). With one ZooKeeper
    # server, every process runs in a network namespace of its own: the partition_leader fault.
    # With an ensemble, every server does: the partition_zookeeper fault (a server cut off from
    # its peers). Processes in namespaces reach the host, not the servers' bridge.
    partitions: bool = False

    @property
    def isolates_processes(self) -> bool:
        return self.partitions and self.zookeeper_servers == 1

    @property
    def isolates_servers(self) -> bool:
        return self.partitions and self.zookeeper_servers > 1


@attrs.frozen
class WalkStep:
    """One action of a walk: what it did, how long it took, and the scenario steps it ran."""

    index: int
    kind: str
    description: str
    ok: bool
    seconds: float
    steps: tuple[Step, ...] = ()
    error: str | None = None

    @property
    def is_fault(self) -> bool:
        return self.kind in FAULT_KINDS

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "description": self.description,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


@attrs.frozen
class SimulationResult:
    """The outcome of one walk (and of its shrinking, when it failed)."""

    seed: int
    steps_requested: int
    walk: tuple[WalkStep, ...]
    ok: bool
    seconds: float
    invariants: Mapping[str, Mapping[str, int]]
    error: str | None = None
    violations: tuple[Violation, ...] = ()
    scenario_toml: str = ""
    work_dir: str | None = None
    shortest_prefix: int | None = None
    shrink_runs: tuple[tuple[int, bool], ...] = ()

    @property
    def faults(self) -> collections.Counter[str]:
        return collections.Counter(s.kind for s in self.walk if s.is_fault and s.ok)

    @property
    def scenario_steps(self) -> int:
        return sum(len(s.steps) for s in self.walk)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "steps_requested": self.steps_requested,
            "steps_run": len(self.walk),
            "scenario_steps": self.scenario_steps,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "faults": dict(self.faults),
            "invariants": {k: dict(v) for k, v in self.invariants.items()},
            "error": self.error,
            "violations": [v.to_json() for v in self.violations],
            "walk": [s.to_json() for s in self.walk],
            "shortest_prefix": self.shortest_prefix,
            "shrink_runs": [list(r) for r in self.shrink_runs],
            "work_dir": self.work_dir,
        }


@attrs.define
class Member:
    name: str
    version: str
    generation: int


class WalkFailed(Exception):
    def __init__(self, message: str, violations: Sequence[Violation] = ()) -> None:
        super().__init__(message)
        self.violations = tuple(violations)
