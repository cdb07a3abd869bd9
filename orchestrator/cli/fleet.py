"""``catalog-upgrade fleet``: every environment on one or more ensembles, and ``fleet finalize``.

Exit codes: ``fleet`` exits 0, or 1 when an ensemble did not answer or an environment could not
be read (each is a row with its error); ``fleet finalize`` exits 0 when every target was
finalized (or already was), 1 when any failed (each outcome is reported); bad input is 2.
"""

from __future__ import annotations

import getpass
import json
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from catalog.errors import EXIT_UNEXPECTED
from orchestrator.cli.options import Duration, http_access_options
from orchestrator.cli.root import F, handle_errors, main, zk_connection_options

if TYPE_CHECKING:
    from orchestrator.http.authorization import HttpAccess


def _fleet_options(func: F) -> F:
    """Where the fleet is: a fleet file, or one ``--zk``; how long an ensemble may take."""
    func = zk_connection_options(func)
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=None,
        metavar="SECONDS",
        help="How long each ensemble may take to answer (default: "
        "CATALOG_UPGRADE_CONNECT_TIMEOUT, else 10).",
    )(func)
    return click.option(
        "--fleet-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        envvar="CATALOG_UPGRADE_FLEET_FILE",
        help="TOML file naming the ensembles, their credentials and TLS (see the manual); "
        "without it, the one ensemble of --zk.",
    )(func)


def _surveyor(fleet_file: Path | None, zk: str, timeout: float | None, **kept: Any) -> Any:
    from orchestrator.fleet.ensembles import FleetFile
    from orchestrator.fleet.surveyor import Surveyor
    from orchestrator.zookeeper.clients import default_connect_timeout

    fleet = FleetFile.load(fleet_file) if fleet_file is not None else FleetFile.single(zk)
    return Surveyor(fleet, timeout or default_connect_timeout(), **kept)


@main.group("fleet", invoke_without_command=True)
@_fleet_options
@click.option("--stuck", is_flag=True, help="Only environments that are stuck.")
@click.option("--pending", is_flag=True, help="Only environments with an upgrade pending.")
@click.option("--version", "version", default=None, help="Only environments running VERSION.")
@click.option("--env", "env_glob", default=None, metavar="GLOB", help="Only names matching GLOB.")
@click.option(
    "--unpromoted-after",
    type=Duration(),
    default=None,
    help="A green generation waiting longer is stuck (default 6h, or the fleet file's).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document (lines with --watch).")
@click.option("--watch", is_flag=True, help="Survey again every --interval until interrupted.")
@click.option("--interval", type=click.FloatRange(min=0.5), default=5.0, show_default=True)
@click.option(
    "--serve",
    default=None,
    metavar="HOST:PORT",
    help="Serve the fleet page, its JSON (/status) and metrics (/metrics) until interrupted.",
)
@http_access_options
@handle_errors
@click.pass_context
def fleet_command(
    ctx: click.Context,
    fleet_file: Path | None,
    zk: str,
    timeout: float | None,
    stuck: bool,
    pending: bool,
    version: str | None,
    env_glob: str | None,
    unpromoted_after: float | None,
    as_json: bool,
    watch: bool,
    interval: float,
    serve: str | None,
    http_token_file: str | None,
    http_read_token_file: str | None,
    http_allowed_hosts: tuple[str, ...],
    metrics_public: bool,
    http_insecure: bool,
    http_tls_cert: str | None,
    http_tls_key: str | None,
) -> None:
    """Every environment on the fleet's ensembles: one line each, then a summary."""
    import attrs

    from orchestrator.fleet.report import FleetFilter

    ctx.obj = {"fleet_file": fleet_file, "zk": zk, "timeout": timeout}
    if ctx.invoked_subcommand is not None:
        return
    surveyor = _surveyor(fleet_file, zk, timeout, keep=watch or serve is not None)
    if unpromoted_after is not None:
        thresholds = attrs.evolve(surveyor.fleet.thresholds, unpromoted_after=unpromoted_after)
        surveyor.fleet = attrs.evolve(surveyor.fleet, thresholds=thresholds)
    chosen = FleetFilter(stuck=stuck, pending=pending, version=version, env=env_glob)
    try:
        if serve is not None:
            from orchestrator.http.authorization import HttpAccess

            access = HttpAccess(
                http_token_file, http_read_token_file, http_allowed_hosts, metrics_public,
                http_insecure, http_tls_cert, http_tls_key,
            )  # fmt: skip
            _serve(surveyor, serve, access)
        elif watch:
            _watch(surveyor, chosen, as_json, interval)
        else:
            report = surveyor.report(chosen)
            _show(report, as_json)
            if any(e.row.error or e.row.errors for e in report.entries):
                sys.exit(EXIT_UNEXPECTED)
    finally:
        surveyor.close()


