"""Fleet benchmark: ``catalog-upgrade fleet --json`` over N environments on one ZooKeeper.

Every environment is bootstrapped by the product's own code (a real election, the leader's
migration, its shards and blobs) with a small release of two collections, and gets the process
node a serving leader registers. A few others run the example history in varied states: an
upgrade pending, a green generation ready and unpromoted, a leader gone, a generation refused.

Measured against an embedded ZooKeeper (``-Xmx1g``), in one run:

* ``survey_seconds``: the in-process survey and report (what ``fleet --json`` computes), best
  of ``--repeats``;
* ``cli_seconds``: the whole ``catalog-upgrade fleet --json`` command, process start included,
  best of three;
* ``round_trips``: the pipelined round trips of one survey (4, whatever N);
* ``zookeeper_rss_mb`` and ``znodes``: the server's resident memory and node count;
* ``bootstrap_seconds``: how long building the fleet took (not a target).

Targets: the survey under 2 s at 1,000 environments and at 10,000. JSON on stdout, and in
``benchmarks/results/fleet.json`` (``--environments 10000 --output fleet_10k.json`` for the run
at ten thousand, whose bootstrap takes minutes: not in the smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

import provenance
from bench_orchestrator import lead
from catalog.blob import BlobStore
from catalog.consensus import Consensus, Create, env_root
from catalog.release import Builtin, Release, load_release_dir
from orchestrator.events import record_event
from orchestrator.fleet.ensembles import FleetFile
from orchestrator.fleet.surveyor import Surveyor
from orchestrator.logs import configure_logging
from orchestrator.migrate import MigrationContext, check_read_only, migrate_as_leader
from orchestrator.process_node import ProcessNode, process_key
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect

RESULTS = Path(__file__).resolve().parent / "results"
HISTORY = Path(__file__).resolve().parents[1] / "scenarios" / "releases"

SMALL = Release(
    version="1.0.0",
    migrations=[],
    builtins=[
        Builtin(
            schema_name="bench",
            object_name=f"t{i}",
            kind="table",
            global_id=f"s{i}",
            schema=pa.schema(
                [pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())]
            ),
        )
        for i in range(2)
    ],
)


def _register(consensus: Consensus, ctx: MigrationContext, mode: str, state: str) -> None:
    """The process node a sidecar of ``ctx`` registers (ephemeral, its codec)."""
    now = time.time()
    node = ProcessNode(
        id=ctx.process_id,
        version=str(ctx.release.version),
        deploy_generation=ctx.deploy_generation,
        mode=mode,
        state=state,
        phase=state,
        phase_since=now,
        host="bench",
        pid=os.getpid(),
        started_at=now,
    )
    consensus.ensure("processes")
    consensus.commit([Create(process_key(ctx.process_id), node.encode(), ephemeral=True)])


def bootstrap_small(client: Any, name: str, blob: Path, release: Release = SMALL) -> None:
    consensus = Consensus(client, env_root(name))
    ctx = MigrationContext(
        consensus=consensus,
        blob=BlobStore.from_uri(str(blob / name)),
        release=release,
        deploy_generation=1,
        process_id=f"{name}-leader",
    )
    election, leadership = lead(consensus, ctx, bootstrap=True)
    migrate_as_leader(ctx, leadership)
    _register(consensus, ctx, "leader", "serving")
    election.stop()  # its ephemeral candidate goes; the process node stays with the session


def varied(client: Any, blob: Path) -> list[str]:
    """Environments of the example history in varied states."""
    releases = {str(r.version): r for r in load_release_dir(HISTORY)}
    made = []
    for state in ("pending", "green-waiting", "no-leader", "refused"):
        name = f"history-{state}"
        consensus = Consensus(client, env_root(name))
        store = BlobStore.from_uri(str(blob / name))

        def ctx(
            version: str,
            gen: int,
            consensus: Consensus = consensus,
            store: BlobStore = store,
            name: str = name,
            **options: Any,
        ) -> MigrationContext:
            return MigrationContext(
                consensus=consensus, blob=store, release=releases[version],
                deploy_generation=gen, process_id=f"{name}-g{gen}", **options,
            )  # fmt: skip

        first = ctx("0.10.0", 1)
        election, leadership = lead(consensus, first, bootstrap=True)
        migrate_as_leader(first, leadership)
        if state == "pending":
            second = ctx("0.11.0", 2, finalize_after=None)
            check_read_only(second)
            election.stop()
            election, leadership = lead(consensus, second, bootstrap=False)
            migrate_as_leader(second, leadership)
            _register(consensus, second, "leader", "serving")
        elif state == "green-waiting":
            _register(consensus, first, "leader", "serving")
            second = ctx("0.11.0", 2)
            check_read_only(second)
            _register(consensus, second, "read-only", "ready")
        elif state == "refused":
            error = {"error": "MigrationRefusedError", "message": "a downgrade", "exit_code": 4}
            record_event(consensus, "failed", owner=("0.9.0", 2), error=error)
        election.stop()
        made.append(name)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--environments", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4, help="threads bootstrapping")
    parser.add_argument("--output", default="fleet.json")
    args = parser.parse_args()
    configure_logging("WARNING")  # stdout carries only the JSON result
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = EmbeddedZooKeeper(data_dir=work / "zk", jvm_options=("-Xmx1g",)).start()
        client = connect(server.hosts)
        try:
            started = time.perf_counter()
            names = [f"env-{i:05d}" for i in range(args.environments - 4)]
            with ThreadPoolExecutor(args.workers) as pool:
                for done, _ in enumerate(pool.map(
                    lambda n: bootstrap_small(client, n, work / "blob"), names
                )):  # fmt: skip
                    if done % 500 == 0:
                        print(f"bootstrapped {done} of {len(names)}", file=sys.stderr)
            varied(client, work / "blob")
            bootstrap_seconds = time.perf_counter() - started
            surveyor = Surveyor(FleetFile.single(server.hosts), timeout=30.0, keep=True)
            surveys = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                report = surveyor.report()
                surveys.append(time.perf_counter() - t0)
            surveyor.close()
            summary = report.summary()
            assert summary["environments"] == args.environments, summary
            clis = []
            for _ in range(3):
                t0 = time.perf_counter()
                done_cli = subprocess.run(
                    [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING",
                     "fleet", "--zk", server.hosts, "--json"],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                clis.append(time.perf_counter() - t0)
                assert json.loads(done_cli.stdout)["summary"]["environments"] == args.environments
            mntr = dict(
                line.split("\t", 1)
                for line in server.four_letter_word("mntr", timeout=5).splitlines()
                if "\t" in line
            )
            rss = 0.0
            if server.pid is not None:
                for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) / 1024
        finally:
            close(client)
            server.stop()
    result = {
        "environments": args.environments,
        "survey_seconds": round(min(surveys), 3),
        "survey_seconds_all": [round(s, 3) for s in surveys],
        "cli_seconds": round(min(clis), 3),
        "cli_seconds_all": [round(s, 3) for s in clis],
        "round_trips": 4,
        "by_state": summary["by_state"],
        "zookeeper_rss_mb": round(rss, 1),
        "znodes": int(mntr.get("zk_znode_count", 0)),
        "zookeeper_data_mb": round(int(mntr.get("zk_approximate_data_size", 0)) / 2**20, 1),
        "bootstrap_seconds": round(bootstrap_seconds, 1),
        "cpu_count": os.cpu_count(),
    }
    result = provenance.record(RESULTS / args.output, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
