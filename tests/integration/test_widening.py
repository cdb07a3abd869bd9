"""Lossless widening through the upgrade, against a real ZooKeeper and real Parquet blobs.

Release 1.0.0 stores a counter as int32 (and a nested one as int16); 1.1.0 widens both to
int64/int32 by EVOLUTION. While the upgrade is pending the shard keeps the narrow types (the
expansion): 1.1.0 reads every old value widened, appends values that fit, and is refused
(``requires-finalization``) a value that would not fit the type 1.0.0 reads. A rollback reads
everything as 1.0.0 wrote it; after finalization the wide type is registered, a large value is
taken, a compaction rewrites nothing it should not, and every value reads exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.errors import MigrationRefusedError, ReaderFencedError
from catalog.pipeline.arrow import ArrowEngine
from catalog.release import Builtin, Mechanism, Migration, Release
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

NAME = "mz_catalog.mz_counters"
NARROW = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("n", pa.int32()),
    pa.field("s", pa.struct([pa.field("c", pa.int16())])),
])  # fmt: skip
WIDE = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("n", pa.int64()),
    pa.field("s", pa.struct([pa.field("c", pa.int32())])),
])  # fmt: skip
OLD = Release("1.0.0", [Builtin("mz_catalog", "mz_counters", "table", "s1", NARROW)])
NEW = Release(
    "1.1.0",
    [Builtin("mz_catalog", "mz_counters", "table", "s1", WIDE)],
    [Migration("1.1.0", "mz_catalog", "mz_counters", "table", Mechanism.EVOLUTION)],
)


def row(i: int, n: int | None, c: int | None) -> dict[str, Any]:
    return {"id": i, "n": n, "s": {"c": c}}


def shard_of(ctx: MigrationContext) -> Shard:
    return collection_shard(ctx, NAME)


def append(ctx: MigrationContext, rows: list[dict[str, Any]]) -> None:
    append_as_release(ctx, NAME, rows)


def read(ctx: MigrationContext) -> list[dict[str, Any]]:
    return read_as_release(ctx, NAME)


def test_a_widening_waits_for_finalization_and_reads_every_value_exactly(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    env = Env(zk_client, f"{zk_env.root}/widen", BlobStore.from_uri(str(tmp_path / "blob")))
    try:
        old = bootstrap(env, OLD)
        rows = [row(1, 2**31 - 1, -(2**15)), row(2, -(2**31), 2**15 - 1), row(3, None, None)]
        append(old, rows)

        new, _ = upgrade(env, NEW, 2, finalize_after=None)
        assert shard_of(new).state().live_schema.equals(NARROW)  # the expansion: narrow still
        assert read(new) == rows  # every old value, widened
        append(new, [row(4, 7, 8)])  # fits the narrow types: taken
        with pytest.raises(MigrationRefusedError, match="does not fit") as refused:
            append(new, [row(5, 2**40, 1)])
        assert refused.value.details["rule"] == "requires-finalization"

        back, _ = upgrade(env, OLD, 3)
        assert read(back) == [*rows, row(4, 7, 8)]

        again, leadership = upgrade(env, NEW, 4, finalize_after=None)
        finalize(again, leadership)
        assert shard_of(again).state().live_schema.equals(WIDE)  # the contraction
        append(again, [row(5, 2**40, 2**20)])
        expected = [*rows, row(4, 7, 8), row(5, 2**40, 2**20)]
        assert read(again) == expected
        with pytest.raises(ReaderFencedError) as fenced:
            shard_of(again).snapshot(reader_schema=NARROW)
        assert fenced.value.rule == "reader-narrower-type"

        coverage = read_coverage(again.consensus).get(NAME)
        assert coverage is not None
        assert coverage.coverage.schemas[0].narrower == ("n", "s.c")  # shown until compacted
        assert ArrowEngine().compact(shard_of(again)).applied  # old batches cast, once
        state = shard_of(again).state()
        assert {b.schema_id for b in shard_of(again).batches(state)} == {state.schema_id}
        assert read(again) == expected
    finally:
        env.close()
