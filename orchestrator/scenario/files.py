"""Running scenario files: validate them all first, then run each in a fresh environment."""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException

from catalog.errors import BadInputError, CatalogError
from orchestrator.scenario.acting import acting_run
from orchestrator.scenario.format import (
    ReleaseIndex,
    Scenario,
    Step,
    load_scenario,
)
from orchestrator.scenario.history import check_history, summary, write_history
from orchestrator.scenario.invariants import describe
from orchestrator.scenario.results import FAULT_ACTIONS, ScenarioResult, StepFailed, StepResult
from orchestrator.scenario.runner import ScenarioRun
from orchestrator.scenario.target import ZooKeeperTarget
from orchestrator.scenario.workload import Workload, row_counts
from orchestrator.testing.netns import unavailable


def _environment_name(scenario: Scenario) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in scenario.path.stem.lower())[:30]
    return f"scenario-{slug}-{uuid.uuid4().hex[:8]}"


def run_scenario(
    scenario: Scenario,
    zookeeper: ZooKeeperTarget,
    *,
    seed: int,
    on_step: Callable[[StepResult], None] | None = None,
    keep_work_dir: bool = False,
) -> ScenarioResult:
    """Run one validated scenario in a fresh environment; never raises for a failed step."""
    env = _environment_name(scenario)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{env}-"))
    run = acting_run(
        zookeeper=zookeeper,
        work_dir=work_dir,
        env=env,
        release_files=scenario.release_files,
        default_timeout=scenario.defaults.timeout,
        default_session_timeout=scenario.defaults.session_timeout,
        rng=random.Random(seed),
        history=scenario.history,
        invariants=scenario.defaults.invariants,
        partitioned=scenario.partitioned,
    )
    results: list[StepResult] = []
    started = time.monotonic()
    error: str | None = None
    timeline: list[tuple[float, str]] = []
    workload_outcome: str | None = None
    try:
        reason = unavailable() if scenario.needs_namespaces else None
        if reason is not None:
            error = f"its partition steps need network namespaces: {reason}"
        run.open()
        if scenario.workload is not None and error is None:
            run.workload = Workload(scenario.workload, run.leaders).start()
        for step in scenario.steps if error is None else ():
            if run.workload is not None:
                timeline.append((run.workload.now(), f"step {step.number}: {step.describe()}"))
            result = _run_step(run, step)
            results.append(result)
            if on_step is not None:
                on_step(result)
            if not result.ok:
                error = f"step {step.number} (line {step.line}) {step.action}: {result.error}"
                break
        if error is None:
            unexpected = run.unexpected_exits()
            if unexpected:
                error = "; ".join(unexpected)
        if run.workload is not None:
            workload_outcome, problem = _check_workload(run, timeline, checked=error is None)
            error = error or problem
        status: Mapping[str, Any] | None = None
        logs: dict[str, str] = {}
        if error is not None:
            with contextlib.suppress(Exception):  # diagnostics only: never hide the failure
                status = run.status()
            logs = {name: p.tail_log() for name, p in run.sidecars.processes.items()}
            logs.update(zookeeper.tail_logs(20))
    finally:
        if run.workload is not None:
            run.workload.stop()  # idempotent: its threads are done when it was checked
        run.close(delete_environment=error is None)
    ok = error is None
    if ok and not keep_work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return ScenarioResult(
        path=str(scenario.path),
        name=scenario.name,
        env=env,
        seed=seed,
        ok=ok,
        seconds=time.monotonic() - started,
        steps=tuple(results),
        error=error,
        status=status,
        logs=logs,
        work_dir=None if ok and not keep_work_dir else str(work_dir),
        faults=sum(1 for r in results if r.action in FAULT_ACTIONS and r.ok),
        workload=workload_outcome,
    )


def _run_step(run: ScenarioRun, step: Step) -> StepResult:
    """One step, then the invariants it asks for: its result, failed when either fails."""
    started = time.monotonic()
    try:
        detail = run.execute(step)
        violations = run.check_invariants(step)
        if violations:
            raise StepFailed(f"invariant violated: {describe(violations)}")
    except (StepFailed, CatalogError, KazooException) as exc:
        if isinstance(exc, StepFailed):
            message = str(exc)
        else:
            message = exc.message if isinstance(exc, CatalogError) else repr(exc)
        return _result(step, started, error=message)
    return _result(step, started, detail=detail)


