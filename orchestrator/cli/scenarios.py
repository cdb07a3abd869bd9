"""``scenario run``, ``scenario simulate`` and ``scenario soak``: rehearsed upgrades with real
processes."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from orchestrator.cli.root import handle_errors, main


@main.group("scenario")
def scenario_group() -> None:
    """Rehearse upgrades: scenario files and randomized simulation, with real processes."""


def _stop_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C: cleanup code (killing every child) still runs."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))


#: --zk for rehearsals: an external ZooKeeper, or (by default) an embedded one for the run.
external_zk_option = click.option(
    "--zk",
    envvar="CATALOG_UPGRADE_ZK",
    default=None,
    help="External ZooKeeper (default: an embedded server started for the run).",
)


@scenario_group.command("run")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--seed", type=int, default=None, help="Seed of the run (default: random).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@external_zk_option
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


#: The options a simulation and a soak share.
faults_option = click.option(
    "--faults",
    "fault_probability",
    type=click.FloatRange(0.0, 1.0),
    default=0.25,
    show_default=True,
    help="Probability that a step injects a fault.",
)
shrink_runs_option = click.option(
    "--shrink-runs",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="At most this many re-runs of shorter prefixes after a failure.",
)


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
@faults_option
@shrink_runs_option
@click.option(
    "--zk-servers",
    type=click.Choice(["1", "3", "5"]),
    default="1",
    show_default=True,
    help="Run the walk on an embedded ensemble of this many servers (3 or 5 add the "
    "zookeeper_server fault: members killed, quorum lost and regained).",
)
@click.option(
    "--partitions",
    is_flag=True,
    help="Add partitions (needs root, ip and nft): with one ZooKeeper server every process "
    "runs in a network namespace of its own (the partition_leader fault); with --zk-servers 3 "
    "or 5 every server does (the partition_zookeeper fault: a server cut from its peers).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@external_zk_option
@handle_errors
def scenario_simulate_command(
    releases_dir: Path,
    seed: int | None,
    steps: int,
    fault_probability: float,
    shrink_runs: int,
    zk_servers: str,
    partitions: bool,
    as_json: bool,
    zk: str | None,
) -> None:
    """Random walks over a release history with faults; exit 0 only if every invariant held."""
    import random

    from rich.console import Console
    from rich.markup import escape

    from orchestrator.render.scenario import render_simulation, render_walk_step
    from orchestrator.scenario.simulate import SimulationConfig, WalkStep, simulate

    _stop_on_sigterm()
    seed = seed if seed is not None else random.randrange(1 << 31)
    console = Console(stderr=as_json)
    console.print(f"[bold]simulate[/] {escape(str(releases_dir))}: seed {seed}, {steps} step(s)")
    config = SimulationConfig(
        releases_dir=releases_dir,
        seed=seed,
        steps=steps,
        fault_probability=fault_probability,
        shrink_runs=shrink_runs,
        zookeeper_servers=int(zk_servers),
        partitions=partitions,
    )
    if partitions:
        from orchestrator.testing.netns import unavailable

        reason = unavailable()
        if reason is not None:
            raise click.UsageError(f"--partitions needs network namespaces: {reason}")
    if zk and config.zookeeper_servers > 1:
        raise click.UsageError("--zk-servers starts its own ensemble: it does not go with --zk")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    # On a terminal a live bar under the timeline (walk steps done); elsewhere only the lines.
    progress = Progress(
        "walk", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )  # fmt: skip
    task = progress.add_task("walk", total=steps)

    def walked(step: WalkStep) -> None:
        render_walk_step(progress.console, step)
        progress.advance(task)

    with progress:
        result = simulate(
            config,
            zk=zk,
            on_step=walked,
            on_shrink=lambda n, failed: progress.console.print(
                f"[dim]shrink: prefix of {n} step(s) {'fails' if failed else 'passes'}[/]"
            ),
        )
    flags = (f"--zk-servers {zk_servers}" if zk_servers != "1" else "") + (
        " --partitions" if partitions else ""
    )
    render_simulation(console, result, str(releases_dir), flags.strip())
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    if not result.ok:
        sys.exit(1)


@scenario_group.command("soak")
@click.option(
    "--releases",
    "releases_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("scenarios/releases"),
    show_default=True,
    help="Directory of release files to walk over.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=60, show_default=True)
@click.option(
    "--first-seed",
    type=int,
    default=None,
    help="The first seed (the others follow from it); default: random, printed.",
)
@click.option(
    "--zk-servers", type=click.Choice(["1", "3", "5"]), default="3", show_default=True,
    help="Each walk on an embedded ensemble of this many servers.",
)  # fmt: skip
@click.option(
    "--partitions/--no-partitions",
    default=True,
    show_default=True,
    help="Cut ZooKeeper servers from their peers (with one server: processes from ZooKeeper).",
)
@faults_option
@shrink_runs_option
@click.option(
    "--keep",
    "keep_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where every run keeps its directory (history, result, every process's log) and the "
    "report goes (default: var/soak-<first seed>).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@external_zk_option
@handle_errors
def scenario_soak_command(
    releases_dir: Path,
    seeds: int,
    steps: int,
    first_seed: int | None,
    zk_servers: str,
    partitions: bool,
    fault_probability: float,
    shrink_runs: int,
    keep_dir: Path | None,
    as_json: bool,
    zk: str | None,
) -> None:
    """Many seeded walks in sequence (default 50 x 60 steps on a 3-server ensemble with
    partitions): what to run before a release. Exit 0 only if every seed held."""
    import random

    from rich.console import Console
    from rich.markup import escape
    from rich.text import Text

    from orchestrator.render.scenario import render_soak, render_soak_seed
    from orchestrator.scenario.simulate import SimulationConfig, SimulationResult
    from orchestrator.scenario.simulate.soak import soak, soak_seeds

    _stop_on_sigterm()
    first = first_seed if first_seed is not None else random.randrange(1 << 31)
    if partitions:
        from orchestrator.testing.netns import unavailable

        reason = unavailable()
        if reason is not None:
            raise click.UsageError(f"--partitions needs network namespaces: {reason}")
    if zk and int(zk_servers) > 1:
        raise click.UsageError("--zk-servers starts its own ensemble: it does not go with --zk")
    keep = keep_dir or Path("var") / f"soak-{first}"
    keep.mkdir(parents=True, exist_ok=True)
    flags = f"--releases {releases_dir} --zk-servers {zk_servers}" + (
        " --partitions" if partitions else ""
    )
    console = Console(stderr=as_json)
    console.print(
        f"[bold]soak[/] {escape(str(releases_dir))}: {seeds} seed(s) from {first}, {steps} "
        f"step(s) each, {escape(flags)}; runs kept in {escape(str(keep))}"
    )
    config = SimulationConfig(
        releases_dir=releases_dir, seed=first, steps=steps, fault_probability=fault_probability,
        shrink_runs=shrink_runs, zookeeper_servers=int(zk_servers), partitions=partitions,
    )  # fmt: skip

    def done(number: int, result: SimulationResult) -> None:
        render_soak_seed(console, number, seeds, result)

    report = soak(config, soak_seeds(first, seeds), flags=flags, keep_dir=keep, zk=zk, on_seed=done)
    (keep / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    render_soak(console, report)
    console.print(Text(f"report: {keep / 'report.json'}"))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    if report.failures:
        sys.exit(1)
