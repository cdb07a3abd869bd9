"""Orchestrator benchmark at the target scale: 1,000 collections of 15 columns, half evolved
(each shard listing 10,000 batches: 500 inline, the rest in roll-up blobs), half replaced.

Measures, against a real ZooKeeper (embedded unless ``CATALOG_UPGRADE_ZK`` is set), each the
best of ``--runs`` (3) fresh environments:

* ``ready_seconds``: a read-only process of the new release, from connecting to ``ready``
  (plan, history checks of 500 evolutions, 500 replacement shards created and registered);
* ``leader_seconds``: the promoted leader's migration up to serving (takeover and finalization
  not included: the upgrade stays pending): 500 schema
  registrations, each writing the head of a split state (about 1.2 KB; the body listing the
  batches, about 30 KB, is not written). ``leader_seconds_whole`` is the same on states stored
  whole (as earlier releases wrote them), where each registration rewrites all 30 KB, in the
  same run (``--form``);
* ``rollback_ready_seconds`` and ``rollback_seconds``: while that upgrade is pending (the
  window), a process of the old release at a newer generation: its read-only check (what to
  carry back: nothing was written), and its leader's rollback (the previous catalog restored,
  500 replacements queued);
* ``finalize_seconds``: after upgrading again, ``finalize``: the decision and the leader's
  work (contractions, the catalog marked final, the pending node deleted);
* ``failover_seconds``: after SIGKILL of a leader sidecar with a 2 s session timeout, until a
  second sidecar of the same generation serves (target: session timeout + 1 s).

Targets: ready < 1.5 s, leader migration < 3 s, failover < session timeout + 1 s. JSON on stdout
and in ``benchmarks/results/orchestrator.json``. The batch entries name no real Parquet blobs:
the orchestrator reads and rewrites shard states and roll-up listings, never batch data.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa

import provenance
from catalog.blob import BlobStore
from catalog.consensus import Consensus, SetData
from catalog.environment import read_catalog
from catalog.release import Builtin, Mechanism, Migration, Release
from catalog.shard import ROLLUP_THRESHOLD, BatchRef, Shard, change_ops, evolve_op, shard_key
from orchestrator.election import LeaderElection, promote
from orchestrator.logs import configure_logging
from orchestrator.migrate import (
    MigrationContext,
    check_read_only,
    complete_finalization,
    migrate_as_leader,
    request_finalization,
)
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect

RESULTS = Path(__file__).resolve().parent / "results"

V1_SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False)]
    + [pa.field(f"c{i}", pa.string()) for i in range(14)]
)
EVOLVED = V1_SCHEMA.append(pa.field("note", pa.string()))
REPLACED = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("name", pa.string())])


def releases(collections: int) -> tuple[Release, Release]:
    builtins = [
        Builtin(
            schema_name="bench",
            object_name=f"c{i}",
            kind="table",
            global_id=f"s{i}",
            schema=V1_SCHEMA,
        )
        for i in range(collections)
    ]
    v1 = Release(version="1.0.0", builtins=builtins, migrations=[])
    migrations = []
    v2_builtins = []
    for i, b in enumerate(builtins):
        evolution = i % 2 == 0
        v2_builtins.append(
            Builtin(
                schema_name=b.schema_name,
                object_name=b.object_name,
                kind="table",
                global_id=b.global_id,
                schema=EVOLVED if evolution else REPLACED,
            )
        )
        migrations.append(
            Migration(
                version="1.1.0",
                schema_name=b.schema_name,
                object_name=b.object_name,
                kind="table",
                mechanism=Mechanism.EVOLUTION if evolution else Mechanism.REPLACEMENT,
            )
        )
    return v1, Release(version="1.1.0", builtins=v2_builtins, migrations=migrations)


def lead(consensus: Consensus, ctx: MigrationContext, *, bootstrap: bool) -> Any:
    election = LeaderElection(
        consensus,
        ctx.process_id,
        ctx.deploy_generation,
        release=str(ctx.version),
        on_change=lambda _e: None,
    )
    election.start()
    if not bootstrap:
        promote(consensus, ctx.deploy_generation, requested_by="bench")
    leadership = election.try_take_over(bootstrap=bootstrap)
    assert leadership is not None
    return election, leadership


def fill(
    consensus: Consensus, blob: BlobStore, shard_id: str, batches: int, split: bool
) -> tuple[int, int]:
    """List ``batches`` batch entries on the shard, as appends would have: the newest
    ``ROLLUP_THRESHOLD`` inline, the older ones in roll-up blobs; stored split (head and body)
    or whole. The state's size in bytes, and the size of the op registering a schema on it."""
    shard = Shard(consensus, blob, shard_id)
    state = shard.state()
    refs = [BatchRef(f"{i:032x}", 0, 10, i, i + 1) for i in range(batches)]
    inline = max(0, batches - ROLLUP_THRESHOLD)
    rollups = tuple(
        shard.rollups.write(refs[start : min(start + ROLLUP_THRESHOLD, inline)])
        for start in range(0, inline, ROLLUP_THRESHOLD)
    )
    full = attrs.evolve(state, batches=tuple(refs[inline:]), rollups=rollups, upper=batches)
    if split:
        ops, full = change_ops(state, full)
        consensus.commit(ops)
        size = len(full.encode_head()) + len(full.encode_body())
    else:
        size = len(full.encode())
        consensus.commit([SetData(shard_key(shard_id), full.encode(), state.version)])
        full = attrs.evolve(full, version=state.version + 1)
    op, _ = evolve_op(full, EVOLVED)
    assert isinstance(op, SetData)
    return size, len(op.value)


