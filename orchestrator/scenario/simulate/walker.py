"""The walker: a random walk over the release history, one scenario step at a time."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import attrs

from catalog.release import Release, Version
from orchestrator.scenario import ScenarioRun
from orchestrator.scenario.format import Step
from orchestrator.scenario.invariants import InvariantChecker
from orchestrator.scenario.simulate.fault_moves import FaultMoves
from orchestrator.scenario.simulate.moves import UpgradeMoves
from orchestrator.scenario.simulate.values import SimulationConfig
from orchestrator.scenario.simulate.walk_core import WalkModel


@attrs.define
class Walker:
    """The model of one environment and the moves that change it: its collaborators."""

    model: WalkModel
    upgrades: UpgradeMoves = attrs.field(init=False)
    faults: FaultMoves = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.upgrades = UpgradeMoves(self.model)
        self.faults = FaultMoves(self.model, self.upgrades)

    @classmethod
    def of(
        cls,
        *,
        run: ScenarioRun,
        config: SimulationConfig,
        history: Sequence[Release],
        appendable: Mapping[str, str],
        checker: InvariantChecker,
    ) -> Walker:
        return cls(WalkModel(run, config, history, appendable, checker))

    @property
    def recorded(self) -> list[Step]:
        return self.model.recorded

    def take_steps(self) -> tuple[Step, ...]:
        return self.model.take_steps()

    def choose(self, rng: random.Random) -> str:
        room = self.model.config.max_processes - len(self.model.live)
        if rng.random() < self.model.config.fault_probability:
            faults = ["kill_leader", "zombie", "expire_leader"]
            if room >= 1:
                faults += ["kill_checking", "lost_answer"]
            if self.model.followers():
                faults += ["kill_follower", "expire_follower"]
            if self.model.pending():
                faults.append("kill_mid_migration")
            if self.model.run.zookeeper.size >= 3:
                faults.append("zookeeper_server")
            if self.model.run.isolate_all:
                faults.append("partition_leader")
            if self.model.run.zookeeper.isolates_servers:
                faults.append("partition_zookeeper")
            assert self.model.catalog_version is not None
            if room >= 1 and any(
                Version.parse(v) > Version.parse(self.model.catalog_version)
                for v in self.model.versions
            ):
                faults.append("rollback")
            for spare_needed in ("zombie", "partition_leader"):
                if spare_needed in faults and room < 1 and len(self.model.leader_group()) < 2:
                    faults.remove(spare_needed)
            return rng.choice(faults)
        options: list[tuple[str, float]] = [("append", 3.0), ("sustain", 0.3)]
        if room >= 1:
            options.append(("upgrade", 3.0))
        if self.model.pending():
            options += [("promote", 3.0), ("abort", 1.0)]
        if self.model.checker.tracked and any(t.acked for t in self.model.checker.tracked.values()):
            options.append(("read", 1.0))
        assert self.model.catalog_version is not None
        if room >= 1 and any(
            Version.parse(v) < Version.parse(self.model.catalog_version)
            for v in self.model.versions
        ):
            options.append(("start_older", 0.5))
        if room >= 1 and self.model.catalog_generation > 1:
            options.append(("start_stale", 0.5))
        kinds, weights = zip(*options, strict=True)
        return rng.choices(kinds, weights=weights)[0]

    def bootstrap(self, rng: random.Random) -> str:
        version = self.model.versions[0]
        self.model.next_generation = 2
        (first,) = self.model.start(version, 1, 1, auto=True)  # asked to bootstrap
        self.model.wait(first, "serving")
        self.model.leader = first
        self.model.catalog_version, self.model.catalog_generation = version, 1
        if rng.random() < 0.5:
            (spare,) = self.model.start(version, 1, 1)
            self.model.wait(spare, "ready")
        return f"bootstrap {version} with {len(self.model.live)} process(es)"

    def act(self, kind: str, rng: random.Random) -> str:
        moves = self.upgrades if hasattr(self.upgrades, kind) else self.faults
        return str(getattr(moves, kind)(rng))
