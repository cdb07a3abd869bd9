"""A long copy that survives a SIGKILL: how much of a 4M-row REWRITE a restart redoes.

Real sidecars on a real ZooKeeper, blobs on local disk. A leader of 0.10.0 holds ``--rows``
rows of ``mz_catalog.mz_roles`` (appended 100,000 at a time, one batch each, as a history
holds). A read-only process of 0.11.0 (which rewrites the collection) copies it on each
``--engines`` engine; past ``--kill-at`` of its copy (by its reported progress) it is SIGKILLed,
and a new process of the same generation starts. Reported per engine:

* ``killed_at_rows``: the progress the killed process had reported (a lower bound of what it
  had done);
* ``resumed_at_rows``: where the restarted process's progress starts (its checkpoint);
* ``redone_fraction``: ``(killed_at - resumed_at) / rows``, what the restart copies again
  (target: at most 0.1);
* ``copy_seconds`` (the killed run, up to its kill) and ``resumed_seconds`` (the restart, up to
  ready);
* ``rows_served_once``: after ``promote``, the new leader serves every row once.

JSON on stdout and in ``benchmarks/results/resume.json`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

import provenance
from orchestrator.election import promote, wait_promoted
from orchestrator.logs import configure_logging
from orchestrator.process_node import ProcessNode
from orchestrator.testing.examples import ROLES, release_file, roles
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect, consensus_for

RESULTS = Path(__file__).resolve().parent / "results"
APPEND = 100_000


def rows_done(node: ProcessNode) -> int:
    return int((node.progress or {}).get("rows_done", 0))


def run(engine: str, rows: int, kill_at: float, zk: str, work: Path) -> dict[str, Any]:
    env = f"resume-{engine}-{os.getpid()}"
    client = connect(zk, timeout=15.0)
    consensus = consensus_for(client, env)
    started: list[SidecarProcess] = []

    def start(version: str, generation: int, name: str, **options: Any) -> SidecarProcess:
        process = SidecarProcess.start(
            zk=zk, env=env, name=name, version=version,
            release_file=release_file(version),
            deploy_generation=generation, log_path=work / f"{env}-{name}-{len(started)}.log",
            blob=work / f"blob-{engine}", log_level="INFO", finalize_after="never", **options,
        )  # fmt: skip
        started.append(process)
        return process

    try:
        blue = start("0.10.0", 1, "blue", auto_promote=True)
        wait_promoted(consensus, 1, timeout=120)
        writer = blue.client(timeout=120)
        for at in range(0, rows, APPEND):
            writer.append(ROLES, roles(at, min(APPEND, rows - at)))
        extra = ("--engine", engine)
        began = time.monotonic()
        green = start("0.11.0", 2, "green", extra=extra)
        # Past ``kill_at`` of the copy; or ready, when the copy ended between two looks (a
        # small one): the kill then leaves nothing to redo.
        at_kill = green.wait_node(
            client, lambda n: rows_done(n) >= kill_at * rows or n.state == "ready", timeout=1800
        )
        killed_at = rows_done(at_kill) if at_kill.progress else rows
        green.kill()
        green.wait_exit(30)
        copy_seconds = time.monotonic() - began
        deadline = time.monotonic() + 60  # the killed session expires, and its node with it
        while client.exists(f"{consensus.root}/processes/green") is not None:
            if time.monotonic() > deadline:
                raise TimeoutError("the killed process's node stayed")
            time.sleep(0.2)
        began = time.monotonic()
        green = start("0.11.0", 2, "green", extra=extra)
        pid = green.pid
        # The restart reports its copy's progress; or, when the kill came after the copy's
        # last slice (a small copy, a slow watch), it has nothing left to copy and is ready.
        resumed = green.wait_node(
            client,
            lambda n: n.pid == pid
            and (bool(n.progress and n.progress.get("rows_total")) or n.state == "ready"),
            timeout=300,
        )
        resumed_at = rows_done(resumed) if resumed.progress else rows
        green.wait_ready(1800)
        resumed_seconds = time.monotonic() - began
        promote(consensus, 2, requested_by="bench_resume")
        wait_promoted(consensus, 2, timeout=300)
        table = green.client(timeout=300).read(ROLES)
        once = table.num_rows == rows and pc.count_distinct(table.column("id")).as_py() == rows
        return {
            "engine": engine,
            "rows": rows,
            "killed_at_rows": killed_at,
            "resumed_at_rows": resumed_at,
            "redone_fraction": round(max(0, killed_at - resumed_at) / rows, 4),
            "copy_seconds": round(copy_seconds, 1),
            "resumed_seconds": round(resumed_seconds, 1),
            "rows_served_once": once,
        }
    finally:
        for process in started:
            if process.running:
                process.terminate()
                process.wait_exit(30)
        close(client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--kill-at", type=float, default=0.55, help="of the copy's rows")
    parser.add_argument("--engines", default="arrow,spark")
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    configure_logging("WARNING")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        try:
            for engine in args.engines.split(","):
                result = run(engine, args.rows, args.kill_at, zookeeper.hosts, work)
                print(json.dumps(result), flush=True)
                results.append(result)
        finally:
            zookeeper.stop()
    entry = provenance.record_labelled(
        RESULTS / "resume.json",
        args.label,
        {"cpu_count": os.cpu_count(), "kill_at": args.kill_at, "engines": results},
    )
    print(json.dumps({args.label: entry}, indent=2))


if __name__ == "__main__":
    main()
