"""``read`` and ``compact``: a collection's data through the arrow or Spark engine."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pyarrow as pa

from catalog.errors import EXIT_UNEXPECTED
from orchestrator.cli.options import DataOptions, data_options
from orchestrator.cli.root import handle_errors, main


def _spark_for(ctx: click.Context, config: Any) -> Any:
    """The process's Spark provider (``ctx.obj["spark"]`` when a caller injects one)."""
    from catalog.pipeline import spark_provider

    injected = ctx.obj.get("spark") if isinstance(ctx.obj, dict) else None
    return injected if injected is not None else spark_provider(config.master, dict(config.conf))


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
                engine.provider.cancel()
            raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


@contextlib.contextmanager
def _collection(
    ctx: click.Context, data: DataOptions, collection: str, spark: Any
) -> Iterator[tuple[Any, Any]]:
    """The collection's shard and the engine chosen for it, while connected to ZooKeeper."""
    from catalog.pipeline import collection_shard, engine_for
    from orchestrator.zookeeper.clients import open_consensus

    with open_consensus(data.zk, data.env) as consensus:
        shard = collection_shard(consensus, collection, data.blob_uri)
        yield shard, engine_for(data.engine, shard, spark=_spark_for(ctx, spark), config=spark)


#: Rows ``read`` prints as a table unless ``--limit`` says how many (a collection may hold
#: millions: ``--json`` and ``--output`` take every row).
TABLE_ROWS = 100


@main.command("read")
@click.option("--collection", required=True, help="The collection, SCHEMA.NAME.")
@click.option("--as-of", type=click.IntRange(min=0), default=None, help="Time (default: upper-1).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one row each.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help=f"Print at most N rows (Spark computes only those); the table shows the first "
    f"{TABLE_ROWS} unless given.",
)
@click.option(
    "--output",
    default=None,
    metavar="DIR|FILE",
    help="Write the rows instead of printing them: as Parquet parts into this new directory "
    "(or URI; on Spark the executors write them), or with --format arrow as one Arrow IPC "
    "stream into this new file ('-': standard output).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["parquet", "arrow"]),
    default="parquet",
    show_default=True,
    help="What --output writes: Parquet parts, or an Arrow IPC stream (what GET /read answers "
    "with Accept: application/vnd.apache.arrow.stream).",
)
@data_options
@handle_errors
@click.pass_context
def read_command(
    ctx: click.Context,
    collection: str,
    as_of: int | None,
    as_json: bool,
    limit: int | None,
    output: str | None,
    output_format: str,
    data: DataOptions,
) -> None:
    """A collection's contents as of a time, migrated to its latest schema."""
    from rich.console import Console

    from catalog.errors import BadInputError
    from catalog.shard import TS
    from orchestrator.wire.ndjson import json_lines

    arrow = output_format == "arrow"
    if arrow and output is None:
        raise BadInputError("--format arrow writes a stream: name its file with --output FILE")
    if arrow and output != "-" and Path(output or "").exists():
        raise BadInputError(f"--output {output} exists: name a new file", output=output)
    if arrow and output == "-" and sys.stdout.isatty():
        raise BadInputError(
            "--output - would write a binary Arrow stream to the terminal: pipe it to a "
            "program or name a file"
        )
    if output is not None and limit is not None and not arrow:
        raise BadInputError("--limit does not apply to --output (it writes every row)")
    spark = data.spark()
    with _collection(ctx, data, collection, spark) as (shard, chosen):
        if arrow:
            assert output is not None
            chunks = chosen.snapshot_chunks(shard, as_of, limit=limit)
            rows = _write_stream(output, chunks, lambda: chosen.snapshot(shard, as_of, limit=0))
            if output != "-":
                click.echo(f"wrote {rows} rows of {collection} as an Arrow IPC stream to {output}")
            return
        if output is not None:
            if chosen.name == "spark":  # executors write there: they must see the path
                local = "://" not in output or output.startswith("file://")
                spark.check_blob(output, local, _spark_for(ctx, spark).master)
            written = _with_progress(
                lambda: chosen.write_snapshot(shard, output, as_of),
                chosen,
                f"writing {collection} to {output}",
            )
        elif as_json:  # streamed: on Spark a partition at a time, never the whole result
            for chunk in chosen.snapshot_chunks(shard, as_of, limit=limit):
                for lines in json_lines(chunk):  # as GET /read answers them
                    click.echo(lines, nl=False)
            return
        else:  # a table for people: the first rows unless --limit says how many
            wanted = TABLE_ROWS + 1 if limit is None else limit  # one more: are there more?
            table = _with_progress(
                lambda: chosen.snapshot(shard, as_of, limit=wanted), chosen, f"reading {collection}"
            )
    if output is not None:
        parts = len(written.parts)
        click.echo(
            json.dumps({"collection": collection, "engine": chosen.name, **written.to_json()})
            if as_json
            else f"wrote {written.rows} rows of {collection} in {parts} part(s) to {output}"
        )
        return
    more = limit is None and table.num_rows > TABLE_ROWS
    table = table.slice(0, TABLE_ROWS) if more else table
    time_read = table.column(TS)[0].as_py() if table.num_rows else as_of
    if more:
        shown = (
            f"the first {TABLE_ROWS} rows (--limit N shows N, --json or --output every row; "
            f"engine {chosen.name})"
        )
    else:
        limited = f" (--limit {limit})" if limit is not None else ""
        shown = f"{table.num_rows} rows{limited} (engine {chosen.name})"
    from orchestrator.render.row_table import render_rows

    title = f"{collection} as of {time_read if time_read is not None else '-'}"
    Console().print(render_rows(table, title, shown))


