"""Randomized upgrade simulation: random walks over a release history, with real processes.

``simulate`` is the upgrade matrix explored at random, with faults. Each walk starts from an
empty environment (the oldest release bootstraps it), then takes ``steps`` actions, each chosen
by ``random.Random(f"{seed}:{index}")`` from what the environment looks like:

* ``upgrade``: start 1-3 processes of a random release not older than the catalog, at a new
  deploy generation (sometimes with ``--auto-promote``); every one must reach ready;
* ``promote`` a pending generation (CLI ``promote --wait`` or ``POST /promote``): its leader
  serves, lower generations exit fenced (3), pending generations of older versions exit
  refused (4);
* ``abort`` a pending generation (SIGTERM, exit 0); ``append`` rows through the leader and
  ``read`` them back; start an ``older`` release (exit 4) or a ``stale`` generation (exit 3);
* faults, with probability ``fault_probability``: SIGKILL of a new process while it checks
  read-only, of a follower, of the leader, or of a new leader in the middle of its migration;
  a zombie leader (SIGSTOP until a follower took over, then SIGCONT and a write that must be
  refused); ZooKeeper session expiry of the leader or of a follower. A lost leader is
  replaced by a follower of its generation or, if none is left, by a restart of the same
  release.

Every action is expressed as ordinary scenario steps executed by
:class:`orchestrator.scenario.ScenarioRun`, and :mod:`orchestrator.invariants` are checked after
every action, plus the cleanup invariant at the end. A failing walk is re-run on shorter prefixes
(bisection, a bounded number of runs) and reported as the shortest failing prefix: the command
that reproduces it and its steps as a scenario file.
"""

from __future__ import annotations

import collections
import contextlib
import json
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import structlog
from kazoo.exceptions import KazooException

from catalog.environment import EPOCH_KEY
from catalog.errors import CatalogError
from catalog.release import Builtin, Release, Version
from orchestrator.invariants import InvariantChecker, Violation, describe
from orchestrator.scenario import ScenarioRun, StepFailed, ZooKeeperTarget
from orchestrator.scenario_format import ReleaseIndex, Step

__all__ = [
    "FAULT_KINDS",
    "SimulationConfig",
    "SimulationResult",
    "WalkStep",
    "appendable_collections",
    "simulate",
]

log = structlog.get_logger(__name__)

