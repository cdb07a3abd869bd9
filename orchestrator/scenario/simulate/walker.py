"""The walker: a random walk over the release history, one scenario step at a time."""

from __future__ import annotations

import random

from catalog.release import Version
from orchestrator.scenario.simulate.fault_moves import FaultMoves
from orchestrator.scenario.simulate.moves import UpgradeMoves


class Walker(UpgradeMoves, FaultMoves):
    """The model of one environment and the actions that move it."""

    __slots__ = ()

    def choose(self, rng: random.Random) -> str:
        room = self.config.max_processes - len(self.live)
        if rng.random() < self.config.fault_probability:
            faults = ["kill_leader", "zombie", "expire_leader"]
            if room >= 1:
                faults += ["kill_checking", "lost_answer"]
            if self.followers():
                faults += ["kill_follower", "expire_follower"]
            if self.pending():
                faults.append("kill_mid_migration")
            if self.run.zookeeper.size >= 3:
                faults.append("zookeeper_server")
            if "zombie" in faults and room < 1 and len(self.leader_group()) < 2:
                faults.remove("zombie")
            return rng.choice(faults)
        options: list[tuple[str, float]] = [("append", 3.0)]
        if room >= 1:
            options.append(("upgrade", 3.0))
        if self.pending():
            options += [("promote", 3.0), ("abort", 1.0)]
        if self.checker.tracked and any(t.acked for t in self.checker.tracked.values()):
            options.append(("read", 1.0))
        assert self.catalog_version is not None
        if room >= 1 and any(
            Version.parse(v) < Version.parse(self.catalog_version) for v in self.versions
        ):
            options.append(("start_older", 0.5))
        if room >= 1 and self.catalog_generation > 1:
            options.append(("start_stale", 0.5))
        kinds, weights = zip(*options, strict=True)
        return rng.choices(kinds, weights=weights)[0]

    def bootstrap(self, rng: random.Random) -> str:
        version = self.versions[0]
        self.next_generation = 2
        (first,) = self.start(version, 1, 1)
        self.wait(first, "serving")
        self.leader = first
        self.catalog_version, self.catalog_generation = version, 1
        if rng.random() < 0.5:
            (spare,) = self.start(version, 1, 1)
            self.wait(spare, "ready")
        return f"bootstrap {version} with {len(self.live)} process(es)"

    def act(self, kind: str, rng: random.Random) -> str:
        return str(getattr(self, f"_{kind}")(rng))
