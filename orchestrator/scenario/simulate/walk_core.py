"""The model a walker moves: its run, its members, and steps executed through the runner."""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until, watched_data
from catalog.environment import EPOCH_KEY
from catalog.release import Release, Version
from orchestrator.scenario import ScenarioRun, StepFailed
from orchestrator.scenario.format import STEP_KINDS, Step
from orchestrator.scenario.invariants import InvariantChecker
from orchestrator.scenario.simulate.values import Member, SimulationConfig


@attrs.define
class WalkModel:
    """The model of one environment and the actions that move it."""

    run: ScenarioRun
    config: SimulationConfig
    history: Sequence[Release]
    appendable: Mapping[str, str]
    checker: InvariantChecker
    live: dict[str, Member] = attrs.field(factory=dict)
    migrated: frozenset[str] = attrs.field(init=False)
    catalog_version: str | None = None
    catalog_generation: int = 0
    next_generation: int = 1
    leader: str | None = None
    counter: int = 0
    recorded: list[Step] = attrs.field(factory=list)
    _current: list[Step] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.migrated = frozenset(m.name for r in self.history for m in r.migrations)

    @property
    def versions(self) -> list[str]:
        return [str(r.version) for r in self.history]

    def release(self, version: str) -> Release:
        return next(r for r in self.history if str(r.version) == version)

    def do(self, action: str, **fields: Any) -> str:
        step = STEP_KINDS[action](number=len(self.recorded) + 1, **fields)
        self.recorded.append(step)
        self._current.append(step)
        return self.run.execute(step)

    def take_steps(self) -> tuple[Step, ...]:
        taken, self._current = tuple(self._current), []
        return taken

    def _name(self, version: str, generation: int) -> str:
        self.counter += 1
        return f"p{self.counter}-{version.replace('.', '_')}-g{generation}"

    def start(
        self,
        version: str,
        generation: int,
        count: int,
        *,
        auto: bool = False,
        lose_answer_after_write: int | None = None,
        **window: Any,
    ) -> list[str]:
        """Start ``count`` processes; ``window``: the start step's finalize_after,
        rollback_from and discard_writes_to."""
        names = [self._name(version, generation) for _ in range(count)]
        self.do(
            "start",
            processes=tuple(names),
            release=version,
            generation=generation,
            auto_promote=auto,
            session_timeout=self.config.session_timeout,
            lose_answer_after_write=lose_answer_after_write,
            **window,
        )
        for name in names:
            self.live[name] = Member(name, version, generation)
        return names

    def wait(self, name: str, state: str) -> None:
        self.do("wait", processes=(name,), state=state, timeout=self.config.timeout)

    def expect_exit(self, name: str, code: int) -> None:
        self.do("expect_exit", processes=(name,), code=code, timeout=self.config.timeout)
        self.live.pop(name, None)

    def epoch(self) -> dict[str, Any] | None:
        found = self.run.consensus.get_json(EPOCH_KEY)
        return found[0] if found else None

    def wait_takeover(self, after_epoch: int, generation: int) -> str:
        """Wait (on a watch of the epoch) for a leader of ``generation`` newer than
        ``after_epoch``; wait for it to serve; its name."""
        epoch = self.await_epoch(after_epoch, generation)
        leader = str(epoch["leader"])
        if leader not in self.live:
            raise StepFailed(f"epoch {epoch['epoch']} names {leader}, which the walk never started")
        self.wait(leader, "serving")
        return leader

    def pending(self) -> dict[tuple[str, int], list[str]]:
        groups: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        for m in self.live.values():
            if m.generation > self.catalog_generation:
                groups[(m.version, m.generation)].append(m.name)
        return dict(sorted(groups.items(), key=lambda kv: kv[0][1]))

    def followers(self) -> list[str]:
        return sorted(n for n in self.live if n != self.leader)

    def leader_group(self) -> list[str]:
        return sorted(
            n
            for n, m in self.live.items()
            if m.generation == self.catalog_generation and m.version == self.catalog_version
        )

    def promoted(self, version: str, generation: int) -> None:
        """After generation ``generation`` took over: who must exit, and how; the rest re-plan."""
        if self.catalog_version is not None:
            self.checker.row_rules.moved(self.catalog_version, version)
        self.expect_exits(version, generation)
        for name in sorted(self.live):
            if name != self.leader:
                self.wait(name, "ready")

    def expect_exits(
        self, version: str, generation: int, *, fenced: bool = True, refused: bool = True
    ) -> None:
        """Generation ``generation`` of ``version`` was promoted: lower generations are fenced
        (3) at once; higher generations of older versions are refused (4) once the catalog is
        at ``version``."""
        self.catalog_version, self.catalog_generation = version, generation
        target = Version.parse(version)
        for name, member in sorted(self.live.items()):
            if member.generation < generation and fenced:
                self.expect_exit(name, 3)
            elif (
                refused
                and member.generation > generation
                and Version.parse(member.version) < target
            ):
                self.expect_exit(name, 4)

    def await_epoch(
        self, after_epoch: int, generation: int, *, safety: float = 1.0
    ) -> dict[str, Any]:
        """The epoch record once a leader of ``generation`` took over after ``after_epoch``
        (on a watch of the epoch node); StepFailed after the walk's timeout."""
        path = self.run.consensus.path(EPOCH_KEY)
        seen: dict[str, Any] | None = None

        def look(watch: Watch) -> dict[str, Any] | NotYet:
            nonlocal seen
            found = watched_data(self.run.client, path, watch)
            seen = None if found is None else json.loads(found[0])
            if seen and seen["epoch"] > after_epoch and seen["deploy_generation"] == generation:
                return seen
            return NOT_YET

        try:
            return wait_until(look, self.config.timeout, safety=safety)
        except WaitTimeout:
            raise StepFailed(
                f"no leader of generation {generation} took over after epoch {after_epoch} "
                f"within {self.config.timeout:g} s (epoch {seen})"
            ) from None
