"""Running walks: seeded, checked by the invariants, a failure shrunk to its shortest prefix."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import structlog
from kazoo.exceptions import KazooException

from catalog.errors import CatalogError
from orchestrator.scenario import ScenarioRun, StepFailed, ZooKeeperTarget
from orchestrator.scenario.acting import acting_run
from orchestrator.scenario.format import ReleaseIndex
from orchestrator.scenario.invariants import Violation, describe
from orchestrator.scenario.simulate.traced_rows import appendable_collections
from orchestrator.scenario.simulate.values import (
    READ_ONLY_KINDS,
    SimulationConfig,
    SimulationResult,
    WalkFailed,
    WalkStep,
)
from orchestrator.scenario.simulate.walker import Walker

log = structlog.get_logger(__name__)


def _run_walk(
    config: SimulationConfig,
    zookeeper: ZooKeeperTarget,
    index: ReleaseIndex,
    steps: int,
    on_step: Callable[[WalkStep], None] | None,
) -> SimulationResult:
    history = index.releases()
    env = f"simulate-{config.seed}-{uuid.uuid4().hex[:8]}"
    work_dir = _work_dir(config, env, steps)
    restored = zookeeper.restore(config.timeout)  # whatever a run before this one broke
    if restored is not None:
        log.info("zookeeper_restored", seed=config.seed, done=restored)
    run = acting_run(
        zookeeper=zookeeper,
        work_dir=work_dir,
        env=env,
        release_files=index.versions(),
        default_timeout=config.timeout,
        default_session_timeout=config.session_timeout,
        rng=random.Random(config.seed),
        history=history,
        invariants=True,
        isolate_all=config.isolates_processes,
    )
    walk: list[WalkStep] = []
    started = time.monotonic()
    error: str | None = None
    violations: tuple[Violation, ...] = ()
    walker: Walker | None = None
    try:
        run.open()
        assert run.checker is not None
        walker = Walker.of(
            run=run,
            config=config,
            history=history,
            appendable=appendable_collections(history),
            checker=run.checker,
        )
        for i in range(steps):
            item, violations = _step(run, walker, config.seed, i)
            walk.append(item)
            if on_step is not None:
                on_step(item)
            if not item.ok:
                error = f"walk step {i + 1} ({item.kind}): {item.error}"
                break
        if error is None:
            found = run.checker.check_cleanup(timeout=config.timeout)
            if found:
                violations = tuple(found)
                error = f"after the walk: invariant violated: {describe(found)}"
    finally:
        run.close(delete_environment=error is None)
    recorded = walker.recorded if walker is not None else []
    result = SimulationResult(
        seed=config.seed,
        steps_requested=steps,
        walk=tuple(walk),
        ok=error is None,
        seconds=time.monotonic() - started,
        invariants=run.checker.summary() if run.checker is not None else {},
        error=error,
        violations=violations,
        scenario_toml=_replay_header(config, steps)
        + "\n\n".join(s.to_toml() for s in recorded)
        + "\n",
        work_dir=None if error is None and config.keep_dir is None else str(work_dir),
    )
    if result.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:  # the history beside the processes' logs: replayable with `scenario run`
        (work_dir / "scenario.toml").write_text(result.scenario_toml)
        (work_dir / "result.json").write_text(
            json.dumps(result.to_json(), indent=2, default=str) + "\n"
        )
    return result


def _work_dir(config: SimulationConfig, env: str, steps: int) -> Path:
    """Where a walk's processes keep their logs: under ``keep_dir`` when every run keeps its
    history and logs, else a temporary directory."""
    if config.keep_dir is None:
        return Path(tempfile.mkdtemp(prefix=f"{env}-"))
    work_dir = config.keep_dir / f"seed-{config.seed}-steps-{steps}-{uuid.uuid4().hex[:6]}"
    work_dir.mkdir(parents=True)
    return work_dir


def _step(
    run: ScenarioRun, walker: Walker, seed: int, i: int
) -> tuple[WalkStep, tuple[Violation, ...]]:
    """Step ``i`` of a walk (the bootstrap first), checked: what it did, or why it failed (a
    failed step's ``error``), with the invariants it broke."""
    assert run.checker is not None
    rng = random.Random(f"{seed}:{i}")
    kind = "bootstrap" if i == 0 else walker.choose(rng)
    step_started = time.monotonic()
    try:
        description = walker.bootstrap(rng) if i == 0 else walker.act(kind, rng)
        found = run.checker.check(writes_expected=kind not in READ_ONLY_KINDS, rows=True)
        unexpected = run.unexpected_exits()
        if found:
            raise WalkFailed(f"invariant violated: {describe(found)}", found)
        if unexpected:
            raise WalkFailed("; ".join(unexpected))
    except (WalkFailed, StepFailed, CatalogError, KazooException) as exc:
        message = exc.message if isinstance(exc, CatalogError) else str(exc) or repr(exc)
        violations = exc.violations if isinstance(exc, WalkFailed) else ()
        seconds = time.monotonic() - step_started
        failed = WalkStep(i + 1, kind, kind, False, seconds, walker.take_steps(), message)
        return failed, violations
    seconds = time.monotonic() - step_started
    return WalkStep(i + 1, kind, description, True, seconds, walker.take_steps()), ()


def _replay_header(config: SimulationConfig, steps: int) -> str:
    """The head of the scenario file a walk records: its releases and defaults."""
    servers = config.zookeeper_servers
    return (
        f"# simulate --seed {config.seed} --steps {steps}: the scenario steps it ran\n"
        f'releases = "{config.releases_dir.resolve()}"\n\n'
        f"[defaults]\nsession_timeout = {config.session_timeout:g}\n"
        + (f"zookeeper_servers = {servers}\n" if servers > 1 else "")
        + "\n"
    )


def walk_target(
    config: SimulationConfig, zk: str | None
) -> contextlib.AbstractContextManager[ZooKeeperTarget]:
    """The ZooKeeper ``config``'s walks need: ``zk`` when given, else an embedded server or
    ensemble (its servers, or every process, in network namespaces when partitioned)."""
    return ZooKeeperTarget.open(
        zk,
        servers=config.zookeeper_servers,
        every_address=config.isolates_processes,
        isolated=config.isolates_servers,
    )


def simulate(
    config: SimulationConfig,
    *,
    zk: str | None = None,
    target: ZooKeeperTarget | None = None,
    on_step: Callable[[WalkStep], None] | None = None,
    on_shrink: Callable[[int, bool], None] | None = None,
) -> SimulationResult:
    """Run one walk; when it fails, re-run shorter prefixes to find the shortest failing one.

    ZooKeeper is ``target`` when given (servers the caller runs), else ``zk``, else an
    embedded server or ensemble of ``config.zookeeper_servers`` for the duration."""
    index = ReleaseIndex(config.releases_dir)
    index.versions()  # load errors surface before any process starts
    with contextlib.ExitStack() as stack:
        if target is None:
            target = stack.enter_context(walk_target(config, zk))
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