def in_process(
    hosts: str, collections: int, batches: int, blob_dir: Path, split: bool
) -> dict[str, float]:
    v1, v2 = releases(collections)
    env_root = f"/catalog-upgrade/bench-{os.getpid()}-{int(time.time())}"
    blob = BlobStore.from_uri(str(blob_dir))
    setup = connect(hosts)
    consensus = Consensus(setup, env_root)
    ctx1 = MigrationContext(consensus, blob, v1, 1, "bench-old")
    election1, leadership1 = lead(consensus, ctx1, bootstrap=True)
    started = time.perf_counter()
    migrate_as_leader(ctx1, leadership1)
    bootstrap_seconds = time.perf_counter() - started
    election1.stop()
    found = read_catalog(consensus)
    assert found is not None
    evolved = [found[0].collections[f"s{i}"].shard_id for i in range(0, collections, 2)]
    started = time.perf_counter()
    sizes = [fill(consensus, blob, shard_id, batches, split) for shard_id in evolved]
    fill_seconds = time.perf_counter() - started

    started = time.perf_counter()
    client = connect(hosts)
    new = Consensus(client, env_root)
    ctx2 = MigrationContext(new, blob, v2, 2, "bench-new", finalize_after=None)
    check_read_only(ctx2)
    ready_seconds = time.perf_counter() - started

    election2, leadership2 = lead(new, ctx2, bootstrap=False)
    started = time.perf_counter()
    result = migrate_as_leader(ctx2, leadership2)
    leader_seconds = time.perf_counter() - started
    assert len(result.evolved) == collections // 2, result.evolved
    assert result.pending
    election2.stop()

    # The rollback: 1.0.0 at generation 3, read-only check (its plan: what to carry), then its
    # leader restores the previous catalog (500 old shards back, 500 replacements queued).
    started = time.perf_counter()
    ctx3 = MigrationContext(new, blob, v1, 3, "bench-back")
    check_read_only(ctx3)
    rollback_ready_seconds = time.perf_counter() - started
    election3, leadership3 = lead(new, ctx3, bootstrap=False)
    started = time.perf_counter()
    back = migrate_as_leader(ctx3, leadership3)
    rollback_seconds = time.perf_counter() - started
    assert back.rolled_back_from == "1.1.0", back
    election3.stop()

    # Upgrade again (pending), then finalize: the decision, and the leader's work (500
    # contractions checked, the catalog marked final, the pending node deleted).
    ctx4 = MigrationContext(new, blob, v2, 4, "bench-again", finalize_after=None)
    check_read_only(ctx4)
    election4, leadership4 = lead(new, ctx4, bootstrap=False)
    migrate_as_leader(ctx4, leadership4)
    started = time.perf_counter()
    request_finalization(new, requested_by="bench", reason="operator")
    done = complete_finalization(ctx4, leadership4.fence)
    finalize_seconds = time.perf_counter() - started
    assert done is not None
    election4.stop()
    consensus.delete_tree("")
    close(client)
    close(setup)
    return {
        "bootstrap_seconds": round(bootstrap_seconds, 3),
        "fill_seconds": round(fill_seconds, 3),
        "evolved_state_bytes": max((s for s, _ in sizes), default=0),
        "registration_op_bytes": max((r for _, r in sizes), default=0),
        "ready_seconds": round(ready_seconds, 3),
        "leader_seconds": round(leader_seconds, 3),
        "rollback_ready_seconds": round(rollback_ready_seconds, 3),
        "rollback_seconds": round(rollback_seconds, 3),
        "finalize_seconds": round(finalize_seconds, 3),
    }