FAULT_KINDS = (
    "kill_checking",
    "kill_follower",
    "kill_leader",
    "kill_mid_migration",
    "zombie",
    "expire_follower",
    "expire_leader",
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


# --- rows to append ------------------------------------------------------------------------


def _stable_token_column(name: str, history: Sequence[Release]) -> str | None:
    """A non-null string column every release that has the collection keeps as is."""
    schemas = [b.schema for r in history if (b := r.builtin(name)) is not None]
    if not schemas:
        return None
    for field in schemas[0]:
        if field.nullable or not pa.types.is_string(field.type):
            continue
        if all(
            field.name in s.names and s.field(field.name).equals(field, check_metadata=False)
            for s in schemas
        ):
            return field.name
    return None


def _generatable(dtype: pa.DataType) -> bool:
    if pa.types.is_struct(dtype):
        return all(_generatable(f.type) for f in dtype if not f.nullable)
    return (
        pa.types.is_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_decimal(dtype)
        or pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_map(dtype)
    )


def appendable_collections(history: Sequence[Release]) -> dict[str, str]:
    """Collections the walk appends to, with their token column (the rows' identity)."""
    names = {b.name for r in history for b in r.builtins}
    out = {}
    for name in sorted(names):
        token = _stable_token_column(name, history)
        schemas = [b.schema for r in history if (b := r.builtin(name)) is not None]
        if token and all(_generatable(f.type) for s in schemas for f in s if not f.nullable):
            out[name] = token
    return out


def _value(dtype: pa.DataType, number: int) -> Any:
    if pa.types.is_struct(dtype):
        return {f.name: _value(f.type, number) for f in dtype if not f.nullable}
    if pa.types.is_string(dtype):
        return f"v{number}"
    if pa.types.is_boolean(dtype):
        return number % 2 == 0
    if pa.types.is_floating(dtype):
        return number / 2
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return []
    return number  # integers, timestamps (epoch units), decimals


def make_rows(builtin: Builtin, token_column: str, tokens: Sequence[str]) -> list[dict[str, Any]]:
    """One row per token: required columns filled, the token in its column, the rest null."""
    rows = []
    for number, token in enumerate(tokens, start=1):
        row = {f.name: _value(f.type, number) for f in builtin.schema if not f.nullable}
        row[token_column] = token
        rows.append(row)
    return rows


# --- the walk --------------------------------------------------------------------------------


@attrs.define
class Member:
    name: str
    version: str
    generation: int


class _WalkFailed(Exception):
    def __init__(self, message: str, violations: Sequence[Violation] = ()) -> None:
        super().__init__(message)
        self.violations = tuple(violations)


@attrs.define
class Walker:
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

    # -- executing scenario steps ---------------------------------------------------------------

    def do(self, action: str, **fields: Any) -> str:
        step = Step(number=len(self.recorded) + 1, line=0, action=action, **fields)
        self.recorded.append(step)
        self._current.append(step)
        return self.run.execute(step)

    def take_steps(self) -> tuple[Step, ...]:
        taken, self._current = tuple(self._current), []
        return taken

    def _name(self, version: str, generation: int) -> str:
        self.counter += 1
        return f"p{self.counter}-{version.replace('.', '_')}-g{generation}"

    def start(self, version: str, generation: int, count: int, *, auto: bool = False) -> list[str]:
        names = [self._name(version, generation) for _ in range(count)]
        self.do(
            "start",
            processes=tuple(names),
            release=version,
            generation=generation,
            auto_promote=auto,
            session_timeout=self.config.session_timeout,
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
        changed = threading.Event()
        deadline = time.monotonic() + self.config.timeout
        path = self.run.consensus.path(EPOCH_KEY)
        while True:
            changed.clear()
            data, _ = self.run.client.get(path, watch=lambda _e: changed.set())
            epoch = json.loads(data)
            if epoch["epoch"] > after_epoch and epoch["deploy_generation"] == generation:
                leader = str(epoch["leader"])
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepFailed(
                    f"no leader of generation {generation} took over after epoch {after_epoch} "
                    f"within {self.config.timeout:g} s (epoch {epoch})"
                )
            changed.wait(min(remaining, 1.0))
        if leader not in self.live:
            raise StepFailed(f"epoch {epoch['epoch']} names {leader}, which the walk never started")
        self.wait(leader, "serving")
        return leader

    # -- choosing -------------------------------------------------------------------------------

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

    def choose(self, rng: random.Random) -> str:
        room = self.config.max_processes - len(self.live)
        if rng.random() < self.config.fault_probability:
            faults = ["kill_leader", "zombie", "expire_leader"]
            if room >= 1:
                faults.append("kill_checking")
            if self.followers():
                faults += ["kill_follower", "expire_follower"]
            if self.pending():
                faults.append("kill_mid_migration")
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

    # -- actions --------------------------------------------------------------------------------

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

    def _promoted(self, version: str, generation: int) -> None:
        """After generation ``generation`` took over: who must exit, and how; the rest re-plan."""
        self._expect_exits(version, generation)
        for name in sorted(self.live):
            if name != self.leader:
                self.wait(name, "ready")

    def _expect_exits(
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

    # -- faults ---------------------------------------------------------------------------------

    def _recover(self, old_epoch: int, *, ready: bool = True) -> str:
        """The leader is gone: a follower of its generation takes over, or a restart does;
        with ``ready``, every other process is then waited for until ready again."""
        assert self.catalog_version is not None
        if not self.leader_group():
            (name,) = self.start(self.catalog_version, self.catalog_generation, 1)
            how = f"restarted as {name}"
        else:
            how = "a follower took over"
        self.leader = self.wait_takeover(old_epoch, self.catalog_generation)
        for name in sorted(self.live) if ready else ():
            if name != self.leader:
                self.wait(name, "ready")
        return f"{how}: {self.leader}"

    def _kill_checking(self, rng: random.Random) -> str:
        """SIGKILL a new read-only process while it checks (between its shard and entry
        writes, when the timing is right): what it leaves behind must not block anyone."""
        assert self.catalog_version is not None
        current = Version.parse(self.catalog_version)
        version = rng.choice([v for v in self.versions if Version.parse(v) >= current])
        generation = self.next_generation
        self.next_generation += 1
        (name,) = self.start(version, generation, 1)
        process = self.run.fleet.get(name)
        started = time.monotonic()
        delay = rng.uniform(0.0, 0.25)
        seen = None
        while time.monotonic() - started < self.config.timeout and process.running:
            node = self.run.process_node(name)
            seen = node.get("state") if node else None
            if seen in ("checking", "ready"):
                break
            time.sleep(0.005)  # racing the process on purpose: a watch round trip is too slow
        time.sleep(delay)
        node = self.run.process_node(name) or {}
        self.do(
            "kill",
            processes=(name,),
            note=f"killed {time.monotonic() - started:.3f} s after start, in state "
            f"{node.get('state')} ({node.get('phase')})",
        )
        self.live.pop(name)
        return f"SIGKILL {name} ({version} g{generation}) in state {node.get('state')}"

    def _kill_follower(self, rng: random.Random) -> str:
        name = rng.choice(self.followers())
        self.do("kill", processes=(name,))
        self.live.pop(name)
        return f"SIGKILL follower {name}"

    def _kill_leader(self, rng: random.Random) -> str:
        assert self.leader is not None
        old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
        killed = self.leader
        self.do("kill", processes=(killed,))
        self.live.pop(killed)
        return f"SIGKILL leader {killed}; " + self._recover(old_epoch)

    def _kill_mid_migration(self, rng: random.Random) -> str:
        """Promote over HTTP and SIGKILL the new leader as soon as it took over."""
        (version, generation), members = rng.choice(list(self.pending().items()))
        old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
        self.do("promote", processes=(rng.choice(members),), generation=generation)
        changed = threading.Event()
        deadline = time.monotonic() + self.config.timeout
        path = self.run.consensus.path(EPOCH_KEY)
        while True:
            changed.clear()
            data, _ = self.run.client.get(path, watch=lambda _e: changed.set())
            epoch = json.loads(data)
            if epoch["epoch"] > old_epoch and epoch["deploy_generation"] == generation:
                break
            if time.monotonic() > deadline:
                raise StepFailed(f"generation {generation} took no leadership after promotion")
            changed.wait(0.5)
        victim = str(epoch["leader"])
        if rng.random() < 0.5:
            # The other crash point: once the new leader reports it is migrating.
            with contextlib.suppress(StepFailed):
                self.run.wait_state(self.run.fleet.get(victim), "migrating", 5.0)
        node = self.run.process_node(victim) or {}
        self.do("kill", processes=(victim,), note=f"killed in state {node.get('state')}")
        self.live.pop(victim, None)
        # The promotion fences lower generations at once; refusals wait for the catalog switch,
        # which only the successor (a follower, or a restart) completes.
        self._expect_exits(version, generation, refused=False)
        recovered = self._recover(int(epoch["epoch"]), ready=False)
        self._promoted(version, generation)
        return (
            f"promote {version} g{generation}, SIGKILL its leader {victim} "
            f"(state {node.get('state')}, phase {node.get('phase')}); {recovered}"
        )

    def _zombie(self, rng: random.Random) -> str:
        assert self.leader is not None and self.catalog_version is not None
        if len(self.leader_group()) < 2:
            (spare,) = self.start(self.catalog_version, self.catalog_generation, 1)
            self.wait(spare, "ready")
        zombie = self.leader
        old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
        self.do("pause", processes=(zombie,))
        self.live.pop(zombie)
        self.leader = self.wait_takeover(old_epoch, self.catalog_generation)
        self.do("resume", processes=(zombie,))
        release = self.release(self.catalog_version)
        name = rng.choice(sorted(n for n in self.appendable if release.builtin(n) is not None))
        builtin = release.builtin(name)
        assert builtin is not None
        rows = tuple(make_rows(builtin, self.appendable[name], ["zombie"]))
        epoch = self.epoch() or {}
        try:
            self.do("append", processes=(zombie,), collection=name, rows=rows, refused=True)
        except StepFailed as exc:
            raise _WalkFailed(
                str(exc), [self.checker.stale_write(zombie, epoch.get("leader"), str(exc))]
            ) from exc
        self.checker.no_stale_write_checked()
        self.live[zombie] = Member(zombie, self.catalog_version, self.catalog_generation)
        self.expect_exit(zombie, 3)
        return f"zombie {zombie}: paused until {self.leader} took over; its write was refused"

    def _expire_follower(self, rng: random.Random) -> str:
        name = rng.choice(self.followers())
        self.do("expire", processes=(name,), timeout=self.config.timeout)
        self.wait(name, "ready")
        return f"session of follower {name} expired; ready again"

    def _expire_leader(self, rng: random.Random) -> str:
        assert self.leader is not None
        old_epoch = int((self.epoch() or {"epoch": 0})["epoch"])
        expired = self.leader
        self.do("expire", processes=(expired,), timeout=self.config.timeout)
        self.expect_exit(expired, 3)
        return f"session of leader {expired} expired (exit 3); " + self._recover(old_epoch)


# --- running walks ---------------------------------------------------------------------------


def _run_walk(
    config: SimulationConfig,
    zookeeper: ZooKeeperTarget,
    index: ReleaseIndex,
    steps: int,
    on_step: Callable[[WalkStep], None] | None,
) -> SimulationResult:
    history = index.releases()
    env = f"simulate-{config.seed}-{uuid.uuid4().hex[:8]}"
    work_dir = Path(tempfile.mkdtemp(prefix=f"{env}-"))
    run = ScenarioRun(
        zookeeper=zookeeper,
        work_dir=work_dir,
        env=env,
        release_files=index.versions(),
        default_timeout=config.timeout,
        default_session_timeout=config.session_timeout,
        rng=random.Random(config.seed),
        history=history,
        invariants=True,
    )
    walk: list[WalkStep] = []
    started = time.monotonic()
    error: str | None = None
    violations: tuple[Violation, ...] = ()
    walker: Walker | None = None
    try:
        run.open()
        assert run.checker is not None
        walker = Walker(
            run=run,
            config=config,
            history=history,
            appendable=appendable_collections(history),
            checker=run.checker,
        )
        for i in range(steps):
            rng = random.Random(f"{config.seed}:{i}")
            kind = "bootstrap" if i == 0 else walker.choose(rng)
            step_started = time.monotonic()
            try:
                description = walker.bootstrap(rng) if i == 0 else walker.act(kind, rng)
                found = run.checker.check(writes_expected=kind not in READ_ONLY_KINDS, rows=True)
                unexpected = run.unexpected_exits()
                if found:
                    raise _WalkFailed(f"invariant violated: {describe(found)}", found)
                if unexpected:
                    raise _WalkFailed("; ".join(unexpected))
            except (_WalkFailed, StepFailed, CatalogError, KazooException) as exc:
                message = exc.message if isinstance(exc, CatalogError) else str(exc) or repr(exc)
                if isinstance(exc, _WalkFailed):
                    violations = exc.violations
                error = f"walk step {i + 1} ({kind}): {message}"
                item = WalkStep(
                    i + 1,
                    kind,
                    kind,
                    False,
                    time.monotonic() - step_started,
                    walker.take_steps(),
                    message,
                )
                walk.append(item)
                if on_step is not None:
                    on_step(item)
                break
            item = WalkStep(
                i + 1,
                kind,
                description,
                True,
                time.monotonic() - step_started,
                walker.take_steps(),
            )
            walk.append(item)
            if on_step is not None:
                on_step(item)
        if error is None:
            found = run.checker.check_cleanup(timeout=config.timeout)
            if found:
                violations = tuple(found)
                error = f"after the walk: invariant violated: {describe(found)}"
    finally:
        run.close(delete_environment=error is None)
    if error is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    header = (
        f"# simulate --seed {config.seed} --steps {steps}: the scenario steps it ran\n"
        f'releases = "{config.releases_dir.resolve()}"\n\n'
        f"[defaults]\nsession_timeout = {config.session_timeout:g}\n\n"
    )
    recorded = walker.recorded if walker is not None else []
    return SimulationResult(
        seed=config.seed,
        steps_requested=steps,
        walk=tuple(walk),
        ok=error is None,
        seconds=time.monotonic() - started,
        invariants=run.checker.summary() if run.checker is not None else {},
        error=error,
        violations=violations,
        scenario_toml=header + "\n\n".join(s.to_toml() for s in recorded) + "\n",
        work_dir=None if error is None else str(work_dir),
    )


def simulate(
    config: SimulationConfig,
    *,
    zk: str | None = None,
    on_step: Callable[[WalkStep], None] | None = None,
    on_shrink: Callable[[int, bool], None] | None = None,
) -> SimulationResult:
    """Run one walk; when it fails, re-run shorter prefixes to find the shortest failing one."""
    index = ReleaseIndex(config.releases_dir)
    index.versions()  # load errors surface before any process starts
    with ZooKeeperTarget.open(zk) as target:
        result = _run_walk(config, target, index, config.steps, on_step)
        if result.ok:
            return result
        failing = len(result.walk)
        shortest, best = failing, result
        low = 1
        runs: list[tuple[int, bool]] = []
        while low < shortest and len(runs) < config.shrink_runs:
            middle = (low + shortest) // 2
            again = _run_walk(config, target, index, middle, None)
            runs.append((middle, not again.ok))
            if on_shrink is not None:
                on_shrink(middle, not again.ok)
            if again.ok:
                low = middle + 1
            else:
                shortest, best = len(again.walk), again
        return attrs.evolve(
            best,
            shortest_prefix=shortest,
            shrink_runs=tuple(runs),
            steps_requested=config.steps,
        )
