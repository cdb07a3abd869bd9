"""Terminal rendering of scenario runs: a live timeline per step, and diagnostics on failure."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from orchestrator.scenario import ScenarioResult, StepResult
from orchestrator.scenario_format import Scenario

__all__ = ["render_failure", "render_header", "render_step", "render_summary"]


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
    passed = sum(r.ok for r in results)
    console.print(
        f"[bold]{passed}/{len(results)} scenario(s) passed[/], "
        f"{sum(len(r.steps) for r in results)} steps, {sum(r.faults for r in results)} faults"
    )
