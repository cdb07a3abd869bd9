"""The ``catalog-upgrade`` command line: thin commands over testable modules.

Every command parses its arguments, calls one function of a module and renders the result.
``CatalogError`` (and only it) is translated to its documented exit code with a clear message;
anything else is a bug and exits 1 with the traceback.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from catalog.errors import CatalogError
from orchestrator.logs import configure_logging

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Translate CatalogError into its exit code and a one-line (or JSON) message on stderr."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CatalogError as exc:
            ctx = click.get_current_context(silent=True)
            as_json = bool(ctx and ctx.params.get("as_json"))
            if as_json:
                click.echo(json.dumps(exc.to_json(), indent=2), err=True)
            else:
                click.secho(f"error: {exc.message}", fg="red", err=True)
                suggestion = exc.details.get("suggestion")
                if suggestion:
                    click.echo(f"  fix: {suggestion}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--log-level", default="INFO", show_default=True, envvar="CATALOG_UPGRADE_LOG_LEVEL")
@click.option("--log-json/--no-log-json", default=None, help="JSON logs (default: when not a TTY).")
def main(log_level: str, log_json: bool | None) -> None:
    """Safe schema upgrades of builtin catalog collections during blue-green deployments."""
    configure_logging(log_level, json=log_json)


def zk_options(func: F) -> F:
    """The --zk and --env options every ZooKeeper-facing command takes."""
    func = click.option(
        "--env",
        "env",
        envvar="CATALOG_UPGRADE_ENV",
        default="default",
        show_default=True,
        help="Environment name (ZooKeeper root /catalog-upgrade/NAME).",
    )(func)
    func = click.option(
        "--zk",
        "zk",
        envvar="CATALOG_UPGRADE_ZK",
        default="127.0.0.1:2181",
        show_default=True,
        help="ZooKeeper connection string.",
    )(func)
    return func


@main.command()
@click.option("--port", type=int, default=2181, show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("var/zookeeper"),
    show_default=True,
)
@handle_errors
def zookeeper(port: int, data_dir: Path) -> None:
    """Run a real ZooKeeper server in the foreground (from the jars pyspark ships)."""
    from orchestrator.zkserver import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(data_dir=data_dir, port=port)
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        # stop() would wait on the child inside the main thread's own wait(): deadlock.
        server.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.start()
    except CatalogError:
        if stopping:  # a signal arrived while the server was still starting
            click.echo("ZooKeeper stopped")
            return
        raise
    click.echo(f"ZooKeeper serving on {server.hosts} (data in {server.data_dir}); Ctrl-C stops it")
    code = server.wait()
    if not stopping and code != 0:
        raise click.ClickException(f"ZooKeeper exited with code {code}:\n{server.tail_log()}")
    click.echo("ZooKeeper stopped")


# --- commands added by other modules follow -------------------------------------------------


@main.command("plan")
@click.option(
    "--releases",
    "releases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of release files (*.py defining RELEASE).",
)
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
@click.option(
    "--releases",
    "releases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of release files (*.py defining RELEASE).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@handle_errors
def validate_command(releases_dir: Path, as_json: bool) -> None:
    """Check every upgrade path between the releases in DIR; exit 4 if any fails."""
    from rich.console import Console

    from catalog.errors import EXIT_REFUSED
    from catalog.release import load_release_dir, validate
    from orchestrator.render.plan import render_report, report_json

    report = validate(load_release_dir(releases_dir))
    if as_json:
        click.echo(report_json(report))
    else:
        render_report(report, Console())
    if not report.ok:
        sys.exit(EXIT_REFUSED)


@main.command("sidecar")
@click.option("--release", "release_ref", required=True, help="FILE.py[:ATTR] or module:ATTR.")
@click.option("--deploy-generation", type=click.IntRange(min=1), required=True)
@click.option(
    "--blob", default=None, help="Blob URI (default: the recorded one, or ./var/blob/ENV)."
)
@click.option(
    "--http", "http", default="127.0.0.1:0", show_default=True, help="HOST:PORT to serve."
)
@click.option("--auto-promote", is_flag=True, help="Promote this generation once it is ready.")
@click.option("--process-id", default=None, help="Unique process id (default: HOST-PID).")
@click.option("--session-timeout", type=click.FloatRange(min=1.0), default=10.0, show_default=True)
@click.option(
    "--orphan-grace",
    type=click.FloatRange(min=0.0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="As leader, collect shards nothing names once they are this old.",
)
@zk_options
@handle_errors
def sidecar_command(
    release_ref: str,
    deploy_generation: int,
    blob: str | None,
    http: str,
    auto_promote: bool,
    process_id: str | None,
    session_timeout: float,
    orphan_grace: float,
    zk: str,
    env: str,
) -> None:
    """Run the upgrade sidecar of one release at one deploy generation (exit 3 when fenced)."""
    from catalog.consensus import env_root
    from catalog.release import load_release
    from orchestrator.sidecar import SidecarConfig, default_process_id, run_sidecar
    from orchestrator.sidecar_http import parse_address

    env_root(env)
    host, port = parse_address(http)
    release = load_release(release_ref)
    config = SidecarConfig(
        zk=zk,
        env=env,
        release_ref=release_ref,
        deploy_generation=deploy_generation,
        blob=blob,
        http_host=host,
        http_port=port,
        auto_promote=auto_promote,
        session_timeout=session_timeout,
        orphan_grace=orphan_grace,
        orphan_interval=min(60.0, max(1.0, orphan_grace / 10)),
        process_id=process_id or default_process_id(),
    )
    sys.exit(run_sidecar(config, release))


@main.command("promote")
@click.option(
    "--deploy-generation",
    "deploy_generation",
    type=click.IntRange(min=0),
    required=True,
    help="Generation to promote (never below the catalog's or the current target).",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Return once that generation's leader finished its migration (exit 1 on timeout).",
)
@click.option("--requested-by", default=None, help="Who asks (default: user@host).")
@zk_options
@handle_errors
def promote_command(
    deploy_generation: int, wait_seconds: float | None, requested_by: str | None, zk: str, env: str
) -> None:
    """Set the promotion target; exit 3 for a generation below the current one."""
    import getpass
    import socket

    from orchestrator.election import promote, wait_promoted
    from orchestrator.zk import open_consensus

    who = requested_by or f"{getpass.getuser()}@{socket.gethostname()}"
    with open_consensus(zk, env) as consensus:
        promote(consensus, deploy_generation, requested_by=who)
        click.echo(f"generation {deploy_generation} promoted in environment {env}")
        if wait_seconds is not None:
            wait_promoted(consensus, deploy_generation, wait_seconds)
            click.echo(f"generation {deploy_generation}'s leader finished its migration")


@main.command("status")
@click.option("--json", "as_json", is_flag=True, help="JSON (JSON lines with --watch).")
@click.option("--watch", is_flag=True, help="Refresh until interrupted.")
@click.option("--all", "all_rows", is_flag=True, help="Every collection row, not the first 20.")
@click.option("--events", type=click.IntRange(min=0), default=20, show_default=True)
@zk_options
@handle_errors
def status_command(
    as_json: bool, watch: bool, all_rows: bool, events: int, zk: str, env: str
) -> None:
    """The upgrade status, read from ZooKeeper (no sidecar needs to answer)."""
    import threading

    from rich.console import Console
    from rich.live import Live

    from orchestrator.render.status import render_table
    from orchestrator.status import UpgradeStatus, read_status, watch_status
    from orchestrator.zk import open_consensus

    console = Console()
    with open_consensus(zk, env) as consensus:
        if not watch:
            status = read_status(consensus, events=events)
            if as_json:
                click.echo(json.dumps(status.to_json(), indent=2))
            else:
                console.print(render_table(status, all_rows=all_rows))
            return
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


# --- data: read and compact (catalog.pipeline) -------------------------------------------------


def engine_options(func: F) -> F:
    """The --engine, --spark-master and --blob options of the data commands."""
    func = click.option(
        "--blob",
        "blob_uri",
        default=None,
        help="Blob URI; must match the one the environment recorded (default: that one).",
    )(func)
    func = click.option(
        "--spark-master",
        envvar="SPARK_MASTER",
        default=None,
        help="Spark master for --engine spark (default: local[<cores>]).",
    )(func)
    func = click.option(
        "--engine",
        type=click.Choice(["arrow", "spark", "auto"]),
        default="auto",
        show_default=True,
        help="arrow: in process; spark: PySpark; auto: spark for large shards.",
    )(func)
    return func


def _spark_for(ctx: click.Context, master: str | None) -> Any:
    """The process's Spark provider (``ctx.obj["spark"]`` when a caller injects one)."""
    from catalog.pipeline import spark_provider

    injected = ctx.obj.get("spark") if isinstance(ctx.obj, dict) else None
    return injected if injected is not None else spark_provider(master)


