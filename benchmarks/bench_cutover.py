"""What clients feel at promotion: promotions and rollbacks in a row, real sidecars on a real
ZooKeeper, clients that follow the leader.

For each release pair it starts the old release's leader, then ``--promotions`` times starts a
process of the other release at the next generation and promotes it (upgrade, rollback,
upgrade...; a rollback's process runs with ``--rollback-from``). Throughout each promotion,
``--writers`` threads append one-row JSON lines, and one thread reads the collection, each
through a typed :class:`~catalog_client.SidecarClient` given both sidecars' URLs (it follows the
leader). Measured per promotion:

* ``write_gap_ms``: the longest stretch with no append acknowledged, across the writers;
* ``read_gap_ms``: the longest stretch with no read answered; ``read_wait_ms``: the longest a
  read took (a read is whole: its own time is in the gap); ``read_before_ms``: the longest a
  read took in the second before, with no promotion (what a read costs under this load);
* ``leader_write_gap_ms`` and ``timeline``: the new leader's own account, from its ``cutover``
  log line (``catalog_upgrade_cutover_seconds``): from the old leader's last commit to its
  first, and each mark of the promotion in seconds after the target was written;
* ``promote_ms``: ``promote`` plus ``wait_promoted``, what ``promote --wait`` does (without
  the CLI's own start);
* ``detours``: the answers the clients handled on the way (retried, or sent on to the other
  sidecar), by status and code; ``errors``: what reached a caller (target: none);
* ``exactly_once``: every acknowledged append read back once through the new leader.

Pairs: ``example`` (scenarios/releases 0.10.0 and 0.11.0) and ``wide`` (1,000 collections,
half evolved, half replaced). Reported: each promotion, and per pair and kind the median and
the maximum. JSON on stdout and in ``benchmarks/results/cutover.json`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import provenance
from catalog_client import SidecarClient
from orchestrator.election import promote, wait_promoted
from orchestrator.logs import configure_logging
from orchestrator.testing.followers import FollowingClients, longest_gap
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect, consensus_for

RESULTS = Path(__file__).resolve().parent / "results"
#: Rows in the collection the reader reads.
SEEDED = 1000
EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "releases"

#: 1,000 collections, half evolved by the upgrade, half replaced; appends go to ``bench.c0``
#: (evolved), reads to ``bench.c2`` (evolved too: a replaced one's history is dropped).
WIDE_RELEASES = """
import pyarrow as pa
from catalog.release import Builtin, Mechanism, Migration, Release

N = 1000
V1 = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
EVOLVED = V1.append(pa.field("note", pa.string()))
REPLACED = pa.schema([pa.field("id", pa.string(), nullable=False)])


def builtin(i, schema):
    return Builtin(schema_name="bench", object_name=f"c{i}", kind="table", global_id=f"s{i}",
                   schema=schema)


OLD = Release(version="1.0.0", builtins=[builtin(i, V1) for i in range(N)], migrations=[])
NEW = Release(
    version="1.1.0",
    builtins=[builtin(i, EVOLVED if i % 2 == 0 else REPLACED) for i in range(N)],
    previous=OLD,
    migrations=[
        Migration("1.1.0", "bench", f"c{i}", "table",
                  Mechanism.EVOLUTION if i % 2 == 0 else Mechanism.REPLACEMENT)
        for i in range(N)
    ],
)
"""


class Pair:
    """Two releases (old, new) as files, the collection the writers append to, and the one the
    reader reads (seeded with ``SEEDED`` rows)."""

    def __init__(
        self, name: str, old: Path, new: Path, collections: tuple[str, str],
        version: tuple[str, str],
    ) -> None:  # fmt: skip
        self.name, self.old, self.new = name, old, new
        self.collection, self.read_collection = collections
        self.version = version

    def seed(self) -> list[dict[str, Any]]:
        """What the reader's collection holds (in the old release's rows)."""
        if self.name == "example":  # mz_roles: rewritten by 0.11.0, its ids turned to strings
            return [{"id": n, "oid": n, "name": f"r{n}", "inherit": True} for n in range(SEEDED)]
        return [{"id": n, "name": f"r{n}"} for n in range(SEEDED)]

    def row(self, n: int) -> dict[str, Any]:
        if self.name == "example":  # mz_tables: the same columns in both releases' rows
            return {"id": f"w{n}", "oid": n, "schema_id": "u3", "name": f"w{n}", "owner_id": "u1"}
        return {"id": n, "name": f"w{n}"}


def pairs(work: Path) -> dict[str, Pair]:
    (work / "wide_releases.py").write_text(textwrap.dedent(WIDE_RELEASES))
    (work / "v1_0_0.py").write_text("from wide_releases import OLD as RELEASE\n")
    (work / "v1_1_0.py").write_text("from wide_releases import NEW as RELEASE\n")
    return {
        "example": Pair("example", EXAMPLES / "v0_10_0.py", EXAMPLES / "v0_11_0.py",
                        ("mz_catalog.mz_tables", "mz_catalog.mz_roles"), ("0.10.0", "0.11.0")),
        "wide": Pair("wide", work / "v1_0_0.py", work / "v1_1_0.py", ("bench.c0", "bench.c2"),
                     ("1.0.0", "1.1.0")),
    }  # fmt: skip


def gap_ms(times: list[float], start: float, end: float) -> float:
    return round(1000 * longest_gap(times, start, end), 1)


def cutover_logged(process: SidecarProcess, wait: float = 10.0) -> dict[str, Any]:
    """The new leader's ``cutover`` log line: its timeline and its own write gap (it logs
    them at its first beat after the first append, once the old leader's exit is recorded)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for line in process.log_path.read_text().splitlines():
            if '"cutover"' not in line:
                continue
            event = json.loads(line)
            gap = event.get("write_gap_seconds")
            return {
                "leader_write_gap_ms": None if gap is None else round(1000 * gap, 1),
                "timeline": event.get("timeline"),
            }
        time.sleep(0.2)
    return {"leader_write_gap_ms": None, "timeline": None}