def failover(hosts: str, work: Path, session_timeout: float) -> dict[str, float]:
    """SIGKILL a serving leader; time until a same-generation standby serves."""
    release_file = work / "bench_release.py"
    release_file.write_text(
        textwrap.dedent(
            """
            import pyarrow as pa
            from catalog.release import Builtin, Release
            RELEASE = Release(version="1.0.0", migrations=[], builtins=[
                Builtin(schema_name="bench", object_name=f"c{i}", kind="table",
                        global_id=f"s{i}",
                        schema=pa.schema([pa.field("id", pa.int64(), nullable=False)]))
                for i in range(20)])
            """
        )
    )
    env = f"failover-{os.getpid()}"
    procs: list[SidecarProcess] = []
    try:
        for name in ("first", "second"):
            process = SidecarProcess.start(
                zk=hosts, env=env, name=name, version="1.0.0", release_file=release_file,
                deploy_generation=1, log_path=work / f"{name}.log", blob=work / "blob",
                session_timeout=session_timeout, auto_promote=True, log_level="WARNING",
            )  # fmt: skip
            procs.append(process)
            procs[-1].wait_ready(60)
        status = procs[0].request("GET", "/status", timeout=5).json()
        leader = (status.get("leader") or {}).get("id")
        victim = procs[0] if leader == "first" else procs[1]
        standby = procs[1] if victim is procs[0] else procs[0]
        killed = time.monotonic()
        victim.kill()
        deadline = killed + 30
        while time.monotonic() < deadline:
            leader = standby.request("GET", "/status", timeout=5).json().get("leader") or {}
            if leader.get("id") == standby.name and leader.get("state") == "serving":
                return {"failover_seconds": round(time.monotonic() - killed, 3)}
            time.sleep(0.02)
        raise TimeoutError("no failover within 30 s")
    finally:
        for proc in procs:
            if proc.running:
                proc.terminate()
                proc.wait_exit(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--collections", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=10_000, help="per evolved shard")
    parser.add_argument("--runs", type=int, default=3, help="fresh environments; best kept")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument(
        "--form",
        choices=("both", "split", "whole"),
        default="both",
        help="how the evolved shard states are stored (both: each run measures both)",
    )
    args = parser.parse_args()
    configure_logging("WARNING")  # stdout carries only the JSON result
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hosts = os.environ.get("CATALOG_UPGRADE_ZK")
        server = None
        if not hosts:
            server = EmbeddedZooKeeper(data_dir=work / "zk").start()
            hosts = server.hosts
        try:
            forms = {"both": (True, False), "split": (True,), "whole": (False,)}[args.form]
            runs = []
            for run in range(args.runs):
                measured: dict[str, float] = {}
                for split in forms:
                    one = in_process(
                        hosts, args.collections, args.batches, work / f"blob{run}{split}", split
                    )
                    suffix = "" if split else "_whole"
                    measured.update({f"{k}{suffix}": v for k, v in one.items()})
                runs.append(measured)
            result: dict[str, Any] = {
                "collections": args.collections,
                "batches_per_evolved_shard": args.batches,
                "columns": len(V1_SCHEMA),
                "runs": args.runs,
                "form": args.form,
                "cpu_count": os.cpu_count(),
                **{key: min(r[key] for r in runs) for key in runs[0]},
                "all_runs": runs,
            }
            if not args.skip_failover:
                result.update(failover(hosts, work, args.session_timeout))
                result["session_timeout"] = args.session_timeout
        finally:
            if server is not None:
                server.stop()
    result = provenance.record(RESULTS / "orchestrator.json", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
