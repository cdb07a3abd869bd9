"""Terminal rendering of scenario runs and simulations: live timelines, diagnostics, summaries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from orchestrator.scenario import ScenarioResult, StepResult
from orchestrator.scenario.format import Scenario
from orchestrator.scenario.simulate import SimulationResult, WalkStep
from orchestrator.scenario.simulate.soak import SoakReport

__all__ = [
    "render_failure",
    "render_header",
    "render_simulation",
    "render_step",
    "render_summary",
    "render_walk_step",
]


def render_header(console: Console, scenario: Scenario, seed: int) -> None:
    console.print(
        f"[bold]▶ {escape(scenario.name)}[/] [dim]({escape(str(scenario.path))}, "
        f"{len(scenario.steps)} steps, seed {seed})[/]"
    )


def render_step(console: Console, result: StepResult) -> None:
    """One timeline line: number, what, duration, outcome, detail."""
    mark = "[green]ok[/]" if result.ok else "[bold red]FAIL[/]"
    detail = result.detail if result.ok else (result.error or "")
    console.print(
        f"  {result.number:>3}  {escape(result.description):<54} {result.seconds:>6.2f} s  {mark}"
        + (f"  [dim]{escape(detail[:120])}[/]" if detail and result.ok else ""),
        soft_wrap=True,
    )
    if result.note:
        console.print(f"       [italic dim]{escape(result.note)}[/]", soft_wrap=True)
    if not result.ok and detail:
        console.print(f"       [red]{escape(detail)}[/]", soft_wrap=True)


def render_failure(console: Console, result: ScenarioResult) -> None:
    """The status JSON and the tail of every process's log."""
    if result.error:
        console.print(f"[bold red]✘ {escape(result.name)}: {escape(result.error)}[/]")
    if result.status is not None:
        console.rule("status --json at the failure")
        console.print(Syntax(json.dumps(result.status, indent=2, default=str), "json"))
    for name, tail in result.logs.items():
        console.rule(f"log of {name} (tail)")
        console.print(escape(tail) if tail else "[dim](empty)[/]", soft_wrap=True)
    if result.work_dir:
        console.print(f"[dim]logs and blobs kept in {escape(result.work_dir)}[/]")


def render_summary(console: Console, results: Sequence[ScenarioResult]) -> None:
    for result in results:
        mark = "[green]✔ PASS[/]" if result.ok else "[bold red]✘ FAIL[/]"
        console.print(
            f"{mark} {escape(result.name)}: {len(result.steps)} steps, {result.faults} fault(s), "
            f"{result.seconds:.1f} s"
        )
        if result.workload is not None:
            console.print(f"  [dim]workload: {escape(result.workload)}[/]", soft_wrap=True)
    passed = sum(r.ok for r in results)
    console.print(
        f"[bold]{passed}/{len(results)} scenario(s) passed[/], "
        f"{sum(len(r.steps) for r in results)} steps, {sum(r.faults for r in results)} faults"
    )


def render_walk_step(console: Console, step: WalkStep) -> None:
    """One line per walk action (faults marked)."""
    mark = "[green]ok[/]" if step.ok else "[bold red]FAIL[/]"
    kind = f"{step.kind:<20}"
    kind = f"[yellow]{kind}[/]" if step.is_fault else kind
    console.print(
        f"  {step.index:>4}  {kind} {step.seconds:>6.2f} s  {mark}  "
        f"[dim]{escape(step.description if step.ok else '')}[/]",
        soft_wrap=True,
    )
    if not step.ok and step.error:
        console.print(f"        [red]{escape(step.error)}[/]", soft_wrap=True)


def render_simulation(
    console: Console, result: SimulationResult, releases: str, flags: str = ""
) -> None:
    """Faults injected, invariants checked (and caught), and on failure how to reproduce
    (``flags``: the walk's other options, e.g. ``--zk-servers 3 --partitions``)."""
    table = Table(title="invariants", title_justify="left")
    table.add_column("invariant")
    table.add_column("checks", justify="right")
    table.add_column("caught", justify="right")
    for name, counts in result.invariants.items():
        caught = counts.get("caught", 0)
        table.add_row(name, str(counts.get("checks", 0)), f"[red]{caught}[/]" if caught else "0")
    console.print(table)
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items())) or "none"
    console.print(
        f"seed {result.seed}: {len(result.walk)} walk step(s), {result.scenario_steps} scenario "
        f"step(s), faults: {faults}, {result.seconds:.1f} s"
    )
    if result.ok:
        console.print("[green]✔ every invariant held[/]")
        return
    console.print(f"[bold red]✘ {escape(result.error or 'failed')}[/]", soft_wrap=True)
    if result.shrink_runs:
        tried = ", ".join(f"{n} ({'fails' if f else 'passes'})" for n, f in result.shrink_runs)
        console.print(f"[dim]shrinking re-ran prefixes of {tried}[/]")
    prefix = result.shortest_prefix or len(result.walk)
    console.print(
        f"shortest failing prefix: {prefix} step(s); reproduce with\n"
        f"  catalog-upgrade scenario simulate --releases {escape(releases)}"
        f"{escape(' ' + flags if flags else '')} --seed {result.seed} --steps {prefix}",
        soft_wrap=True,
    )
    if result.work_dir:
        path = Path(result.work_dir) / "failing-walk.toml"
        path.write_text(result.scenario_toml)
        console.print(
            f"its scenario steps: {escape(str(path))} (logs in {escape(result.work_dir)}/logs)",
            soft_wrap=True,
        )


def render_soak_seed(console: Console, number: int, total: int, result: SimulationResult) -> None:
    """One line as each seed of a soak ends."""
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items())) or "no faults"
    mark = "[green]ok[/]" if result.ok else "[bold red]FAILED[/]"
    line = (
        f"seed {number}/{total} [bold]{result.seed}[/]: {mark}, {len(result.walk)} step(s), "
        f"{escape(faults)}, {result.seconds:.0f} s"
    )
    if not result.ok:
        line += f"\n  {escape(result.error or 'failed')}"
    console.print(line, soft_wrap=True)


def render_soak(console: Console, report: SoakReport) -> None:
    """The soak's table of seeds, its faults by kind, and each failure with its replay."""
    table = Table(title="soak", title_justify="left")
    for name, justify in (("seed", "right"), ("result", "left"), ("steps", "right"),
                          ("faults", "right"), ("checks", "right"), ("s", "right")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for run in report.to_json()["runs"]:
        table.add_row(
            str(run["seed"]),
            "ok" if run["ok"] else f"[red]failed at {run['shortest_prefix'] or run['steps']}[/]",
            str(run["steps"]),
            str(sum(run["faults"].values())),
            str(run["invariants_checked"]),
            f"{run['seconds']:.0f}",
        )
    console.print(table)
    faults = ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items())) or "none"
    console.print(f"faults by kind: {escape(faults)}", soft_wrap=True)
    summary = report.to_json()
    console.print(
        f"{summary['seeds']} seed(s), {summary['walk_steps']} walk step(s), "
        f"{summary['scenario_steps']} scenario step(s), {summary['invariants_checked']} "
        f"invariant checks, {report.seconds / 60:.1f} min"
    )
    if not report.failures:
        console.print("[green]✔ every seed held every invariant[/]")
        return
    console.print(f"[bold red]✘ {len(report.failures)} seed(s) failed[/]")
    for run in summary["runs"]:
        if not run["ok"]:
            console.print(
                f"  seed {run['seed']}: {escape(run['error'] or 'failed')}\n"
                f"    replay: {escape(run['replay'])}\n    kept in {escape(str(run['work_dir']))}",
                soft_wrap=True,
            )
