"""catalog.pipeline against real ZooKeeper, real Parquet blobs and (marked ``spark``) real Spark."""

from __future__ import annotations

import json
import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Create, Fence
from catalog.errors import ShardError
from catalog.pipeline import copy_transformed
from catalog.shard import DIFF, TS, Shard, consolidate
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V0 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("owner", pa.struct([pa.field("uid", pa.int32()), pa.field("role", pa.string())])),
    ]
)
# v1: owner.role deleted, owner.team and tags (list of struct) added.
V1 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("owner", pa.struct([pa.field("uid", pa.int32()), pa.field("team", pa.string())])),
        pa.field(
            "tags", pa.list_(pa.struct([pa.field("k", pa.string()), pa.field("v", pa.int64())]))
        ),
    ]
)
NEW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("label", pa.string()),
        pa.field("tag_count", pa.int32()),
    ]
)


def to_new(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The REWRITE transform of these tests: label = upper(name), tag_count = len(tags)."""
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id"),
            pc.utf8_upper(batch.column("name")),
            pc.list_value_length(batch.column("tags")).cast(pa.int32()),
        ],
        schema=NEW,
    )


@pytest.fixture
def consensus(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    store = Consensus(zk_client, zk_env.root)
    store.ensure()
    return store


@pytest.fixture
def blob(tmp_path: Any) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blob"))


@pytest.fixture
def fence(consensus: Consensus) -> Fence:
    """A leader's fence: the epoch znode at the version it took over at."""
    consensus.commit([Create("epoch", b"{}")])
    return Fence("epoch", 0)


def updates(schema: pa.Schema, rows: list[dict[str, Any]], ts: int, diff: int = 1) -> pa.Table:
    """Rows of ``schema`` as updates at time ``ts`` with diff ``diff``."""
    data = pa.Table.from_pylist(rows, schema=schema)
    return data.append_column(TS, pa.array([ts] * len(rows), pa.uint64())).append_column(
        DIFF, pa.array([diff] * len(rows), pa.int64())
    )


def append(shard: Shard, table: pa.Table, new_upper: int | None = None) -> None:
    upper = shard.state().upper
    result = shard.compare_and_append(table, upper, new_upper or upper + 1)
    assert result.ok


def canonical(table: pa.Table) -> list[str]:
    """Rows as sorted JSON strings: engines and consolidation return rows in any order."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def source_shard(consensus: Consensus, blob: BlobStore) -> Shard:
    """A source with v0 rows (one later retracted), an evolution to v1 and v1 rows."""
    shard = Shard(consensus, blob, "source")
    shard.create(V0)
    append(
        shard,
        updates(
            V0,
            [
                {"id": 1, "name": "a", "owner": {"uid": 7, "role": "admin"}},
                {"id": 2, "name": "b", "owner": None},
            ],
            ts=0,
        ),
    )
    assert shard.compare_and_evolve_schema(0, V1).ok
    append(
        shard,
        updates(V1, [{"id": 3, "name": None, "owner": {"uid": 1, "team": "x"}, "tags": []}], ts=1),
    )
    append(shard, updates(V1, [{"id": 2, "name": "b", "owner": None, "tags": None}], ts=2, diff=-1))
    return shard


def target_shard(consensus: Consensus, blob: BlobStore, name: str = "target") -> Shard:
    shard = Shard(consensus, blob, name)
    shard.create(NEW)
    return shard


def expected_copy(source: Shard) -> list[str]:
    """transform(snapshot of the source), consolidated: a transform need not be injective."""
    snap = source.snapshot()
    data = pa.Table.from_batches([to_new(b) for b in snap.to_batches()], schema=NEW)
    as_table = data.append_column(TS, snap.column(TS)).append_column(DIFF, snap.column(DIFF))
    return canonical(consolidate(as_table))


# --- REWRITE copy (arrow) -------------------------------------------------------------------


def test_copy_then_delta_arrives_transformed_exactly_once(
    consensus: Consensus, blob: BlobStore, fence: Fence
) -> None:
    """Rows appended between the read-only copy and the leader's copy arrive once, transformed."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    assert copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow") == 4
    append(
        source,
        updates(V1, [{"id": 4, "name": "d", "owner": None, "tags": [{"k": "a", "v": 1}]}], ts=5),
        new_upper=9,
    )
    append(source, updates(V1, [{"id": 1, "name": "a", "owner": None, "tags": None}], ts=9))
    copied = copy_transformed(source, target, [to_new], NEW, fence=fence, engine="arrow")
    assert copied == 2
    assert target.state().upper == source.state().upper == 10
    assert canonical(target.snapshot()) == expected_copy(source)
    assert copy_transformed(source, target, [to_new], NEW, fence=fence, engine="arrow") == 0


def test_copy_of_an_empty_delta_still_moves_the_upper(
    consensus: Consensus, blob: BlobStore
) -> None:
    """An upper advanced without rows is copied as an empty append, so the frontiers agree."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow")
    append(source, updates(V1, [], ts=3), new_upper=20)
    assert copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow") == 0
    assert target.state().upper == 20


def test_copy_after_compaction_past_the_target_upper_is_exact(
    consensus: Consensus, blob: BlobStore
) -> None:
    """When compaction advanced copied times past the target's upper, the copy diffs instead."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow")
    append(
        source,
        updates(V1, [{"id": 5, "name": "e", "owner": None, "tags": None}], ts=3),
        new_upper=6,
    )
    source.advance_since(5)
    assert source.compact().applied
    copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow")
    assert canonical(target.snapshot()) == expected_copy(source)


def test_concurrent_copies_never_duplicate(consensus: Consensus, blob: BlobStore) -> None:
    """Two copiers racing on one target: one append wins, the other re-reads and copies nothing."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    counts: list[int] = []

    def run() -> None:
        counts.append(copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow"))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counts) == [0, 0, 4]
    assert canonical(target.snapshot()) == expected_copy(source)


def test_transform_output_not_matching_the_new_schema_names_the_transform(
    consensus: Consensus, blob: BlobStore
) -> None:
    """A transform returning the wrong columns fails with ShardError naming it; nothing lands."""

    def forgets_a_column(batch: pa.RecordBatch) -> pa.RecordBatch:
        return to_new(batch).select(["id", "label"])

    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    with pytest.raises(ShardError) as info:
        copy_transformed(source, target, [forgets_a_column], NEW, fence=None, engine="arrow")
    assert info.value.details["reason"] == "transform-output"
    assert "forgets_a_column" in info.value.details["transform"]
    assert target.state().upper == 0


def test_transforms_run_in_order_and_must_keep_the_row_count(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Transforms chain in order; one that drops rows is refused (diffs could not follow)."""

    def add_suffix(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.set_column(1, "label", pc.binary_join_element_wise(batch.column(1), "!", ""))

    def drops_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.slice(0, 1)

    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    copy_transformed(source, target, [to_new, add_suffix], NEW, fence=None, engine="arrow")
    labels = {r["id"]: r["label"] for r in target.snapshot().to_pylist()}
    assert labels == {1: "A!", 3: None}
    other = target_shard(consensus, blob, "other")
    with pytest.raises(ShardError) as info:
        copy_transformed(source, other, [to_new, drops_rows], NEW, fence=None, engine="arrow")
    assert info.value.details["reason"] == "transform-output"
    assert "drops_rows" in info.value.details["transform"]


def test_copy_into_a_target_ahead_of_its_source_is_refused(
    consensus: Consensus, blob: BlobStore
) -> None:
    """A target whose upper is past the source's is not a copy of it: ShardError, no write."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    append(target, updates(NEW, [], ts=0), new_upper=99)
    with pytest.raises(ShardError) as info:
        copy_transformed(source, target, [to_new], NEW, fence=None, engine="arrow")
    assert info.value.details["reason"] == "target-ahead"
