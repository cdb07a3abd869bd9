"""Reversible upgrades against a real ZooKeeper and real Parquet blobs, over the example history.

0.10.0 -> 0.11.0 stays pending; rows are appended under 0.11.0; 0.10.0 is promoted back (its
writes to the rewritten ``mz_roles`` carried back through the release's inverse, those to the
replaced ``mz_cluster_replica_statuses`` refused until discarded); 0.11.0 is promoted again,
finalized, and 0.10.0 is then refused. Each step reads every row. Then the same rollback and
finalization with the leader killed before each of its writes, and with each write's answer
lost: a restart (or the retry) completes the same work, exactly once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.environment import read_catalog
from catalog.errors import BadInputError, ConnectionLostError, MigrationRefusedError
from catalog.pending import read_pending
from catalog.release import Release, load_release_dir
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Rows, append_rows
from orchestrator.election import Leadership
from orchestrator.migrate import (
    MigrationContext,
    check_read_only,
    complete_finalization,
    finalize_pending,
    migrate_as_leader,
    request_finalization,
)
from orchestrator.status.coverage import read_coverage
from support.migrations import (
    Env,
    SimulatedCrash,
    append_as_release,
    bootstrap,
    read_as_release,
)
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

RELEASES_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "releases"
ROLES = "mz_catalog.mz_roles"  # rewritten by 0.11.0 (ids become strings), with an inverse
TABLES = "mz_catalog.mz_tables"  # evolved by 0.11.0 (gains source_id)
STATUSES = "mz_internal.mz_cluster_replica_statuses"  # replaced by 0.11.0, no inverse
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def releases() -> dict[str, Release]:
    return {str(r.version): r for r in load_release_dir(RELEASES_DIR)}


def new_env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, name: str) -> Env:
    return Env(zk_client, f"{zk_env.root}/{name}", BlobStore.from_uri(str(tmp_path / name)))


@pytest.fixture
def env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> Iterator[Env]:
    environment = new_env(zk_client, zk_env, tmp_path, "rollback")
    yield environment
    environment.close()


def role(i: int, version: str) -> dict[str, Any]:
    rid: Any = i if version == "0.10.0" else f"u{i}"
    return {"id": rid, "oid": i, "name": f"r{i}", "inherit": True, "vars": None}


def table(i: int, version: str) -> dict[str, Any]:
    row = {"id": f"t{i}", "oid": i, "schema_id": "s1", "name": f"t{i}", "owner_id": "u1",
           "privileges": None, "create_sql": None}  # fmt: skip
    if version != "0.10.0":
        row["source_id"] = None  # what rows written under 0.10.0 read as
    return row


def status(i: int, version: str) -> dict[str, Any]:
    code: Any = i if version == "0.10.0" else "ready"
    return {"replica_id": f"r{i}", "process_id": i, "status": code, "reason": None,
            "updated_at": AT}  # fmt: skip


ROWS = {ROLES: role, TABLES: table, STATUSES: status}


def append(ctx: MigrationContext, name: str, ids: list[int]) -> None:
    """Append as a sidecar of ``ctx``'s release does: its own schema, to the catalog's shard."""
    builtin = ctx.release.builtin(name)
    assert builtin is not None
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard = ctx.shard(found[0].by_name()[name].shard_id)
    rows = [ROWS[name](i, str(ctx.version)) for i in ids]
    append_rows(shard, Rows(pa.Table.from_pylist(rows, schema=builtin.schema), builtin.schema))


def read(ctx: MigrationContext, name: str) -> list[dict[str, Any]]:
    """Every row of ``name`` as ``ctx``'s release reads it."""
    builtin = ctx.release.builtin(name)
    assert builtin is not None
    found = read_catalog(ctx.consensus)
    assert found is not None
    data = ctx.shard(found[0].by_name()[name].shard_id).snapshot()
    source = pa.schema([f for f in data.schema if f.name not in (TS, DIFF)])
    if not source.equals(builtin.schema):
        data = migrate_batch(data, source, builtin.schema, projection=True)
    return sorted(data.drop_columns([TS, DIFF]).to_pylist(), key=lambda r: r["oid"]
                  if "oid" in r else r["process_id"])  # fmt: skip


def expect(ctx: MigrationContext, name: str, ids: list[int]) -> None:
    version = str(ctx.version)
    wanted = sorted((ROWS[name](i, version) for i in ids),
                    key=lambda r: r["oid"] if "oid" in r else r["process_id"])  # fmt: skip
    assert read(ctx, name) == wanted, f"{name} as {version}"


def upgrade(env: Env, release: Release, generation: int, **options: Any) -> MigrationContext:
    ctx = env.ctx(release, generation, **options)
    check_read_only(ctx)
    LEADERS[id(env)] = env.lead(ctx)
    migrate_as_leader(ctx, LEADERS[id(env)])
    return ctx


LEADERS: dict[int, Leadership] = {}