def _with_progress(job: Callable[[], Any], engine: Any, description: str) -> Any:
    """Run ``job`` in a thread while stderr shows Spark stage progress, or a spinner on arrow."""
    import threading

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from catalog.pipeline import SparkEngine

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = job()
        except BaseException as exc:  # handed to the main thread, which re-raises it
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="pipeline-job", daemon=True)
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    columns += [MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=None)
        worker.start()
        try:
            while worker.is_alive():
                if isinstance(engine, SparkEngine):
                    stages = engine.provider.stage_progress()
                    if stages is not None:
                        progress.update(
                            task,
                            total=stages.tasks,
                            completed=stages.completed,
                            description=f"{description}: {stages.stages} Spark stage(s)",
                        )
                worker.join(0.2)
        except KeyboardInterrupt:
            if isinstance(engine, SparkEngine) and engine.provider.started:
                engine.provider.session().sparkContext.cancelAllJobs()
            raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]null[/dim]"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


@main.command("read")
@click.option("--collection", required=True, help="The collection, SCHEMA.NAME.")
@click.option("--as-of", type=click.IntRange(min=0), default=None, help="Time (default: upper-1).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one row each.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Print at most N rows.")
@engine_options
@zk_options
@handle_errors
@click.pass_context
def read_command(
    ctx: click.Context,
    collection: str,
    as_of: int | None,
    as_json: bool,
    limit: int | None,
    engine: str,
    spark_master: str | None,
    blob_uri: str | None,
    zk: str,
    env: str,
) -> None:
    """A collection's contents as of a time, migrated to its latest schema."""
    from rich.console import Console
    from rich.table import Table

    from catalog.pipeline import collection_shard, engine_for
    from catalog.shard import DIFF, TS
    from orchestrator.zk import open_consensus

    with open_consensus(zk, env) as consensus:
        shard = collection_shard(consensus, collection, blob_uri)
        chosen = engine_for(engine, shard, spark=_spark_for(ctx, spark_master))
        table = _with_progress(
            lambda: chosen.snapshot(shard, as_of), chosen, f"reading {collection}"
        )
    rows = table.to_pylist()
    shown = rows if limit is None else rows[:limit]
    if as_json:
        for row in shown:
            click.echo(json.dumps(row, default=str))
        return
    time_read = rows[0][TS] if rows else as_of
    view = Table(
        title=f"{collection} as of {time_read if time_read is not None else '-'}",
        caption=f"{len(shown)} of {len(rows)} rows (engine {chosen.name})",
    )
    names = [n for n in table.column_names if n != TS]
    for name in names:
        view.add_column(name, justify="right" if name == DIFF else "left")
    for row in shown:
        view.add_row(*[_cell(row[n]) for n in names])
    Console().print(view)


