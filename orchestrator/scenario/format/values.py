"""Scenario values: the file's defaults, problems found in it, and the validated scenario."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from catalog.release import Release
from orchestrator.process_node import ProcessState

if TYPE_CHECKING:
    from orchestrator.scenario.format.steps import Step

# States a `wait` step can wait for: the process node's states, plus `exited`.
WAIT_STATES: Final = (*(state.value for state in ProcessState), "exited")


COMPARATORS: Final = ("equals", "not_equals", "length", "contains", "exists")


TOP_LEVEL_KEYS: Final = frozenset(
    {"name", "description", "releases", "defaults", "workload", "step"}
)


WORKLOAD_KEYS: Final = frozenset({"clients", "rate", "collection", "reads", "op_timeout"})


DEFAULT_KEYS: Final = frozenset({"session_timeout", "timeout", "invariants", "zookeeper_servers"})


# Steps that stop ZooKeeper servers: they need servers the run started itself.
ZOOKEEPER_ACTIONS: Final = frozenset(
    {
        "restart_zookeeper",
        "kill_zookeeper",
        "start_zookeeper",
        "partition_zookeeper",
        "heal_zookeeper",
    }
)


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
    zookeeper_servers: int = 1  # an embedded ensemble of this many servers (odd)


@attrs.frozen
class WorkloadSpec:
    """``[workload]``: clients appending (and a reader reading) through the whole scenario,
    their history checked at the end (orchestrator.scenario.workload)."""

    clients: int = 4
    rate: float = 20.0  # appends per second per client
    collection: str = "mz_catalog.mz_tables"
    reads: float = 2.0  # reads per second (0: none)
    op_timeout: float = 20.0  # seconds an append is retried (same key) before it is unknown


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
    workload: WorkloadSpec | None = None

    @property
    def partitioned(self) -> frozenset[str]:
        """The processes a ``partition`` step cuts: they run in network namespaces."""
        return frozenset(s.process for s in self.steps if s.action == "partition")

    @property
    def partitions_zookeeper(self) -> bool:
        """Whether a step cuts a ZooKeeper server off from its peers: the ensemble's servers
        then run in network namespaces of their own."""
        return any(s.action == "partition_zookeeper" for s in self.steps)

    @property
    def needs_namespaces(self) -> bool:
        return bool(self.partitioned) or self.partitions_zookeeper

    def release_file(self, release: str) -> Path:
        return self.release_files[release]

    @property
    def zookeeper_step(self) -> Step | None:
        """The first step that stops ZooKeeper servers (None: the scenario stops none)."""
        return next((s for s in self.steps if s.action in ZOOKEEPER_ACTIONS), None)
