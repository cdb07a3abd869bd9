"""``plan`` and ``validate``: release histories, without ZooKeeper."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from catalog.release.findings import CATEGORIES
from orchestrator.cli.root import handle_errors, main, zk_options

#: The release directory that plan and validate read.
releases_option = click.option(
    "--releases",
    "releases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of release files (*.py defining RELEASE).",
)


@main.command("plan")
@releases_option
@click.option("--from", "from_version", required=True, help="Version the catalog is at.")
@click.option("--to", "to_version", required=True, help="Version to upgrade to.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@handle_errors
def plan_command(releases_dir: Path, from_version: str, to_version: str, as_json: bool) -> None:
    """Show the merged migration plan FROM -> TO, without touching ZooKeeper."""
    from rich.console import Console

    from catalog.release import load_release_dir, plan_path
    from orchestrator.render.plan import plan_json, render_plan

    result = plan_path(load_release_dir(releases_dir), from_version, to_version)
    if as_json:
        click.echo(plan_json(result))
    else:
        render_plan(result, Console())


@main.command("validate")
@releases_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    type=click.Choice(CATEGORIES),
    help="Exit 4 when a finding of this category exists (repeatable; default: every category "
    "but data-dependent-cost).",
)
@click.option(
    "--rows",
    "with_rows",
    is_flag=True,
    help="Give each data-dependent cost the collection's rows in the environment of --zk/--env.",
)
@zk_options
@handle_errors
def validate_command(
    releases_dir: Path, as_json: bool, fail_on: tuple[str, ...], with_rows: bool, zk: str, env: str
) -> None:
    """Check every upgrade path between the releases in DIR; exit 4 if any fails."""
    from rich.console import Console

    from catalog.errors import EXIT_REFUSED
    from catalog.release import load_release_dir, validate
    from orchestrator.render.plan import render_report, report_json

    releases = load_release_dir(releases_dir)
    console = Console(stderr=True)
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        columns = [BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress("upgrade paths", *columns, console=console, transient=True) as progress:
            task = progress.add_task("validate", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            report = validate(releases, on_progress=advance)
    else:
        report = validate(releases)
    if with_rows:
        from orchestrator.drift import collection_rows
        from orchestrator.zk import open_consensus

        with open_consensus(zk, env) as consensus:
            report = report.with_rows(collection_rows(consensus))
    if as_json:
        click.echo(report_json(report))
    else:
        render_report(report, Console())
    blocking = fail_on or tuple(c for c in CATEGORIES if c != "data-dependent-cost")
    if report.fails_on(blocking):
        sys.exit(EXIT_REFUSED)
