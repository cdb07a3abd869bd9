"""The walk's ordinary moves: upgrade, promote, abort, append, read, start older or stale."""

from __future__ import annotations

import random
import uuid

from catalog.release import Version
from orchestrator.scenario import StepFailed
from orchestrator.scenario.simulate.rows import make_rows
from orchestrator.scenario.simulate.walk_core import WalkerCore


class UpgradeMoves(WalkerCore):
    """One method per move kind; each returns a line describing what it did."""

    __slots__ = ()

    def _upgrade(self, rng: random.Random) -> str:
        assert self.catalog_version is not None
        current = Version.parse(self.catalog_version)
        candidates = [v for v in self.versions if Version.parse(v) >= current]
        version = rng.choice(candidates)
        generation = self.next_generation
        self.next_generation += 1
        room = self.config.max_processes - len(self.live)
        count = rng.randint(1, max(1, min(3, room)))
        auto = rng.random() < 0.15
        names = self.start(version, generation, count, auto=auto)
        if auto:
            old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
            self.leader = self.wait_takeover(old_epoch, generation)
            self._promoted(version, generation)
            return f"upgrade to {version} g{generation} x{count} with --auto-promote"
        for name in names:
            self.wait(name, "ready")
        return f"upgrade to {version} g{generation} x{count} (read-only)"

    def _promote(self, rng: random.Random) -> str:
        (version, generation), members = rng.choice(list(self.pending().items()))
        old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
        if rng.random() < 0.6:
            self.do("promote", generation=generation, wait=self.config.timeout)
            how = "CLI --wait"
        else:
            self.do("promote", processes=(rng.choice(members),), generation=generation)
            how = "POST /promote"
        self.leader = self.wait_takeover(old_epoch, generation)
        self._promoted(version, generation)
        return f"promote {version} g{generation} ({how}); leader {self.leader}"

    def _abort(self, rng: random.Random) -> str:
        (version, generation), members = rng.choice(list(self.pending().items()))
        for name in members:
            self.do("stop", processes=(name,), code=0, timeout=self.config.timeout)
            self.live.pop(name)
        return f"abort {version} g{generation} ({len(members)} process(es))"

    def _append(self, rng: random.Random) -> str:
        assert self.leader is not None and self.catalog_version is not None
        release = self.release(self.live[self.leader].version)
        names = sorted(n for n in self.appendable if release.builtin(n) is not None)
        # Collections some release migrates are where rows can get lost: favour them.
        weights = [4.0 if n in self.migrated else 1.0 for n in names]
        name = rng.choices(names, weights=weights)[0]
        builtin = release.builtin(name)
        assert builtin is not None
        token_column = self.appendable[name]
        self.checker.track(name, token_column)
        tokens = [f"w{self.config.seed}x{uuid.uuid4().hex[:10]}" for _ in range(rng.randint(1, 3))]
        rows = tuple(make_rows(builtin, token_column, tokens))
        before = len(self.run.acked)
        try:
            self.do("append", processes=(self.leader,), collection=name, rows=rows)
        except StepFailed:
            self.checker.unknown_outcome(name, tokens)
            raise
        if len(self.run.acked) > before:
            self.checker.acknowledged(name, tokens)
        return f"append {len(rows)} row(s) to {name} via {self.leader}"

    def _read(self, rng: random.Random) -> str:
        """Read a tracked collection back through the leader: exactly the acknowledged rows."""
        assert self.leader is not None
        release = self.release(self.live[self.leader].version)
        names = sorted(
            n
            for n, t in self.checker.tracked.items()
            if t.acked and not t.uncertain and release.builtin(n) is not None
        )
        if not names:
            return "read: nothing to read back"
        name = rng.choice(names)
        count = sum(self.checker.tracked[name].acked.values())
        self.do("read", processes=(self.leader,), collection=name, expect_count=count)
        return f"read {count} row(s) of {name} via {self.leader}"

    def _start_older(self, rng: random.Random) -> str:
        assert self.catalog_version is not None
        current = Version.parse(self.catalog_version)
        version = rng.choice([v for v in self.versions if Version.parse(v) < current])
        generation = self.next_generation
        self.next_generation += 1
        (name,) = self.start(version, generation, 1)
        self.expect_exit(name, 4)
        return f"start older {version} g{generation}: refused"

    def _start_stale(self, rng: random.Random) -> str:
        assert self.catalog_version is not None
        current = Version.parse(self.catalog_version)
        version = rng.choice([v for v in self.versions if Version.parse(v) >= current])
        generation = rng.randint(1, self.catalog_generation - 1)
        (name,) = self.start(version, generation, 1)
        self.expect_exit(name, 3)
        return f"start stale {version} g{generation}: fenced"
