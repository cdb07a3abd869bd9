"""Expand, then contract, against a real ZooKeeper and real Parquet blobs.

An upgrade that adds a field, deletes one and relaxes another's nullability, its leader killed
before each of its writes in turn: while the catalog was not switched, the older release starts,
reads every row with every original value through its own schema and appends; after the switch,
a restarted leader of the new release redoes the contraction. Either way the newer release is
promoted in the end and reads everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.environment import read_catalog
from catalog.release import load_release
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Shard, find_schema_id
from orchestrator.migrate import (
    MigrationContext,
    check_read_only,
    migrate_as_leader,
)
from support.migrations import Env, SimulatedCrash, bootstrap
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

NAME = "mz_catalog.mz_flags"
# The releases the real-process test starts too (tests/fixtures/contract_releases): 1.1.0
# deletes legacy, relaxes flag and owner.uid, adds owner.team (nested) and note.
RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "contract_releases"
OLD = load_release(str(RELEASES / "v1_0_0.py"))
NEW = load_release(str(RELEASES / "v1_1_0.py"))
V1_SCHEMA = OLD.builtins[0].schema
V2_SCHEMA = NEW.builtins[0].schema


def row(i: int) -> dict[str, Any]:
    return {"id": i, "legacy": f"l{i}", "flag": i % 2 == 0, "owner": {"uid": i}}


def shard_of(ctx: MigrationContext) -> Shard:
    found = read_catalog(ctx.consensus)
    assert found is not None
    return ctx.shard(found[0].by_name()[NAME].shard_id)


def append_as(ctx: MigrationContext, schema: pa.Schema, rows: list[dict[str, Any]]) -> None:
    """Append as the sidecar of ``ctx``'s release does: with its own registered schema id."""
    shard = shard_of(ctx)
    state = shard.state()
    schema_id = find_schema_id(state, schema)
    assert schema_id is not None, "the release's own schema is registered"
    table = pa.Table.from_pylist(rows, schema=schema)
    table = table.append_column(TS, pa.array([state.upper] * len(rows), pa.uint64()))
    table = table.append_column(DIFF, pa.array([1] * len(rows), pa.int64()))
    assert shard.compare_and_append(table, state.upper, state.upper + 1, schema_id=schema_id).ok


def read_as(ctx: MigrationContext, schema: pa.Schema) -> list[dict[str, Any]]:
    """Read as the sidecar does: the snapshot, migrated to the release's schema."""
    table = shard_of(ctx).snapshot()
    source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
    if not source.equals(schema):
        table = migrate_batch(table, source, schema, projection=True)
    table = table.drop_columns([TS, DIFF])
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def upgraded(i: int) -> dict[str, Any]:
    old = row(i)
    return {"id": i, "flag": old["flag"], "owner": {"uid": i, "team": None}, "note": None}


def new_env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, name: str) -> Env:
    return Env(zk_client, f"{zk_env.root}/{name}", BlobStore.from_uri(str(tmp_path / name)))


def test_expansion_keeps_old_fields_until_the_switch(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """Before the switch only added fields are registered; after it, the release's schema."""
    env = new_env(zk_client, zk_env, tmp_path, "halves")
    try:
        old = bootstrap(env, OLD)
        append_as(old, V1_SCHEMA, [row(1), row(2)])
        ctx = env.ctx(NEW, 2)
        leadership = env.lead(ctx)
        migrate_as_leader(ctx, leadership)
        state = shard_of(ctx).state()
        expanded = state.live(state.schema_id - 1)
        assert expanded.names == ["id", "legacy", "flag", "owner", "note"]
        assert not expanded.field("flag").nullable and not expanded.field("legacy").nullable
        assert state.live_schema.equals(V2_SCHEMA) and state.contraction is None
        assert read_as(ctx, V2_SCHEMA) == [upgraded(1), upgraded(2)]
        catalog = read_catalog(ctx.consensus)
        assert catalog is not None and catalog[0].by_name()[NAME].schema is None
    finally:
        env.close()


def test_crash_at_every_leader_write_leaves_older_and_newer_releases_working(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    reference = new_env(zk_client, zk_env, tmp_path, "reference")
    try:
        bootstrap(reference, OLD)
        ctx = reference.ctx(NEW, 2)
        migrate_as_leader(ctx, reference.lead(ctx))
        total = ctx.consensus.commits  # type: ignore[attr-defined]
    finally:
        reference.close()
    assert total >= 2, "the expansion and the contraction are two writes at least"

    outcomes = []
    for crash_after in range(total):
        env = new_env(zk_client, zk_env, tmp_path, f"crash{crash_after}")
        try:
            old = bootstrap(env, OLD)
            append_as(old, V1_SCHEMA, [row(1), row(2)])
            ctx = env.ctx(NEW, 2, crash_after=crash_after)
            with pytest.raises(SimulatedCrash):
                migrate_as_leader(ctx, env.lead(ctx))
            env.elections[-1].stop()  # the dead leader's session ends
            found = read_catalog(ctx.consensus)
            assert found is not None
            generation = 3
            ids = [1, 2]
            if found[0].version == "1.0.0":
                older = env.ctx(OLD, generation)
                check_read_only(older)
                migrate_as_leader(older, env.lead(older))
                assert read_as(older, V1_SCHEMA) == [row(1), row(2)], f"crash {crash_after}"
                append_as(older, V1_SCHEMA, [row(3)])
                assert read_as(older, V1_SCHEMA) == [row(1), row(2), row(3)]
                ids.append(3)
                generation += 1
                outcomes.append("older")
            else:
                outcomes.append("restart")
            newer = env.ctx(NEW, generation)
            check_read_only(newer)
            migrate_as_leader(newer, env.lead(newer))
            assert shard_of(newer).state().live_schema.equals(V2_SCHEMA), f"crash {crash_after}"
            assert shard_of(newer).state().contraction is None
            assert read_as(newer, V2_SCHEMA) == [upgraded(i) for i in ids]
            append_as(newer, V2_SCHEMA, [{"id": 9, "flag": None, "owner": None, "note": "n"}])
        finally:
            env.close()
    assert "older" in outcomes and "restart" in outcomes, outcomes
