"""``promote``, ``status`` and ``secure``: moving an upgrade forward, asking where it is, and
locking an environment to its credentials."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
import structlog

from catalog.errors import EXIT_UNEXPECTED
from orchestrator.cli.options import http_access_options
from orchestrator.cli.root import handle_errors, main, zk_options

if TYPE_CHECKING:
    from catalog.consensus import Consensus
    from orchestrator.http.authorization import HttpAccess


@main.command("promote")
@click.option(
    "--deploy-generation",
    "deploy_generation",
    type=click.IntRange(min=1),
    required=True,
    help="Generation to promote (never below the catalog's).",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Return once that generation's leader finished its migration (exit 1 on timeout).",
)
@click.option(
    "--before-deploy",
    is_flag=True,
    help="Promote a generation no process has registered yet, on purpose (without it, that is "
    "refused as a likely typo, exit 4). Until one of its processes takes over, promoting the "
    "catalog's generation again takes it back.",
)
@click.option(
    "--register-wait",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="How long to wait for a process of the generation to register, one just started "
    "(default: 30 s).",
)
@click.option("--requested-by", default=None, help="Who asks (default: user@host).")
@zk_options
@handle_errors
def promote_command(
    deploy_generation: int,
    wait_seconds: float | None,
    before_deploy: bool,
    register_wait: float | None,
    requested_by: str | None,
    zk: str,
    env: str,
) -> None:
    """Set the promotion target; exit 3 for a generation below the catalog's, exit 4 for one
    no process registered (unless --before-deploy)."""
    import getpass
    import socket

    from orchestrator.election import promote, wait_promoted
    from orchestrator.zookeeper.clients import open_consensus

    who = requested_by or f"{getpass.getuser()}@{socket.gethostname()}"
    with open_consensus(zk, env) as consensus:
        waits = {} if register_wait is None else {"register_wait": register_wait}
        promote(
            consensus, deploy_generation, requested_by=who, before_deploy=before_deploy,
            on_waiting=lambda what: click.echo(what, err=True), **waits,
        )  # fmt: skip
        click.echo(f"generation {deploy_generation} promoted in environment {env}")
        if wait_seconds is not None:
            wait_promoted(consensus, deploy_generation, wait_seconds)
            click.echo(f"generation {deploy_generation}'s leader finished its migration")


@main.command("finalize")
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for the serving leader to complete the finalization (0: do not wait; "
    "exit 1 on timeout, the decision stands).",
)
@click.option(
    "--version",
    "expect_version",
    default=None,
    help="Refuse (exit 4) unless the upgrade pending, or the final catalog, is at VERSION.",
)
@click.option("--requested-by", default=None, help="Who decides (default: user@host).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON object.")
@zk_options
@handle_errors
def finalize_command(
    wait_seconds: float,
    expect_version: str | None,
    requested_by: str | None,
    as_json: bool,
    zk: str,
    env: str,
) -> None:
    """Make the pending upgrade final: no rollback to the release it came from after this.
    Exit 0 when it is final (or already was)."""
    import getpass
    import socket

    from orchestrator.migrate import request_finalization
    from orchestrator.migrate.finalization import wait_finalized
    from orchestrator.zookeeper.clients import open_consensus

    who = requested_by or f"{getpass.getuser()}@{socket.gethostname()}"
    with open_consensus(zk, env) as consensus:
        answer = request_finalization(
            consensus, requested_by=who, reason="operator", expect_version=expect_version
        )
        if answer.pending is not None and wait_seconds > 0:
            wait_finalized(consensus, wait_seconds)
    document = answer.to_json()
    if as_json:
        click.echo(json.dumps(document, indent=2))
    elif answer.already_final:
        click.echo(
            f"environment {env} is final at {answer.version} (generation "
            f"{answer.deploy_generation}): nothing to finalize"
        )
    else:
        assert answer.pending is not None
        done = "finalized" if wait_seconds > 0 else "finalization requested for"
        click.echo(
            f"{done} the upgrade {answer.pending.from_version} -> {answer.pending.version} "
            f"(generation {answer.pending.deploy_generation}) in environment {env}; "
            f"{answer.pending.from_version} can no longer be promoted back"
        )


@main.command("status")
@click.option("--json", "as_json", is_flag=True, help="JSON (JSON lines with --watch).")
@click.option("--watch", is_flag=True, help="Refresh until interrupted.")
@click.option("--all", "all_rows", is_flag=True, help="Every collection row, not the first 20.")
@click.option("--events", type=click.IntRange(min=0), default=20, show_default=True)
@click.option(
    "--coverage",
    is_flag=True,
    help="Also lazy-migration coverage: batches and rows under each schema of every "
    "collection, which old schemas are still needed and which can retire.",
)
@click.option(
    "--serve",
    default=None,
    metavar="HOST:PORT",
    help="Serve the live status page (and /status, /history) on HOST:PORT until interrupted.",
)
@http_access_options
@zk_options
@handle_errors
def status_command(
    as_json: bool,
    watch: bool,
    all_rows: bool,
    events: int,
    coverage: bool,
    serve: str | None,
    http_token_file: str | None,
    http_read_token_file: str | None,
    http_allowed_hosts: tuple[str, ...],
    metrics_public: bool,
    http_insecure: bool,
    http_tls_cert: str | None,
    http_tls_key: str | None,
    zk: str,
    env: str,
) -> None:
    """The upgrade status, read from ZooKeeper (no sidecar needs to answer)."""
    if serve is not None:
        from orchestrator.http.authorization import HttpAccess

        access = HttpAccess(
            http_token_file, http_read_token_file, http_allowed_hosts, metrics_public,
            http_insecure, http_tls_cert, http_tls_key,
        )  # fmt: skip
        _serve_status(serve, zk, env, access)
        return
    if coverage and watch:
        raise click.UsageError("--coverage reads every shard's batches: not with --watch")
    from orchestrator.zookeeper.clients import open_consensus

    with open_consensus(zk, env) as consensus:
        if watch:
            _watch_status(consensus, as_json=as_json, all_rows=all_rows, events=events)
        else:
            _print_status(
                consensus, as_json=as_json, all_rows=all_rows, events=events, coverage=coverage
            )


def _print_status(
    consensus: Consensus, *, as_json: bool, all_rows: bool, events: int, coverage: bool
) -> None:
    """``status`` once: the table or JSON, with coverage when asked; exit 1 when some state
    could not be read (shown, never a quiet success)."""
    from rich.console import Console

    from orchestrator.render.status import render_table
    from orchestrator.status import read_status

    status = read_status(consensus, events=events)
    report = None
    if coverage:
        from orchestrator.status.coverage import read_coverage

        report = read_coverage(consensus)
    if as_json:
        document = status.to_json()
        if report is not None:
            document["coverage"] = report.to_json()
        click.echo(json.dumps(document, indent=2))
    else:
        console = Console()
        console.print(render_table(status, all_rows=all_rows))
        if report is not None:
            from orchestrator.render.coverage import render_coverage

            console.print(render_coverage(report, all_rows=all_rows))
    if status.errors:
        sys.exit(EXIT_UNEXPECTED)


def _watch_status(consensus: Consensus, *, as_json: bool, all_rows: bool, events: int) -> None:
    """``status --watch``: JSON lines or a table whenever the status changes (a live table on
    a terminal), until interrupted."""
    import threading

    from rich.console import Console
    from rich.live import Live

    from orchestrator.render.status import render_table
    from orchestrator.status import UpgradeStatus, watch_status

    console = Console()
    stop = threading.Event()
    last: list[dict[str, Any]] = []

    def print_json(status: UpgradeStatus) -> None:
        document = status.to_json()
        unchanged = {**document, "read_at": None}
        if not last or last[0] != unchanged:
            last[:] = [unchanged]
            click.echo(json.dumps(document))

    def print_table(status: UpgradeStatus) -> None:
        # Not a terminal (a log, a pipe): a new table whenever the status changed.
        unchanged = {**status.to_json(), "read_at": None}
        if not last or last[0] != unchanged:
            last[:] = [unchanged]
            console.print(render_table(status, all_rows=all_rows))

    try:
        if as_json:
            watch_status(consensus, print_json, stop, events=events)
        elif not console.is_terminal:
            watch_status(consensus, print_table, stop, events=events)
        else:
            with Live(console=console, auto_refresh=False) as live:
                watch_status(
                    consensus,
                    lambda s: live.update(render_table(s, all_rows=all_rows), refresh=True),
                    stop,
                    events=events,
                )
    except KeyboardInterrupt:
        stop.set()


@main.command("secure")
@zk_options
@handle_errors
def secure_command(zk: str, env: str) -> None:
    """Secure an existing environment: every node gets the ACL of --zk-auth (all rights) and
    --zk-read-auth (read); nobody else may read or write it afterwards."""
    import getpass
    import socket

    from catalog.consensus import env_root
    from catalog.errors import BadInputError
    from orchestrator.events import record_event
    from orchestrator.zookeeper.clients import open_consensus
    from orchestrator.zookeeper.credentials import ZkAuth, secure_tree

    auth = ZkAuth.from_environment()
    if auth is None:
        raise BadInputError("secure needs --zk-auth (the credential that will own the nodes)")
    with open_consensus(zk, env) as consensus:
        if not consensus.exists(""):
            raise BadInputError(f"environment {env} does not exist", root=env_root(env))
        count = secure_tree(consensus.client, consensus.root, auth.acl())
        # Audit: who locked it, from where (the event node is created under the new ACL).
        who = f"{getpass.getuser()}@{socket.gethostname()}"
        record_event(consensus, "secured", requested_by=who, nodes=count)
        structlog.get_logger(__name__).info("environment_secured", requested_by=who, nodes=count)
    reader = f" and read by {auth.reader.user}" if auth.reader else ""
    click.echo(f"secured {count} nodes of {env}: owned by {auth.credential.user}{reader}")


@main.command("history")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON document: the upgrades, oldest first."
)
@click.option(
    "--json-lines", "as_lines", is_flag=True, help="One JSON object per line, per upgrade."
)
@zk_options
@handle_errors
def history_command(as_json: bool, as_lines: bool, zk: str, env: str) -> None:
    """Every upgrade of the environment: versions, who promoted, phases, outcome."""
    from rich.console import Console

    from orchestrator.history import read_history
    from orchestrator.render.history import render_history
    from orchestrator.zookeeper.clients import open_consensus

    with open_consensus(zk, env) as consensus:
        rows = read_history(consensus)
    if as_json:
        click.echo(json.dumps([row.to_json() for row in rows], indent=2))
    elif as_lines:
        for row in rows:
            click.echo(json.dumps(row.to_json()))
    else:
        Console().print(render_history(rows, env))


@main.command("drift")
@click.option(
    "--release",
    "release_ref",
    required=True,
    help="FILE.py[:ATTR] or module:ATTR: the release the environment should run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@zk_options
@handle_errors
def drift_command(release_ref: str, as_json: bool, zk: str, env: str) -> None:
    """Compare the environment with a release; exit 4 on drift (no sidecar needed)."""
    from rich.console import Console

    from catalog.errors import EXIT_REFUSED
    from catalog.release import load_release
    from orchestrator.drift import check_drift
    from orchestrator.render.drift import render_drift
    from orchestrator.zookeeper.clients import open_consensus

    release = load_release(release_ref)
    with open_consensus(zk, env) as consensus:
        report = check_drift(consensus, release)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        render_drift(report, Console())
    if not report.ok:
        sys.exit(EXIT_REFUSED)


def _serve_status(address: str, zk: str, env: str, access: HttpAccess) -> None:
    from orchestrator.cli.servers import serve_until_stopped
    from orchestrator.http.server import parse_address
    from orchestrator.sidecar.server import configured_server
    from orchestrator.sidecar.statusonly import status_only_api
    from orchestrator.zookeeper.clients import open_consensus

    host, port = parse_address(address)
    with open_consensus(zk, env) as consensus:
        server = configured_server(status_only_api(consensus), host, port, access=access)
        serve_until_stopped(
            server, f"status page of environment {env} on {access.scheme}://{{address}}/"
        )
