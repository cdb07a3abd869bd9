"""``make demo``: a blue-green upgrade of the example release history, with everything real.

A real ZooKeeper (the embedded one, in a temporary directory), real sidecar processes, real
Parquet shards. The story:

1. bootstrap an empty environment with the history's first release (deploy generation 1);
2. write rows through the leader's ``POST /append``;
3. start the next release (generation 2) next to it, read-only, and show ``status``;
4. ``promote --deploy-generation 2 --wait 30``: the old leader exits fenced (code 3);
5. read the rows back through the new leader, in the new schema, show the status (the upgrade
   pending: reversible until final) and ``finalize`` it;
6. stop everything cleanly (SIGTERM, ZooKeeper stopped, temporary directory removed).

Run ``python -m orchestrator.testing.demo [--releases DIR] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from kazoo.client import KazooClient
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table

from catalog.errors import EXIT_FENCED
from catalog.release import Release, load_release_dir
from catalog_client import SidecarError
from orchestrator.logs import configure_logging
from orchestrator.process_node import ProcessNode
from orchestrator.status.commands import command
from orchestrator.testing.harness import SidecarExited, SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect

ENV = "demo"
DEFAULT_RELEASES = Path(__file__).resolve().parents[2] / "scenarios" / "releases"
TABLES = "mz_catalog.mz_tables"
ROLES = "mz_catalog.mz_roles"
TABLE_ROWS: Sequence[Mapping[str, Any]] = (
    {
        "id": "u1",
        "oid": 20001,
        "schema_id": "u3",
        "name": "orders",
        "owner_id": "u1",
        "create_sql": "CREATE TABLE orders (id int, total numeric)",
    },
    {
        "id": "u2",
        "oid": 20002,
        "schema_id": "u3",
        "name": "customers",
        "owner_id": "u1",
        "create_sql": "CREATE TABLE customers (id int, name text)",
    },
    {"id": "u3", "oid": 20003, "schema_id": "u3", "name": "invoices", "owner_id": "u2"},
)
ROLE_ROWS: Sequence[Mapping[str, Any]] = (
    {"id": 7, "oid": 30007, "name": "analyst", "inherit": True},
    {"id": 8, "oid": 30008, "name": "loader", "inherit": False, "vars": {"cluster": "ingest"}},
)


class DemoError(Exception):
    """A step of the story did not happen as expected."""


@attrs.define
class Demo:
    """The demo's resources; ``close()`` releases every one of them."""

    console: Console
    workdir: Path
    releases: tuple[Path, Path]
    zookeeper: EmbeddedZooKeeper | None = None
    client: KazooClient | None = None
    sidecars: list[SidecarProcess] = attrs.field(factory=list)

    @property
    def hosts(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.hosts

    # -- narration --------------------------------------------------------------------------

    def section(self, title: str) -> None:
        self.console.print()
        self.console.print(Rule(f"[bold]{title}", align="left", style="cyan"))

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``catalog-upgrade ARGS`` for the reader to see (its output goes to the terminal)."""
        verb, *rest = args
        shown = command(ENV, self.hosts, verb, *rest)  # as status prints it: where it acts
        self.say(f"[dim]$[/dim] [bold]{escape(shown)}[/bold]")
        sys.stdout.flush()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "--log-level",
                "WARNING",
                *args,
                "--zk",
                self.hosts,
                "--env",
                ENV,
            ],
            env={**os.environ, "COLUMNS": str(self.console.width)},
            check=False,
        )
        if check and result.returncode != 0:
            raise DemoError(f"`{shown}` exited with {result.returncode}")
        return result

    # -- processes --------------------------------------------------------------------------

    def start_zookeeper(self) -> None:
        self.zookeeper = EmbeddedZooKeeper(data_dir=self.workdir / "zookeeper").start()
        self.client = connect(self.hosts)

    def start_sidecar(
        self, name: str, release: Path, generation: int, *flags: str
    ) -> SidecarProcess:
        shown = command(ENV, self.hosts, "sidecar", "--release", release.name,
                        "--deploy-generation", str(generation), *flags)  # fmt: skip
        self.say(f"[dim]$[/dim] [bold]{escape(shown)}[/bold]  [dim](as {name})[/dim]")
        sidecar = SidecarProcess.start(
            zk=self.hosts,
            env=ENV,
            name=name,
            version=release.stem,
            release_file=release,
            deploy_generation=generation,
            log_path=self.workdir / f"{name}.log",
            blob=self.workdir / "blob",
            session_timeout=4.0,
            extra=flags,
            finalize_after=None,  # the product's window: an upgrade stays reversible for 24 h
        )
        self.sidecars.append(sidecar)
        return sidecar

    def wait_state(
        self, sidecar: SidecarProcess, *states: str, timeout: float = 30.0
    ) -> ProcessNode:
        """Block on a ZooKeeper watch of the process node until its state is one of ``states``."""
        assert self.client is not None
        try:
            return sidecar.wait_state(self.client, *states, timeout=timeout)
        except SidecarExited as exc:
            raise DemoError(str(exc)) from None

    def close(self) -> None:
        for sidecar in self.sidecars:
            sidecar.terminate()
        for sidecar in self.sidecars:
            if sidecar.wait_exit(10) is None:
                sidecar.kill()
        if self.client is not None:
            close(self.client)
        if self.zookeeper is not None:
            self.zookeeper.stop()


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """JSON rows as a table; nulls shown dimmed, the update columns (_ts, _diff) last."""
    columns = [c for c in (rows[0] if rows else {}) if c not in ("_ts", "_diff")]
    table = Table(*columns, "_ts", "_diff", header_style="bold", show_lines=False)
    for row in rows:
        table.add_row(
            *(
                "[dim]null[/dim]" if row.get(c) is None else escape(json.dumps(row[c]).strip('"'))
                for c in (*columns, "_ts", "_diff")
            )
        )
    return table


def first_two_releases(directory: Path) -> tuple[Path, Path]:
    """The files of the two oldest releases in ``directory`` (by version, not by file name)."""
    releases: list[Release] = load_release_dir(directory)
    if len(releases) < 2:
        raise DemoError(f"{directory} holds fewer than two releases")
    files = [directory / f"v{str(r.version).replace('.', '_')}.py" for r in releases[:2]]
    for release, path in zip(releases, files, strict=False):
        if not path.exists():
            raise DemoError(f"no file {path.name} for release {release.version} in {directory}")
    return files[0], files[1]


def run_story(demo: Demo) -> None:
    old, new = demo.releases
    timer = time.monotonic()

    demo.section("1. A real ZooKeeper")
    demo.start_zookeeper()
    demo.say(
        f"Embedded ZooKeeper (from pyspark's jars) serving on {demo.hosts}; "
        f"environment [bold]{ENV}[/bold], work directory {demo.workdir}"
    )

    demo.section(f"2. Bootstrap: release {old.stem}, deploy generation 1, --auto-promote")
    blue = demo.start_sidecar("blue-1", old, 1, "--auto-promote")
    node = demo.wait_state(blue, "serving")
    demo.say(
        f"blue-1 is the {node.mode} (epoch {node.epoch}), state {node.state}, "
        f"HTTP on {blue.http}: the empty environment was bootstrapped"
    )

    demo.section("3. Writes through the leader's POST /append")
    for collection, rows in ((TABLES, TABLE_ROWS), (ROLES, ROLE_ROWS)):
        try:
            answer = blue.client().append(collection, rows)
        except SidecarError as exc:
            raise DemoError(f"append to {collection}: {exc}") from None
        demo.say(
            f"POST /append?collection={collection} -> 200: {answer.rows} rows "
            f"at ts {answer.ts}, upper now {answer.upper}"
        )

    demo.section(f"4. Blue-green: release {new.stem}, deploy generation 2, read-only")
    green = demo.start_sidecar("green-2", new, 2)
    node = demo.wait_state(green, "ready")
    plan = node.plan or {}
    demo.say(
        f"green-2 is {node.state} ({node.mode}); its plan {plan.get('from')} -> "
        f"{plan.get('to')}: {plan.get('counts')}"
    )
    try:
        green.client().append(TABLES, TABLE_ROWS[:1])
    except SidecarError as exc:
        demo.say(
            f"POST /append on the read-only green-2 -> {exc.status} ({exc.code}): "
            "only the leader writes"
        )
    else:
        raise DemoError("the read-only green-2 accepted an append")
    demo.command("status")

    demo.section("5. Promote generation 2")
    demo.command("promote", "--deploy-generation", "2", "--wait", "30")
    code = blue.wait_exit(30)
    if code is None:
        raise DemoError("blue-1 did not exit after the promotion")
    if code != EXIT_FENCED:
        raise DemoError(f"blue-1 exited with {code}, not 3 (fenced):\n{blue.tail_log()}")
    demo.say(f"blue-1 exited with code {code}: fenced by the newer generation")
    node = demo.wait_state(green, "serving")
    demo.say(f"green-2 is the {node.mode} now (epoch {node.epoch})")

    demo.section("6. The same rows, read through the new leader in the new schema")
    for collection, note in (
        (TABLES, "evolution: the added source_id reads as null"),
        (ROLES, "rewrite: numeric role ids became 'u7', 'u8'"),
    ):
        try:
            rows = green.client().read_rows(collection)
        except SidecarError as exc:
            raise DemoError(f"read of {collection}: {exc}") from None
        demo.say(f"GET /read?collection={collection}  [dim]({note})[/dim]")
        demo.console.print(rows_table(rows))

    demo.section("7. The upgrade is pending: 0.10.0 may still be promoted back")
    demo.command("status")
    demo.say(
        "Until it is final (after --finalize-after, 24 h by default, or now, by hand), "
        f"{plan.get('from') or old.stem} started at a new generation and promoted is a "
        "rollback (docs/operating.md: Rolling back a pending upgrade)"
    )
    demo.command("finalize", "--version", plan.get("to") or new.stem, "--wait", "30")
    demo.say("final: contractions registered; the leader finalizes the replaced shards next")

    demo.section("8. Shutdown")
    green.terminate()
    code = green.wait_exit(15)
    demo.say(f"SIGTERM: green-2 stepped down, deregistered and exited with code {code}")
    demo.say(f"Story told in {time.monotonic() - timer:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.testing.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--releases",
        type=Path,
        default=DEFAULT_RELEASES,
        help="release history directory (default: scenarios/releases)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (logs, ZooKeeper data, blobs)"
    )
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    # `make demo` often runs without a terminal: keep tables readable anyway.
    console = Console(width=None if sys.stdout.isatty() else 120)
    workdir = Path(tempfile.mkdtemp(prefix="catalog-upgrade-demo-"))
    demo: Demo | None = None
    try:
        demo = Demo(console=console, workdir=workdir, releases=first_two_releases(args.releases))
        run_story(demo)
        return 0
    except Exception as exc:  # the demo reports any failure, then cleans up
        console.print(f"[bold red]demo failed:[/bold red] {escape(str(exc))}")
        if demo is not None:
            for sidecar in demo.sidecars:
                console.print(f"[dim]--- {sidecar.name} log tail ---[/dim]")
                console.print(sidecar.tail_log(), markup=False, highlight=False)
        return 1
    finally:
        if demo is not None:
            demo.close()
        if args.keep:
            console.print(f"work directory kept: {escape(str(workdir))}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        console.print("[dim]ZooKeeper stopped, processes ended, temporary files removed[/dim]")


if __name__ == "__main__":
    sys.exit(main())
