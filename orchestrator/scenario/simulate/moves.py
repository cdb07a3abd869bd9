"""The walk's ordinary moves: upgrade, promote, abort, append, sustain, read, start older or
stale."""

from __future__ import annotations

import random
import uuid

import attrs

from catalog.release import Version
from orchestrator.scenario import StepFailed
from orchestrator.scenario.simulate.traced_rows import make_rows
from orchestrator.scenario.simulate.walk_core import WalkModel


@attrs.define
class UpgradeMoves:
    """One method per move kind (named after it); each returns a line describing what it did."""

    model: WalkModel

    def upgrade(self, rng: random.Random) -> str:
        assert self.model.catalog_version is not None
        current = Version.parse(self.model.catalog_version)
        candidates = [v for v in self.model.versions if Version.parse(v) >= current]
        version = rng.choice(candidates)
        generation = self.model.next_generation
        self.model.next_generation += 1
        room = self.model.config.max_processes - len(self.model.live)
        count = rng.randint(1, max(1, min(3, room)))
        auto = rng.random() < 0.15
        names = self.model.start(version, generation, count, auto=auto)
        if auto:
            old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
            self.model.leader = self.model.wait_takeover(old_epoch, generation)
            self.model.promoted(version, generation)
            return f"upgrade to {version} g{generation} x{count} with --auto-promote"
        for name in names:
            self.model.wait(name, "ready")
        return f"upgrade to {version} g{generation} x{count} (read-only)"

    def promote(self, rng: random.Random) -> str:
        (version, generation), members = rng.choice(list(self.model.pending().items()))
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        if rng.random() < 0.6:
            self.model.do("promote", generation=generation, wait=self.model.config.timeout)
            how = "CLI --wait"
        else:
            self.model.do("promote", processes=(rng.choice(members),), generation=generation)
            how = "POST /promote"
        self.model.leader = self.model.wait_takeover(old_epoch, generation)
        self.model.promoted(version, generation)
        return f"promote {version} g{generation} ({how}); leader {self.model.leader}"

    def abort(self, rng: random.Random) -> str:
        (version, generation), members = rng.choice(list(self.model.pending().items()))
        for name in members:
            self.model.do("stop", processes=(name,), code=0, timeout=self.model.config.timeout)
            self.model.live.pop(name)
        return f"abort {version} g{generation} ({len(members)} process(es))"

    def append(self, rng: random.Random, previous: str | None = None) -> str:
        """Append to a collection through the leader; ``previous``: an upgrade from that
        release is pending, so the rows also fill what it requires (a null there waits for
        the upgrade to be final)."""
        assert self.model.leader is not None and self.model.catalog_version is not None
        release = self.model.release(self.model.live[self.model.leader].version)
        names = sorted(n for n in self.model.appendable if release.builtin(n) is not None)
        # Collections some release migrates are where rows can get lost: favour them.
        weights = [4.0 if n in self.model.migrated else 1.0 for n in names]
        name = rng.choices(names, weights=weights)[0]
        builtin = release.builtin(name)
        assert builtin is not None
        token_column = self.model.appendable[name]
        self.model.checker.track(name, token_column)
        tokens = [
            f"w{self.model.config.seed}x{uuid.uuid4().hex[:10]}" for _ in range(rng.randint(1, 3))
        ]
        old = self.model.release(previous).builtin(name) if previous is not None else None
        required = [f.name for f in old.schema if not f.nullable] if old is not None else []
        rows = tuple(make_rows(builtin, token_column, tokens, required))
        before = len(self.model.run.acked)
        try:
            self.model.do("append", processes=(self.model.leader,), collection=name, rows=rows)
        except StepFailed:
            self.model.checker.unknown_outcome(name, tokens)
            raise
        if len(self.model.run.acked) > before:
            self.model.checker.acknowledged(name, tokens)
        return f"append {len(rows)} row(s) to {name} via {self.model.leader}"

    def sustain(self, rng: random.Random) -> str:
        """A sustained-write phase through the leader: a few clients append one row each in a
        loop for a few seconds while a reader reads (the ``sustain`` step checks each read's
        time and content); what they acknowledged joins what later reads must find."""
        assert self.model.leader is not None
        release = self.model.release(self.model.live[self.model.leader].version)
        names = sorted(n for n in self.model.appendable if release.builtin(n) is not None)
        name = rng.choice(names)
        builtin = release.builtin(name)
        assert builtin is not None
        token_column = self.model.appendable[name]
        self.model.checker.track(name, token_column)
        token = f"w{self.model.config.seed}s{uuid.uuid4().hex[:10]}"
        rows = tuple(make_rows(builtin, token_column, [token]))
        before = len(self.model.run.acked)
        try:
            done = self.model.do(
                "sustain", processes=(self.model.leader,), collection=name, rows=rows,
                seconds=rng.choice((2.0, 3.0)), clients=rng.randint(2, 4),
            )  # fmt: skip
        except StepFailed:
            self.model.checker.unknown_outcome(name, [token])
            raise
        finally:
            acked = len(self.model.run.acked) - before
            if acked:
                self.model.checker.acknowledged(name, [token] * acked)
        return f"sustain {name} via {self.model.leader}: {done}"

    def read(self, rng: random.Random) -> str:
        """Read a tracked collection back through the leader: exactly the acknowledged rows."""
        assert self.model.leader is not None
        release = self.model.release(self.model.live[self.model.leader].version)
        names = sorted(
            n
            for n, t in self.model.checker.tracked.items()
            if t.acked and not t.uncertain and release.builtin(n) is not None
        )
        if not names:
            return "read: nothing to read back"
        name = rng.choice(names)
        count = sum(self.model.checker.tracked[name].acked.values())
        self.model.do("read", processes=(self.model.leader,), collection=name, expect_count=count)
        return f"read {count} row(s) of {name} via {self.model.leader}"

    def start_older(self, rng: random.Random) -> str:
        assert self.model.catalog_version is not None
        current = Version.parse(self.model.catalog_version)
        version = rng.choice([v for v in self.model.versions if Version.parse(v) < current])
        generation = self.model.next_generation
        self.model.next_generation += 1
        (name,) = self.model.start(version, generation, 1)
        self.model.expect_exit(name, 4)
        return f"start older {version} g{generation}: refused"

    def start_stale(self, rng: random.Random) -> str:
        assert self.model.catalog_version is not None
        current = Version.parse(self.model.catalog_version)
        version = rng.choice([v for v in self.model.versions if Version.parse(v) >= current])
        generation = rng.randint(1, self.model.catalog_generation - 1)
        (name,) = self.model.start(version, generation, 1)
        self.model.expect_exit(name, 3)
        return f"start stale {version} g{generation}: fenced"