@main.command("compact")
@click.option("--collection", required=True, help="The collection, SCHEMA.NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@engine_options
@zk_options
@handle_errors
@click.pass_context
def compact_command(
    ctx: click.Context,
    collection: str,
    as_json: bool,
    engine: str,
    spark_master: str | None,
    blob_uri: str | None,
    zk: str,
    env: str,
) -> None:
    """Merge a collection's batches into its latest schema (reads are unchanged)."""
    from catalog.pipeline import collection_shard, engine_for
    from orchestrator.zk import open_consensus

    with open_consensus(zk, env) as consensus:
        shard = collection_shard(consensus, collection, blob_uri)
        state = shard.state()
        chosen = engine_for(engine, shard, spark=_spark_for(ctx, spark_master))
        description = (
            f"compacting {collection}: {state.batch_count} batches, {state.row_count} rows"
        )
        result = _with_progress(lambda: chosen.compact(shard), chosen, description)
    outputs = result.outputs or ((result.output,) if result.output else ())
    summary = {
        "collection": collection,
        "shard_id": shard.shard_id,
        "engine": chosen.name,
        "applied": result.applied,
        "inputs": result.inputs,
        "outputs": len(outputs),
        "rows": sum(b.rows for b in outputs),
    }
    if as_json:
        click.echo(json.dumps(summary))
    elif result.applied:
        click.echo(
            f"compacted {collection} ({shard.shard_id}) on {chosen.name}: {result.inputs} batches "
            f"-> {len(outputs)}, {summary['rows']} rows"
        )
    else:
        click.echo(f"{collection}: another compaction replaced the batches first; nothing done")


# --- scenario: rehearsed upgrades with real processes (orchestrator.scenario) ----------------


@main.group("scenario")
def scenario_group() -> None:
    """Rehearse upgrades: scenario files and randomized simulation, with real processes."""


def _stop_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C: cleanup code (killing every child) still runs."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))


@scenario_group.command("run")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--seed", type=int, default=None, help="Seed of the run (default: random).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option(
    "--zk",
    envvar="CATALOG_UPGRADE_ZK",
    default=None,
    help="External ZooKeeper (default: an embedded server started for the run).",
)
@handle_errors
def scenario_run_command(
    files: tuple[Path, ...], seed: int | None, as_json: bool, zk: str | None
) -> None:
    """Run scenario FILEs, each in a fresh environment; exit 0 only if every expectation held."""
    import random

    from rich.console import Console

    from orchestrator.render.scenario import (
        render_failure,
        render_header,
        render_step,
        render_summary,
    )
    from orchestrator.scenario import run_files

    _stop_on_sigterm()
    seed = seed if seed is not None else random.randrange(1 << 31)
    console = Console(stderr=as_json)
    results = run_files(
        list(files),
        zk=zk,
        seed=seed,
        on_start=lambda scenario: render_header(console, scenario, seed),
        on_step=lambda step: render_step(console, step),
        on_done=lambda result: None if result.ok else render_failure(console, result),
    )
    render_summary(console, results)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "seed": seed,
                    "ok": all(r.ok for r in results),
                    "scenarios": [r.to_json() for r in results],
                },
                indent=2,
                default=str,
            )
        )
    if not all(r.ok for r in results):
        sys.exit(1)


