"""``throttle``, ``pause`` and ``resume``: the operator's hand on a generation's long steps
(REWRITE copies), through :mod:`orchestrator.pace`."""

from __future__ import annotations

import json

import click

from orchestrator.cli.root import handle_errors, main, zk_options

#: The states of a process that may run a long step: a read-only process before it is ready
#: (its REWRITE copy), a migrating leader (the delta copy, a rollback's carry) and a serving one
#: (its scheduled compaction).
_STEPPING = ("starting", "checking", "migrating", "serving")


class _Rate(click.ParamType):
    """Rows per second: a positive number, or ``off`` (no limit)."""

    name = "ROWS/S|off"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float | None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif str(value).strip().lower() == "off":
            return None
        else:
            try:
                number = float(str(value))
            except ValueError:
                self.fail(f"{value!r} is not a number of rows per second, nor 'off'", param, ctx)
        if not number > 0 or number == float("inf"):
            self.fail(f"{value!r}: a rate is a positive number of rows per second", param, ctx)
        return number


def _generation_option(func):  # type: ignore[no-untyped-def]
    return click.option(
        "--deploy-generation",
        "generation",
        type=click.IntRange(min=1),
        required=True,
        help="The generation whose long steps this sets.",
    )(func)


def _requested_by_option(func):  # type: ignore[no-untyped-def]
    return click.option("--requested-by", default=None, help="Who decides (default: user@host).")(
        func
    )


@main.command("throttle")
@_generation_option
@click.option(
    "--rows-per-second",
    "rate",
    type=_Rate(),
    required=True,
    help="The most rows per second of the generation's long steps, or off.",
)
@_requested_by_option
@click.option("--json", "as_json", is_flag=True, help="Print the pace as one JSON object.")
@zk_options
@handle_errors
def throttle_command(
    generation: int, rate: float | None, requested_by: str | None, as_json: bool, zk: str, env: str
) -> None:
    """Hold the long steps (REWRITE copies) of a generation under a rate, or lift the limit;
    the processes of that generation follow within a second. Exit 2 for a rate that is not a
    positive number or off, or a generation no process runs."""
    _apply(generation, requested_by, as_json, zk, env, limit=rate)


@main.command("pause")
@_generation_option
@_requested_by_option
@click.option("--json", "as_json", is_flag=True, help="Print the pace as one JSON object.")
@zk_options
@handle_errors
def pause_command(
    generation: int, requested_by: str | None, as_json: bool, zk: str, env: str
) -> None:
    """Hold the long steps of a generation where they are: nothing more is written until
    `resume` (a process restarted meanwhile stays held; promotion and fencing go on). Exit 2
    for a generation no process runs, or whose processes have no long step to hold."""
    _apply(generation, requested_by, as_json, zk, env, paused=True)


@main.command("resume")
@_generation_option
@_requested_by_option
@click.option("--json", "as_json", is_flag=True, help="Print the pace as one JSON object.")
@zk_options
@handle_errors
def resume_command(
    generation: int, requested_by: str | None, as_json: bool, zk: str, env: str
) -> None:
    """Let the long steps of a paused generation go on. Exit 2 for a generation no process
    runs."""
    _apply(generation, requested_by, as_json, zk, env, paused=False)


def _apply(
    generation: int,
    requested_by: str | None,
    as_json: bool,
    zk: str,
    env: str,
    **change: object,
) -> None:
    import getpass
    import socket

    from catalog.errors import BadInputError
    from orchestrator.pace import change_pace
    from orchestrator.process_node import read_processes
    from orchestrator.zookeeper.clients import open_consensus

    who = requested_by or f"{getpass.getuser()}@{socket.gethostname()}"
    with open_consensus(zk, env) as consensus:
        nodes = read_processes(consensus).nodes.values()
        mine = [n for n in nodes if n.deploy_generation == generation]
        if not mine:
            running = sorted({n.deploy_generation for n in nodes})
            raise BadInputError(
                f"no process of generation {generation} runs in environment {env} "
                f"(running: {', '.join(map(str, running)) or 'none'})",
                reason="unknown-generation",
                deploy_generation=generation,
                running=running,
            )
        if change.get("paused") is True and not any(n.state in _STEPPING for n in mine):
            raise BadInputError(
                f"generation {generation} has no long step to pause: its processes are "
                + ", ".join(f"{n.id} {n.state}" for n in mine),
                reason="no-long-step",
                deploy_generation=generation,
            )
        pace = change_pace(consensus, generation, requested_by=who, **change)  # type: ignore[arg-type]
    document = {
        "deploy_generation": generation,
        "paused": pace.paused,
        "rows_per_second": pace.rows_per_second,
        "requested_by": who,
    }
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    limit = "no limit" if pace.rows_per_second is None else f"{pace.rows_per_second:g} rows/s"
    held = "paused" if pace.paused else "running"
    click.echo(f"generation {generation} of {env}: long steps {held}, {limit} (by {who})")