def pending_state(env: Env, releases: dict[str, Release]) -> MigrationContext:
    """0.10.0 with rows, upgraded to 0.11.0 (pending) with rows of its own."""
    old = bootstrap(env, releases["0.10.0"])
    for name in ROWS:
        append(old, name, [1, 2])
    new = upgrade(env, releases["0.11.0"], 2, finalize_after=None)
    for name in ROWS:
        append(new, name, [3])
    return new


def test_upgrade_rollback_reupgrade_finalize(env: Env, releases: dict[str, Release]) -> None:
    new = pending_state(env, releases)
    found = read_pending(new.consensus)
    assert found is not None
    pending = found[0]
    assert (pending.version, pending.from_version, pending.from_generation) == (
        "0.11.0",
        "0.10.0",
        1,
    )
    assert pending.finalize_at is None and pending.finalizing is None
    assert {r.name for r in pending.replaced.values()} == {ROLES, STATUSES}
    for shard_id in pending.protected_shards():  # nothing 0.10.0 needs is finalized
        finalize_pending(new, None, lease_timeout=0)
        assert not new.shard(shard_id).state().finalized
    coverage = read_coverage(new.consensus).get(TABLES)  # 0.10.0 may still write with its schema
    assert coverage is not None and coverage.coverage.writers == (0,)
    assert 0 in coverage.coverage.needed
    expect(new, ROLES, [1, 2, 3])  # copied through the rewrite, then 0.11.0's own
    expect(new, TABLES, [1, 2, 3])
    expect(new, STATUSES, [3])  # a replacement starts empty

    # Without the release's inverse, or with a replaced collection written: refused, no write.
    before = env.client.get(f"{env.root}/catalog")[1].version
    with pytest.raises(MigrationRefusedError) as refused:
        check_read_only(env.ctx(releases["0.10.0"], 3))
    assert refused.value.details["rule"] == "rollback-loses-writes"
    assert refused.value.details["collections"] == [ROLES, STATUSES]
    assert "--rollback-from" in refused.value.details["suggestion"]
    with pytest.raises(MigrationRefusedError) as refused:
        check_read_only(env.ctx(releases["0.10.0"], 3, rollback_from=releases["0.11.0"]))
    assert refused.value.details["collections"] == [STATUSES]
    with pytest.raises(BadInputError, match="did not replace"):
        check_read_only(env.ctx(releases["0.10.0"], 3, discard_writes_to=frozenset({TABLES})))
    with pytest.raises(BadInputError, match=r"pending upgrade is to 0\.11\.0"):
        check_read_only(env.ctx(releases["0.10.0"], 3, rollback_from=releases["0.12.0"]))
    assert env.client.get(f"{env.root}/catalog")[1].version == before

    back = upgrade(env, releases["0.10.0"], 3, rollback_from=releases["0.11.0"],
                   discard_writes_to=frozenset({STATUSES}))  # fmt: skip
    catalog = read_catalog(back.consensus)
    assert catalog is not None and catalog[0].version == "0.10.0"
    assert catalog[0].deploy_generation == 3
    assert read_pending(back.consensus) is None
    expect(back, ROLES, [1, 2, 3])  # carried back through the inverse: 'u3' -> 3
    expect(back, TABLES, [1, 2, 3])  # the evolved shard, read through 0.10.0's schema
    expect(back, STATUSES, [1, 2])  # 0.11.0's row discarded, as asked
    for name in ROWS:
        append(back, name, [4])
        expect(back, name, [1, 2, 3, 4] if name != STATUSES else [1, 2, 4])

    again = upgrade(env, releases["0.11.0"], 4, finalize_after=None)
    expect(again, ROLES, [1, 2, 3, 4])
    expect(again, TABLES, [1, 2, 3, 4])
    expect(again, STATUSES, [])  # a replacement starts empty
    answer = request_finalization(again.consensus, requested_by="ops", reason="operator")
    assert answer.pending is not None and answer.pending.finalizing is not None
    assert complete_finalization(again, LEADERS[id(env)].fence) is not None
    assert read_pending(again.consensus) is None
    final = read_catalog(again.consensus)
    assert final is not None and final[0].finalized is not None
    assert final[0].finalized.deploy_generation == 4 and final[0].finalized.by == "ops"
    assert request_finalization(
        again.consensus, requested_by="ops", reason="operator"
    ).already_final
    with pytest.raises(MigrationRefusedError, match="finalized at deploy generation 4") as refused:
        check_read_only(env.ctx(releases["0.10.0"], 5))
    assert refused.value.details["rule"] == "finalized"


ROLLBACK = {"discard_writes_to": frozenset({STATUSES})}


def rolled_back_completely(ctx: MigrationContext, where: str) -> None:
    catalog = read_catalog(ctx.consensus)
    assert catalog is not None and catalog[0].version == "0.10.0", where
    assert read_pending(ctx.consensus) is None, where
    expect(ctx, ROLES, [1, 2, 3])
    expect(ctx, TABLES, [1, 2, 3])
    expect(ctx, STATUSES, [1, 2])


