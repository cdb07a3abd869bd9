"""A rename (with a widening) through the upgrade, against a real ZooKeeper and real Parquet.

Release 1.0.0 has ``owner``, ``hits`` (int32) and ``spec.mem``; 1.1.0 declares ``owner_id``
renamed from ``owner``, ``hit_count`` renamed from ``hits`` and widened to int64, and
``spec.memory`` renamed from ``spec.mem``, by EVOLUTION. While the upgrade is pending the shard
keeps the old names (the expansion): 1.1.0 reads every old row under its names and appends
through them. A rollback reads everything as 1.0.0 named it. After finalization the shard's
fields are numbered, the rename registered, the batches written from then on record their
field ids in Parquet, and every row of every schema reads under the new names, before and after
a compaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.pipeline.arrow import ArrowEngine
from catalog.release import Builtin, Mechanism, Migration, Release
from catalog.schema import field_id, former_names, renamed
from catalog.shard import Shard
from orchestrator.migrate import MigrationContext
from orchestrator.status.coverage import read_coverage
from support.migrations import (
    Env,
    append_as_release,
    bootstrap,
    collection_shard,
    finalize,
    read_as_release,
    upgrade,
)
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

NAME = "mz_catalog.mz_machines"
V1 = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("owner", pa.string()),
    pa.field("hits", pa.int32()),
    pa.field("spec", pa.struct([pa.field("cpu", pa.int16()), pa.field("mem", pa.int32())])),
])  # fmt: skip
V2 = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    renamed(pa.field("owner_id", pa.string()), "owner"),
    renamed(pa.field("hit_count", pa.int64()), "hits"),
    pa.field("spec", pa.struct([
        pa.field("cpu", pa.int16()), renamed(pa.field("memory", pa.int32()), "mem"),
    ])),
])  # fmt: skip
OLD = Release("1.0.0", [Builtin("mz_catalog", "mz_machines", "table", "s1", V1)])
NEW = Release(
    "1.1.0",
    [Builtin("mz_catalog", "mz_machines", "table", "s1", V2)],
    [Migration("1.1.0", "mz_catalog", "mz_machines", "table", Mechanism.EVOLUTION)],
)


def old_row(i: int, owner: str | None, hits: int | None, mem: int | None) -> dict[str, Any]:
    return {"id": i, "owner": owner, "hits": hits, "spec": {"cpu": 1, "mem": mem}}


def as_new(row: dict[str, Any]) -> dict[str, Any]:
    spec = row["spec"]
    return {
        "id": row["id"], "owner_id": row["owner"], "hit_count": row["hits"],
        "spec": None if spec is None else {"cpu": spec["cpu"], "memory": spec["mem"]},
    }  # fmt: skip


def shard_of(ctx: MigrationContext) -> Shard:
    return collection_shard(ctx, NAME)


def append(ctx: MigrationContext, rows: list[dict[str, Any]]) -> None:
    append_as_release(ctx, NAME, rows)


def read(ctx: MigrationContext) -> list[dict[str, Any]]:
    return read_as_release(ctx, NAME)


def test_a_rename_reads_every_row_under_each_release_and_records_field_ids(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    blob = BlobStore.from_uri(str(tmp_path / "blob"))
    env = Env(zk_client, f"{zk_env.root}/rename", blob)
    try:
        old = bootstrap(env, OLD)
        rows = [old_row(1, "ann", 2**31 - 1, 512), old_row(2, None, None, None)]
        append(old, rows)

        new, _ = upgrade(env, NEW, 2, finalize_after=None)
        pending = shard_of(new).state().live_schema
        assert pending.names == V1.names  # the expansion keeps the old names
        assert read(new) == [as_new(r) for r in rows]
        during = {"id": 3, "owner_id": "bob", "hit_count": 9, "spec": {"cpu": 2, "memory": 64}}
        append(new, [during])  # written through the old names

        back, _ = upgrade(env, OLD, 3)
        assert read(back) == [*rows, old_row(3, "bob", 9, 64) | {"spec": {"cpu": 2, "mem": 64}}]

        again, leadership = upgrade(env, NEW, 4, finalize_after=None)
        finalize(again, leadership)
        state = shard_of(again).state()
        live = state.live_schema
        assert live.names == ["id", "owner_id", "hit_count", "spec"]
        assert former_names(live.field("hit_count")) == ("hits",)
        assert [field_id(f) for f in live] == [1, 2, 3, 4]
        assert all(field_id(f) is not None for s in state.schemas for f in s)  # renumbered
        after = {"id": 4, "owner_id": "cy", "hit_count": 2**40, "spec": {"cpu": 3, "memory": 1}}
        append(again, [after])
        expected = [*(as_new(r) for r in rows), during, after]
        assert read(again) == expected

        newest = shard_of(again).batches(shard_of(again).state())[-1]
        stored = pq.read_schema(blob.path(newest.key(state.shard_id)))
        assert stored.field("hit_count").metadata[b"PARQUET:field_id"] == b"3"

        coverage = read_coverage(again.consensus).get(NAME)
        assert coverage is not None
        first = coverage.coverage.schemas[0]  # shown until compacted
        assert first.renamed == ("spec.mem -> memory", "owner -> owner_id", "hits -> hit_count")
        assert first.narrower == ("hits",)
        assert ArrowEngine().compact(shard_of(again)).applied
        assert read(again) == expected
        state = shard_of(again).state()
        assert {b.schema_id for b in shard_of(again).batches(state)} == {state.schema_id}
    finally:
        env.close()