def _show(report: Any, as_json: bool, *, lines: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=None if lines else 2))
        return
    from rich.console import Console

    from orchestrator.render.fleet import render_fleet

    Console().print(render_fleet(report))


def _watch(surveyor: Any, chosen: Any, as_json: bool, interval: float) -> None:
    from rich.console import Console
    from rich.live import Live

    from orchestrator.render.fleet import render_fleet

    stop = threading.Event()
    console = Console()
    try:
        if as_json or not console.is_terminal:
            last = None
            while True:
                report = surveyor.report(chosen)
                seen = [(e.row.name, e.state, e.row.version, e.row.leader) for e in report.shown]
                if seen != last:  # a log or a pipe: a new document when something changed
                    last = seen
                    _show(report, as_json, lines=True)
                if stop.wait(interval):
                    return
        with Live(console=console, auto_refresh=False) as live:
            while True:
                live.update(render_fleet(surveyor.report(chosen)), refresh=True)
                if stop.wait(interval):
                    return
    except KeyboardInterrupt:
        stop.set()


def _serve(surveyor: Any, address: str, access: HttpAccess) -> None:
    from orchestrator.cli.servers import serve_until_stopped
    from orchestrator.fleet.server import fleet_api, fleet_page
    from orchestrator.http.server import parse_address
    from orchestrator.sidecar.server import configured_server

    host, port = parse_address(address)
    server = configured_server(fleet_api(surveyor), host, port, access=access, page=fleet_page)
    serve_until_stopped(server, f"fleet page on {access.scheme}://{{address}}/")


@fleet_command.command("finalize")
@_fleet_options
@click.option("--version", "version", required=True, help="The version whose upgrades to finalize.")
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="Only upgrades pending longer than this (e.g. 24h).",
)
@click.option("--env", "env_glob", default=None, metavar="GLOB", help="Only names matching GLOB.")
@click.option("--yes", is_flag=True, help="Finalize; without it, only show what would be.")
@click.option("--requested-by", default=None, help="Who decides (default: user@host).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object.")
@handle_errors
@click.pass_context
def fleet_finalize_command(
    ctx: click.Context,
    fleet_file: Path | None,
    zk: str,
    timeout: float | None,
    version: str,
    older_than: float | None,
    env_glob: str | None,
    yes: bool,
    requested_by: str | None,
    as_json: bool,
) -> None:
    """Finalize the pending upgrades to VERSION across the fleet (a dry run without --yes)."""
    from orchestrator.fleet.finalize import check_version, finalize_all, finalize_targets

    parent = ctx.obj or {}
    given = click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT
    fleet_file = fleet_file or parent.get("fleet_file")
    if ctx.get_parameter_source("zk") not in given:
        zk = parent.get("zk") or zk
    surveyor = _surveyor(fleet_file, zk, timeout or parent.get("timeout"))
    try:
        report = surveyor.report()
    finally:
        surveyor.close()
    check_version(report, version)
    targets = finalize_targets(report, version, older_than, env_glob)
    unreachable = [s.ensemble.name for s in report.surveys if s.error]
    if not yes:
        document = {
            "dry_run": True,
            "version": version,
            "targets": [
                {"ensemble": e.row.ensemble, "environment": e.row.environment,
                 "pending_seconds": e.assessment.pending_seconds}
                for e in targets
            ],
            "unreachable_ensembles": unreachable,
        }  # fmt: skip
        if as_json:
            click.echo(json.dumps(document, indent=2))
        else:
            from orchestrator.durations import short_duration

            click.echo(f"would finalize {len(targets)} environment(s) at {version}:")
            for e in targets:
                age = short_duration(e.assessment.pending_seconds)
                click.echo(f"  {e.row.name}  pending {age}  ({e.row.from_version} -> {version})")
            for name in unreachable:
                click.echo(f"  ensemble {name} did not answer: its environments are not listed")
            click.echo("nothing done: add --yes to finalize them")
        return
    who = requested_by or f"{getpass.getuser()}@{socket.gethostname()}"
    outcomes = finalize_all(
        surveyor.fleet.ensembles,
        targets,
        version=version,
        requested_by=who,
        timeout=surveyor.timeout,
    )
    failed = [o for o in outcomes if not o.ok]
    if as_json:
        document = {
            "dry_run": False,
            "version": version,
            "requested_by": who,
            "outcomes": [o.to_json() for o in outcomes],
            "unreachable_ensembles": unreachable,
        }
        click.echo(json.dumps(document, indent=2))
    else:
        for o in outcomes:
            line = f"{o.ensemble}/{o.environment}: {o.outcome}"
            click.echo(line + (f": {o.error}" if o.error else ""))
        click.echo(
            f"{len(outcomes) - len(failed)} of {len(outcomes)} finalized (or already final)"
            + (f"; {len(failed)} failed" if failed else "")
        )
    if failed or unreachable:
        sys.exit(EXIT_UNEXPECTED)
