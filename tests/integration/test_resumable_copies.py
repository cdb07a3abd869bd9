"""Copies that resume, with real sidecars on a real ZooKeeper: a read-only process copying a
REWRITE (0.10.0 -> 0.11.0 rewrites mz_roles) of 2M rows is SIGKILLed twice mid-copy. Each
restart starts its progress at the last checkpoint, not at 0, so it redoes at most the slice
it interrupted; once promoted, its leader serves every row once. On Spark, where a slice is a
job, `test_pacing.py` fails a copy mid-way and resumes it, and `benchmarks/bench_resume.py`
SIGKILLs a 4M-row copy on each engine and measures the fraction redone (a sidecar's Spark
copy of 600k rows took 160 s of a loaded suite)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pyarrow.compute as pc
import pytest

from catalog.errors import EXIT_OK
from catalog.pipeline.checkpoints import slice_rows
from orchestrator.testing.examples import ROLES, roles
from support.sidecars import Launch, SidecarProcess, cli
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Rows, and rows per append (one batch each, as a collection's history holds), by engine.
ROWS = {"arrow": (2_000_000, 100_000)}
#: Rows per second: a copy of about 5 s a run, slow enough to be killed at chosen points
#: however fast the machine, and its progress seen (a process reports it every second).
RATE = "400000"
#: Where each engine's copy is killed, as fractions of its rows.
KILL_AT = {"arrow": (0.3, 0.65)}


def progress(node: Mapping[str, Any]) -> dict[str, int]:
    found = node.get("progress")
    return found if isinstance(found, dict) else {}


@pytest.mark.parametrize("engine", ["arrow"])
def test_a_killed_copy_resumes_from_its_last_checkpoint(
    launch: Launch, zk_env: ZkEnv, engine: str
) -> None:
    rows, append = ROWS[engine]
    # No frontier sweep during the test (its first comes a sweep interval after the start):
    # the source's since stays below the copy (a restart after a sweep that moved it past
    # the first checkpoint re-reads the whole source, by difference).
    blue = launch("0.10.0", 1, "blue", auto_promote=True, extra=["--gc-grace", "3600"])
    blue.wait_state("serving")
    writer = blue.sidecar.client(timeout=120)
    for start in range(0, rows, append):
        writer.append(ROLES, roles(start, append))
    extra = ["--engine", engine, "--copy-rate", RATE]

    def start_green() -> SidecarProcess:
        return launch("0.11.0", 2, "green", extra=extra)

    green = start_green()
    for fraction in KILL_AT[engine]:
        def past(node: Mapping[str, Any], at: float = fraction) -> bool:
            return progress(node).get("rows_done", 0) >= at * rows

        seen = green.wait_node(past, timeout=180)
        reached = progress(seen)["rows_done"]
        green.kill()
        deadline = time.monotonic() + 30  # its session expires, and its node with it
        while green.client.exists(green.node_path):
            assert time.monotonic() < deadline, "the killed process's node stayed"
            time.sleep(0.2)
        green = start_green()
        pid = green.sidecar.pid
        def planned(node: Mapping[str, Any], pid: int = pid) -> bool:
            return node.get("pid") == pid and progress(node).get("rows_total") is not None

        resumed = progress(green.wait_node(planned, timeout=120))
        assert resumed["rows_total"] == rows
        redone = reached - resumed["rows_done"]
        print(f"\n{engine}: killed at {reached:,} rows, resumed at {resumed['rows_done']:,}")
        # At most the slice the kill interrupted (a batch per core at least, on Spark), and
        # the rows the copy got through after its last report.
        slice_ = max(slice_rows(rows), 2 * append if engine == "spark" else append)
        assert redone <= slice_ + append, f"the restart redoes {redone:,} of {rows:,} rows"

    green.wait_state("ready", timeout=240)
    done = cli("promote", "--deploy-generation", "2", "--wait", "120",
               "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    green.wait_state("serving")
    table = green.sidecar.client(timeout=120).read(ROLES)
    assert table.num_rows == rows
    assert pc.count_distinct(table.column("id")).as_py() == rows
    # 0.11.0's rewrite names each role by its id: every source row, transformed, once.
    assert set(table.column("id").to_pylist()) == {f"u{n}" for n in range(rows)}