def _write_stream(output: str, chunks: Iterator[pa.Table], empty: Callable[[], pa.Table]) -> int:
    """The chunks as one Arrow IPC stream into the new file ``output`` ('-': standard output),
    a chunk at a time; the rows written. No chunk: a stream of the empty snapshot's schema."""
    first = next(chunks, None)
    schema = (first if first is not None else empty()).schema
    rows = 0
    with contextlib.ExitStack() as stack:
        sink: Any = sys.stdout.buffer if output == "-" else stack.enter_context(open(output, "xb"))
        writer = stack.enter_context(pa.ipc.new_stream(sink, schema))
        for chunk in itertools.chain([first] if first is not None else [], chunks):
            writer.write_table(chunk)
            rows += chunk.num_rows
    return rows


@main.command("compact")
@click.option(
    "--collection",
    default=None,
    help="The collection, SCHEMA.NAME (with --until-retired: default every collection that "
    "holds data under an old schema).",
)
@click.option(
    "--until-retired",
    is_flag=True,
    help="Compact until no batch is stored under an old schema, so the old schemas can "
    "retire; shows rows/s and the time left.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@data_options
@handle_errors
@click.pass_context
def compact_command(
    ctx: click.Context,
    collection: str | None,
    until_retired: bool,
    as_json: bool,
    data: DataOptions,
) -> None:
    """Merge a collection's batches into its latest schema (reads are unchanged)."""
    spark = data.spark()
    if until_retired:
        _compact_until_retired(ctx, collection, as_json, data, spark)
        return
    if collection is None:
        raise click.UsageError("--collection is required (or --until-retired)")
    with _collection(ctx, data, collection, spark) as (shard, chosen):
        state = shard.state()
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


def _compact_until_retired(
    ctx: click.Context, collection: str | None, as_json: bool, data: DataOptions, spark: Any
) -> None:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    from catalog.pipeline import collection_shard, engine_for
    from orchestrator.retire import RetireOutcome, compact_until_retired
    from orchestrator.zookeeper.clients import open_consensus

    class RowsPerSecond(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("-" if speed is None else f"{speed:,.0f} rows/s", style="cyan")

    console = Console(stderr=True)
    columns = [TextColumn("{task.description}"), BarColumn(), RowsPerSecond()]
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    progress = Progress(*columns, console=console, disable=not console.is_terminal)
    task = progress.add_task("old rows migrated", total=None)

    def started(count: int, rows: int) -> None:
        progress.update(task, total=rows, description=f"{count} collection(s)")

    def done(outcome: RetireOutcome) -> None:
        progress.advance(task, outcome.rows_migrated)

    with open_consensus(data.zk, data.env) as consensus, progress:
        outcomes = compact_until_retired(
            consensus,
            lambda name: collection_shard(consensus, name, data.blob_uri),
            lambda shard: engine_for(
                data.engine, shard, spark=_spark_for(ctx, spark), config=spark
            ).compact(shard),
            collections=(collection,) if collection else (),
            on_start=started,
            on_done=done,
        )
    left = [o for o in outcomes if not o.retired]
    if as_json:
        click.echo(json.dumps({"collections": [o.to_json() for o in outcomes]}))
    else:
        for o in outcomes:
            state = "old schemas retired" if o.retired else "still holds old-schema batches"
            retirable = ", ".join(map(str, o.after.coverage.retirable)) or "none"
            click.echo(
                f"{o.name}: {o.rows_migrated:,} rows moved to schema "
                f"{o.after.coverage.latest_schema_id} in {o.passes} pass(es), {state} "
                f"(can retire: {retirable})"
            )
        if not outcomes:
            click.echo("every collection is on its latest schema: nothing to compact")
    if left:
        sys.exit(EXIT_UNEXPECTED)