@scenario_group.command("simulate")
@click.option(
    "--releases",
    "releases_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of release files to walk over.",
)
@click.option("--seed", type=int, default=None, help="Seed of the walk (default: random).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option(
    "--faults",
    "fault_probability",
    type=click.FloatRange(0.0, 1.0),
    default=0.25,
    show_default=True,
    help="Probability that a step injects a fault.",
)
@click.option(
    "--shrink-runs",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="At most this many re-runs of shorter prefixes after a failure.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option(
    "--zk",
    envvar="CATALOG_UPGRADE_ZK",
    default=None,
    help="External ZooKeeper (default: an embedded server started for the run).",
)
@handle_errors
def scenario_simulate_command(
    releases_dir: Path,
    seed: int | None,
    steps: int,
    fault_probability: float,
    shrink_runs: int,
    as_json: bool,
    zk: str | None,
) -> None:
    """Random walks over a release history with faults; exit 0 only if every invariant held."""
    import random

    from rich.console import Console

    from orchestrator.render.scenario import render_simulation, render_walk_step
    from orchestrator.simulate import SimulationConfig, simulate

    _stop_on_sigterm()
    seed = seed if seed is not None else random.randrange(1 << 31)
    console = Console(stderr=as_json)
    console.print(f"[bold]simulate[/] {releases_dir}: seed {seed}, {steps} step(s)")
    config = SimulationConfig(
        releases_dir=releases_dir,
        seed=seed,
        steps=steps,
        fault_probability=fault_probability,
        shrink_runs=shrink_runs,
    )
    result = simulate(
        config,
        zk=zk,
        on_step=lambda step: render_walk_step(console, step),
        on_shrink=lambda n, failed: console.print(
            f"[dim]shrink: prefix of {n} step(s) {'fails' if failed else 'passes'}[/]"
        ),
    )
    render_simulation(console, result, str(releases_dir))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    if not result.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
