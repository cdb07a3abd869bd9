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


def test_contraction_waits_for_finalization_and_a_rollback_keeps_every_value(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """While the upgrade is pending only the expansion is registered: the new release reads
    through its schema and appends rows the old one can read; a row that needs the
    contraction (a null where 1.0.0 requires a value) is refused until final. A rollback then
    reads every value as 1.0.0 wrote it; finalizing a re-upgrade registers the contraction."""
    from catalog.errors import MigrationRefusedError
    from catalog.shard import Rows, append_rows
    from orchestrator.migrate import complete_finalization, request_finalization

    env = new_env(zk_client, zk_env, tmp_path, "window")
    try:
        old = bootstrap(env, OLD)
        append_as(old, V1_SCHEMA, [row(1), row(2)])
        new = env.ctx(NEW, 2, finalize_after=None)
        migrate_as_leader(new, env.lead(new))
        state = shard_of(new).state()
        assert find_schema_id(state, V2_SCHEMA) is None and state.contraction is not None
        assert read_as(new, V2_SCHEMA) == [upgraded(1), upgraded(2)]
        needs_contraction = {"id": 3, "flag": None, "owner": {"uid": 3}, "note": "n"}
        with pytest.raises(MigrationRefusedError, match="until the upgrade is final") as refused:
            append_rows(
                shard_of(new),
                Rows(pa.Table.from_pylist([needs_contraction], schema=V2_SCHEMA), V2_SCHEMA),
            )
        assert refused.value.details["rule"] == "requires-finalization"
        # The old release's own rows keep every value across the rollback.
        back = env.ctx(OLD, 3)
        check_read_only(back)
        migrate_as_leader(back, env.lead(back))
        assert read_as(back, V1_SCHEMA) == [row(1), row(2)]
        append_as(back, V1_SCHEMA, [row(4)])
        again = env.ctx(NEW, 4, finalize_after=None)
        check_read_only(again)
        leadership = env.lead(again)
        migrate_as_leader(again, leadership)
        request_finalization(again.consensus, requested_by="test", reason="operator")
        assert complete_finalization(again, leadership.fence) is not None
        state = shard_of(again).state()
        assert state.live_schema.equals(V2_SCHEMA) and state.contraction is None
        append_rows(
            shard_of(again),
            Rows(pa.Table.from_pylist([needs_contraction], schema=V2_SCHEMA), V2_SCHEMA),
        )
        assert len(read_as(again, V2_SCHEMA)) == 4
    finally:
        env.close()