def finalized_completely(ctx: MigrationContext, where: str) -> None:
    catalog = read_catalog(ctx.consensus)
    assert catalog is not None and catalog[0].version == "0.11.0", where
    assert catalog[0].finalized is not None and catalog[0].finalized.deploy_generation == 2, where
    assert read_pending(ctx.consensus) is None, where
    expect(ctx, ROLES, [1, 2, 3])
    expect(ctx, TABLES, [1, 2, 3])
    expect(ctx, STATUSES, [3])


def count_writes(
    zk_client: KazooClient,
    zk_env: ZkEnv,
    tmp_path: Path,
    releases: dict[str, Release],
    release: str,
    **options: Any,
) -> int:
    reference = new_env(zk_client, zk_env, tmp_path, f"reference-{release}")
    try:
        pending_state(reference, releases)
        ctx = reference.ctx(releases[release], 3, **options)
        check_read_only(ctx)
        migrate_as_leader(ctx, reference.lead(ctx))
        return int(ctx.consensus.commits)  # type: ignore[attr-defined]
    finally:
        reference.close()


def test_rows_written_to_a_builtin_the_upgrade_added_are_never_dropped_silently(
    env: Env, releases: dict[str, Release]
) -> None:
    """0.12.0 adds mz_cluster_replica_history; 0.11.0 has no place for its rows. A rollback
    refuses while they would be lost, names them, writes nothing; with --discard-writes-to it
    goes through, and a later upgrade to 0.12.0 starts the collection empty. (Found by the
    commit-seeded soak: the rows were dropped without a word.)"""
    history = "mz_internal.mz_cluster_replica_history"
    bootstrap(env, releases["0.11.0"])
    new = upgrade(env, releases["0.12.0"], 2, finalize_after=None)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    append_as_release(new, history, [{"replica_id": "r1", "cluster_id": "c1", "created_at": at}])
    before = env.client.get(f"{env.root}/catalog")[1].version
    with pytest.raises(MigrationRefusedError) as refused:
        check_read_only(env.ctx(releases["0.11.0"], 3, rollback_from=releases["0.12.0"]))
    assert refused.value.details["rule"] == "rollback-loses-writes"
    assert refused.value.details["collections"] == [history]
    assert "0.11.0 has no mz_internal.mz_cluster_replica_history" in refused.value.message
    assert f"--discard-writes-to {history}" in refused.value.details["suggestion"]
    assert env.client.get(f"{env.root}/catalog")[1].version == before

    back = upgrade(env, releases["0.11.0"], 3, rollback_from=releases["0.12.0"],
                   discard_writes_to=frozenset({history}))  # fmt: skip
    catalog = read_catalog(back.consensus)
    assert catalog is not None and catalog[0].version == "0.11.0"
    assert history not in catalog[0].by_name()
    again = upgrade(env, releases["0.12.0"], 4, finalize_after=None)
    assert read_as_release(again, history) == []


@pytest.mark.parametrize("release", ["0.10.0", "0.11.0"], ids=["rollback", "finalization"])
def test_crash_or_lost_answer_at_every_write_then_the_same_work_completes(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, releases: dict[str, Release],
    release: str,
) -> None:  # fmt: skip
    """Kill the rollback's (or the finalization's) leader before each of its writes: a restart
    completes the same work. Lose each write's answer: the retry recognises what landed."""
    options: dict[str, Any] = (
        {**ROLLBACK, "rollback_from": releases["0.11.0"]}
        if release == "0.10.0"
        else {"finalize_after": 0.0}
    )
    check = rolled_back_completely if release == "0.10.0" else finalized_completely
    total = count_writes(zk_client, zk_env, tmp_path, releases, release, **options)
    assert total >= 2
    for crash_after in range(total):
        where = f"crash before write {crash_after + 1} of {total}"
        env = new_env(zk_client, zk_env, tmp_path, f"crash-{release}-{crash_after}")
        try:
            pending_state(env, releases)
            ctx = env.ctx(releases[release], 3, crash_after=crash_after, **options)
            check_read_only(ctx)
            with pytest.raises(SimulatedCrash):
                migrate_as_leader(ctx, env.lead(ctx))
            env.elections[-1].stop()  # the dead leader's session ends
            if read_pending(ctx.consensus) is not None:
                for shard_id in read_pending(ctx.consensus)[0].protected_shards():  # type: ignore[index]
                    assert not ctx.shard(shard_id).state().finalized, where
            restart = upgrade(env, releases[release], 4, **options)
            check(restart, where)
        finally:
            env.close()
    for lose_after in range(1, total + 1):
        where = f"answer of write {lose_after} of {total} lost"
        env = new_env(zk_client, zk_env, tmp_path, f"lose-{release}-{lose_after}")
        try:
            pending_state(env, releases)
            ctx = env.ctx(releases[release], 3, lose_after=lose_after, **options)
            check_read_only(ctx)
            leadership = env.lead(ctx)
            try:
                migrate_as_leader(ctx, leadership)
            except ConnectionLostError:  # what the sidecar does: run the idempotent steps again
                migrate_as_leader(ctx, leadership)
            check(ctx, where)
        finally:
            env.close()