def _check_workload(
    run: ScenarioRun, timeline: list[tuple[float, str]], *, checked: bool
) -> tuple[str, str | None]:
    """Stop the workload, read the collection from the leader, check the client history
    (when the steps passed: ``checked``); its summary and the violation, if any. The history
    and a timeline are written to the run's directory whenever it is kept."""
    workload = run.workload
    assert workload is not None
    workload.stop()
    outcome = summary(workload.operations, workload.reads)
    problem = None
    if checked:
        final = _final_rows(run, workload.spec.collection)
        if final is None:
            problem = "client history: no leader served a read of the final contents"
        else:
            violations = check_history(workload.operations, workload.reads, final)
            if violations:
                shown = "; ".join(violations[:5])
                more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
                problem = f"client history: {shown}{more}"
    timeline.append((workload.now(), f"checked: {problem or 'history holds'}"))
    if problem is not None or not checked:
        history, text = write_history(run.work_dir, workload.operations, workload.reads, timeline)
        outcome += f"; history in {history}, timeline in {text}"
    return outcome, problem


def _final_rows(run: ScenarioRun, collection: str) -> dict[str, int] | None:
    """The workload rows' counts, read from a serving leader (waiting up to the scenario's
    timeout for one); None when none answered."""
    deadline = time.monotonic() + run.default_timeout
    while time.monotonic() < deadline:
        for process in run.leaders()[:1]:
            answer = process.request("GET", f"/read?collection={collection}", timeout=10.0)
            if answer.status == 200:
                return row_counts(answer)
        time.sleep(0.5)
    return None


def load_all(files: Sequence[Path], *, restartable: bool) -> list[Scenario]:
    """Validate every file before anything runs (BadInputError, exit 2, on the first bad one)."""
    indexes: dict[Path, ReleaseIndex] = {}
    scenarios = []
    for file in files:
        scenario = load_scenario(file, indexes=indexes)
        step = scenario.zookeeper_step
        if step is not None and not restartable:
            raise BadInputError(
                f"{file}:{step.line}: step {step.number} ({step.action}) stops or cuts "
                "ZooKeeper servers, which only the embedded ones allow: run without "
                "--zk/CATALOG_UPGRADE_ZK",
                path=str(file),
                step=step.number,
                line=step.line,
            )
        scenarios.append(scenario)
    return scenarios


def run_files(
    files: Sequence[Path],
    *,
    zk: str | None,
    seed: int,
    on_start: Callable[[Scenario], None] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
    on_done: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Validate all files, then run each in its own environment; the results in order."""
    scenarios = load_all(files, restartable=not zk)
    results = []
    with contextlib.ExitStack() as stack:
        # By server count and whether partitioned processes must reach it; started when needed.
        # An ensemble cut by partition_zookeeper runs its servers in namespaces (where it can:
        # elsewhere the scenario fails naming the reason before its first step).
        targets: dict[tuple[int, bool, bool], ZooKeeperTarget] = {}
        for scenario in scenarios:
            if on_start is not None:
                on_start(scenario)
            servers = 1 if zk else scenario.defaults.zookeeper_servers
            isolated = scenario.partitions_zookeeper and unavailable() is None
            wanted = (servers, bool(scenario.partitioned), isolated)
            if wanted not in targets:
                targets[wanted] = stack.enter_context(
                    ZooKeeperTarget.open(
                        zk, servers=servers, every_address=wanted[1], isolated=isolated
                    )
                )
            result = run_scenario(scenario, targets[wanted], seed=seed, on_step=on_step)
            results.append(result)
            if on_done is not None:
                on_done(result)
    return results


def _result(
    step: Step, started: float, *, error: str | None = None, detail: str = ""
) -> StepResult:
    """The outcome of one step: failed when ``error`` says why, else passed with ``detail``."""
    return StepResult(
        step.number,
        step.line,
        step.action,
        step.describe(),
        error is None,
        time.monotonic() - started,
        detail=detail,
        error=error,
        note=step.note,
    )