def run_pair(
    pair: Pair, promotions: int, writers: int, zk: str, work: Path
) -> list[dict[str, Any]]:
    env = f"cutover-{pair.name}-{os.getpid()}"
    client = connect(zk, timeout=15.0)
    consensus = consensus_for(client, env)
    results: list[dict[str, Any]] = []

    def start(generation: int, new: bool, rollback: bool) -> SidecarProcess:
        release = pair.new if new else pair.old
        process = SidecarProcess.start(
            zk=zk, env=env, name=f"g{generation}", version=pair.version[new],
            release_file=release, deploy_generation=generation,
            log_path=work / f"{pair.name}-g{generation}.log", blob=work / f"blob-{pair.name}",
            auto_promote=generation == 1, log_level="INFO", finalize_after="never",
            extra=("--rollback-from", str(pair.new)) if rollback else (),
        )  # fmt: skip
        process.wait_ready(300)
        return process

    leader = start(1, False, False)
    wait_promoted(consensus, 1, timeout=120)
    SidecarClient(f"http://{leader.http}").append(pair.read_collection, pair.seed())
    first = 0
    try:
        for promotion in range(1, promotions + 1):
            generation = promotion + 1
            upgrade = promotion % 2 == 1
            green = start(generation, upgrade, rollback=not upgrade)
            clients = FollowingClients(
                [f"http://{leader.http}", f"http://{green.http}"], pair.collection,
                pair.read_collection, pair.row, writers=writers, first=first,
            ).start()  # fmt: skip
            time.sleep(2.0)  # the clients settle on the serving leader
            began = time.monotonic()
            promote(consensus, generation, requested_by="bench_cutover")
            wait_promoted(consensus, generation, timeout=300)
            promoted = time.monotonic()
            time.sleep(1.0)
            clients.stop()
            ended = time.monotonic()
            leader.wait_exit(60)
            read = SidecarClient(f"http://{green.http}", timeout=60).read_rows(pair.collection)
            ids = Counter(row["id"] for row in read)
            rows = [pair.row(n)["id"] for n in clients.acked]
            once = all(ids[r] == 1 for r in rows)
            window = (began - 0.5, ended - 0.5)
            result = {
                "pair": pair.name,
                "promotion": promotion,
                "kind": "upgrade" if upgrade else "rollback",
                "write_gap_ms": gap_ms(list(clients.acked.values()), *window),
                "read_gap_ms": gap_ms([answered for _, answered in clients.reads], *window),
                "read_wait_ms": round(1000 * max(
                    (b - a for a, b in clients.reads if b >= window[0]), default=0.0), 1),
                "read_before_ms": round(1000 * max(
                    (b - a for a, b in clients.reads if window[0] - 1.0 <= b < window[0]),
                    default=0.0), 1),
                "promote_ms": round(1000 * (promoted - began), 1),
                "appends": len(clients.acked),
                "reads": len(clients.reads),
                "detours": dict(clients.detours()),
                "errors": clients.errors[:5],
                "exactly_once": once,
            }
            result.update(cutover_logged(green))
            print(json.dumps(result), flush=True)
            results.append(result)
            first = clients.next_row + 1
            leader = green
    finally:
        for process in (leader,):
            if process.running:
                process.terminate()
                process.wait_exit(30)
        close(client)
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in sorted({r["pair"] for r in results}):
        for kind in ("upgrade", "rollback"):
            some = [r for r in results if r["pair"] == pair and r["kind"] == kind]
            if not some:
                continue
            figures: dict[str, Any] = {}
            for field in ("write_gap_ms", "leader_write_gap_ms", "read_gap_ms",
                          "read_wait_ms", "read_before_ms", "promote_ms"):  # fmt: skip
                values = [r[field] for r in some if r[field] is not None]
                if not values:
                    continue
                figures[field] = {"median": statistics.median(values), "max": max(values)}
            figures["promotions"] = len(some)
            figures["errors"] = sum(len(r["errors"]) for r in some)
            figures["exactly_once"] = all(r["exactly_once"] for r in some)
            out[f"{pair} {kind}"] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--promotions", type=int, default=20, help="per pair, half rollbacks")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--pairs", default="example,wide")
    parser.add_argument("--label", default="current")
    parser.add_argument("--work", type=Path, help="keep the logs and blobs here (a new dir)")
    args = parser.parse_args()
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.work is None else args.work
        work.mkdir(parents=True, exist_ok=args.work is None)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk").start()
        try:
            known = pairs(work)
            results = []
            for name in args.pairs.split(","):
                results += run_pair(known[name], args.promotions, args.writers,
                                    zookeeper.hosts, work)  # fmt: skip
        finally:
            zookeeper.stop()
    entry = provenance.record_labelled(RESULTS / "cutover.json", args.label, {
        "cpu_count": os.cpu_count(),
        "writers": args.writers,
        "summary": summary(results),
        # One promotion's timeline per pair and kind: the first of each (the docs show one).
        "timelines": {
            f"{r['pair']} {r['kind']}": r["timeline"]
            for r in reversed(results)
            if r["timeline"] is not None
        },
        "promotions": [
            {**{k: v for k, v in r.items() if k not in ("timeline", "detours", "errors")},
             "errors": len(r["errors"]),
             "detours": ", ".join(f"{k} x{v}" for k, v in sorted(r["detours"].items()))}
            for r in results
        ],
    })
    print(json.dumps({args.label: entry["summary"]}, indent=2))


if __name__ == "__main__":
    main()
