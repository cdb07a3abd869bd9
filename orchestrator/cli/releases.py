"""``plan`` and ``validate``: release histories, without ZooKeeper."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from catalog.release import ValidationReport
from catalog.release.findings import ADVISORY, CATEGORIES
from orchestrator.cli.root import handle_errors, main, zk_options

#: The release directory that plan and validate read.
releases_option = click.option(
    "--releases",
    "releases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of release files (*.py defining RELEASE).",
)


#: --fail-on, as plan and validate take it.
fail_on_option = click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    type=click.Choice(CATEGORIES),
    help="Exit 4 when a finding of this category exists (repeatable; default: every category "
    "but data-dependent-cost and version-bump).",
)
#: --rows, as plan and validate take it.
rows_option = click.option(
    "--rows",
    "with_rows",
    is_flag=True,
    help="Give each data-dependent cost the collection's rows in the environment of --zk/--env.",
)


@main.command("plan")
@releases_option
@click.option("--from", "from_version", required=True, help="Version the catalog is at.")
@click.option("--to", "to_version", required=True, help="Version to upgrade to.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and its findings as JSON.")
@fail_on_option
@rows_option
@zk_options
@handle_errors
def plan_command(
    releases_dir: Path,
    from_version: str,
    to_version: str,
    as_json: bool,
    fail_on: tuple[str, ...],
    with_rows: bool,
    zk: str,
    env: str,
) -> None:
    """Show the merged migration plan FROM -> TO, without touching ZooKeeper (but for --rows).

    The findings are validate's for this one path. A refused path exits 4 as before; with
    --fail-on, a finding of a chosen category exits 4 too."""
    from rich.console import Console

    from catalog.errors import EXIT_REFUSED, CatalogError
    from catalog.release import load_release_dir, plan_path, validate
    from catalog.release.levels import path_level
    from catalog.release.version import to_version as version_of
    from orchestrator.render.plan import plan_json, render_findings, render_plan

    releases = load_release_dir(releases_dir)
    refusal: CatalogError | None = None
    try:
        result = plan_path(releases, from_version, to_version)
    except CatalogError as exc:
        if exc.exit_code != EXIT_REFUSED:
            raise
        refusal, result = exc, None
    report = validate(releases).between(version_of(from_version), version_of(to_version))
    if with_rows:
        report = _with_rows(report, zk, env)
    level = path_level(releases, from_version, to_version)
    if as_json:
        click.echo(plan_json(result, report, refusal, from_version, to_version, level))
    else:
        if result is not None:  # a refusal is its own finding, on stderr
            render_plan(result, Console(), level)
            render_findings(report, Console())
    if refusal is not None:
        raise refusal
    if fail_on and report.fails_on(fail_on):
        sys.exit(EXIT_REFUSED)


def _with_rows(report: ValidationReport, zk: str, env: str) -> ValidationReport:
    """``report`` with each data-dependent cost's rows in the environment (``--rows``)."""
    from orchestrator.drift import collection_rows
    from orchestrator.zookeeper.clients import open_consensus

    with open_consensus(zk, env) as consensus:
        return report.with_rows(collection_rows(consensus))


@main.command("validate")
@releases_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_on_option
@rows_option
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
        report = _with_rows(report, zk, env)
    if as_json:
        click.echo(report_json(report))
    else:
        render_report(report, Console())
    blocking = fail_on or tuple(c for c in CATEGORIES if c not in ADVISORY)
    if report.fails_on(blocking):
        sys.exit(EXIT_REFUSED)
