"""catalog.pipeline against real ZooKeeper, real Parquet blobs and (marked ``spark``) real Spark."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Create, Fence
from catalog.environment import SHARDS_KEY, CatalogState, CollectionRef, catalog_write_op
from catalog.errors import ReaderFencedError, ShardError
from catalog.pipeline import (
    ArrowEngine,
    Engine,
    SparkEngine,
    SparkSessionProvider,
    copy_transformed,
    restore_table,
)
from catalog.pipeline.updates import read_updates
from catalog.schema import migrate_batch, renamed
from catalog.shard import DIFF, TS, Shard, consolidate, update_schema
from orchestrator.cli import main
from orchestrator.wire.ndjson import rows_to_table
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


@pytest.mark.parametrize("since", [3, 5])
@pytest.mark.parametrize("engine", ["arrow", pytest.param("spark", marks=pytest.mark.spark)])
def test_copy_after_compaction_past_the_target_upper_is_exact(
    consensus: Consensus, blob: BlobStore, since: int, engine: str, request: pytest.FixtureRequest
) -> None:
    """When compaction advanced copied times to the target's upper (3) or past it, the copy
    diffs instead of selecting by time (on Spark: transformed source minus target, written by
    the executors)."""
    chosen = engine_named(engine, request.getfixturevalue("spark") if engine == "spark" else None)
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    chosen.copy_transformed(source, target, [to_new], NEW, fence=None)
    append(
        source,
        updates(V1, [{"id": 5, "name": "e", "owner": None, "tags": None}], ts=3),
        new_upper=6,
    )
    source.advance_since(since)
    assert source.compact().applied
    chosen.copy_transformed(source, target, [to_new], NEW, fence=None)
    assert canonical(target.snapshot()) == expected_copy(source)
    assert target.state().upper == source.state().upper


@attrs.define
class CompactsFirst(BlobStore):
    """Fault injection: the first batch read runs ``hook`` (a compaction) just before it."""

    hook: Callable[[], object] | None = None

    def get_batches(self, keys: Sequence[str], **kwargs: Any) -> pa.Table:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().get_batches(keys, **kwargs)


def test_copy_replans_when_compaction_replaces_batches_under_it(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Batches compacted away between the state read and the blob read: the copy re-plans."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    racing = CompactsFirst(blob.filesystem, blob.root, blob.uri, hook=source.compact)
    reader = Shard(consensus, racing, source.shard_id)
    assert copy_transformed(reader, target, [to_new], NEW, fence=None, engine="arrow") > 0
    assert source.state().batch_count == 1
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


# --- Spark ------------------------------------------------------------------------------------


@pytest.fixture
def spark_engine(spark: SparkSessionProvider) -> SparkEngine:
    return SparkEngine(spark)


def engine_named(name: str, spark: SparkSessionProvider | None) -> Engine:
    if name == "arrow":
        return ArrowEngine()
    assert spark is not None
    return SparkEngine(spark)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_snapshot_migrates_nested_fields_lazily(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """v0 batches read as v1 on Spark: deleted struct child gone, added ones typed nulls."""
    source = source_shard(consensus, blob)
    snap = spark_engine.snapshot(source)
    assert snap.schema == update_schema(V1)
    assert canonical(snap) == canonical(source.snapshot())
    rows = {r["id"]: r for r in snap.to_pylist()}
    assert rows[1]["owner"] == {"uid": 7, "team": None}
    assert rows[1]["tags"] is None
    assert set(rows) == {1, 3}  # id 2 was retracted


@pytest.mark.spark
@pytest.mark.slow
def test_spark_snapshot_reads_a_projection_as_of_an_earlier_time(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """A reader projection (reordered, nested subset) as of an older time matches arrow."""
    source = source_shard(consensus, blob)
    reader = pa.schema(
        [
            pa.field("owner", pa.struct([pa.field("team", pa.string())])),
            pa.field("id", pa.int64()),
        ]
    )
    for as_of in (0, 1, 2):
        expected = source.snapshot(as_of, reader)
        got = spark_engine.snapshot(source, as_of, reader)
        assert got.schema == expected.schema
        assert canonical(got) == canonical(expected)


@pytest.mark.spark
def test_spark_reader_fencing_matches_arrow(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """A reader needing a deleted field is fenced on Spark exactly as on arrow, before any job."""
    source = source_shard(consensus, blob)
    reader = pa.schema([pa.field("owner", pa.struct([pa.field("role", pa.string())]))])
    with pytest.raises(ReaderFencedError) as on_arrow:
        source.snapshot(reader_schema=reader)
    with pytest.raises(ReaderFencedError) as on_spark:
        spark_engine.snapshot_frame(source, reader_schema=reader)
    assert on_spark.value.rule == on_arrow.value.rule == "reader-needs-deleted-field"
    assert on_spark.value.path == on_arrow.value.path == "owner.role"
    with pytest.raises(ShardError) as early:
        spark_engine.snapshot(source, as_of=99)
    assert early.value.details["reason"] == "not-complete"


@pytest.mark.spark
@pytest.mark.slow
def test_spark_compaction_preserves_snapshots(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """Spark compaction: one schema, times below since advanced, every readable snapshot kept."""
    source = source_shard(consensus, blob)
    append(source, updates(V1, [{"id": 9, "name": "z", "owner": None, "tags": None}], ts=3))
    source.advance_since(2)
    before = {t: canonical(source.snapshot(t)) for t in (2, 3)}
    result = spark_engine.compact(source)
    assert result.applied and result.inputs == 4
    state = source.state()
    assert result.outputs, "the compaction wrote its output"
    assert [b.schema_id for b in source.batches(state)] == [1] * len(result.outputs)
    assert all(b.lower >= 2 for b in result.outputs)
    assert {t: canonical(source.snapshot(t)) for t in (2, 3)} == before
    assert canonical(spark_engine.snapshot(source, 3)) == before[3]
    source.gc_orphans(grace_seconds=0)  # the inputs are left to the garbage collection
    assert sorted(blob.list(f"shards/{source.shard_id}")) == sorted(
        b.key(source.shard_id) for b in result.outputs
    )


@pytest.mark.spark
def test_spark_compaction_of_sortable_columns_marks_output_ordered(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """Flat schemas come out sorted by every column and marked ordered, as Shard.compact does."""
    flat = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])
    shard = Shard(consensus, blob, "flat")
    shard.create(flat)
    append(shard, updates(flat, [{"k": 3, "v": "c"}, {"k": 1, "v": "a"}], ts=0))
    append(shard, updates(flat, [{"k": 2, "v": None}], ts=1))
    result = spark_engine.compact(shard)
    assert result.outputs, "the compaction wrote its output"
    for ref in result.outputs:
        assert ref.ordered and ref.spark_types  # Spark's own writer
        stored = restore_table(blob.get_batch(ref.key(shard.shard_id)), update_schema(flat))
        assert stored.equals(stored.sort_by([(n, "ascending") for n in stored.column_names]))


def test_batches_spark_wrote_read_back_exactly_on_every_path(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """A Spark compaction of a flat schema of every leaf type is written by Spark's writer
    (``_ts`` an int64, unsigned integers as decimals or wider, timestamps in micros); arrow and
    Spark snapshots, an arrow compaction mixing it with later appends, and a copy's read of
    updates all give the stored types and values exactly."""
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False)]
        + [pa.field(f"c{i}", dtype) for i, dtype in enumerate(LEAF_TYPES)]
        + [pa.field("ms", pa.timestamp("ms", tz="UTC"))]
    )
    samples: dict[str, Any] = {
        "c7": 255, "c8": 65535, "c9": 4294967295, "c10": 18446744073709551615,
        "c11": 1.5, "c12": decimal.Decimal("12345678.91"), "c13": datetime.date(1970, 1, 2),
        "c14": datetime.datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=datetime.UTC),
        "c15": b"\x00\xff", "c16": "large", "c5": -128, "c6": -32768, "c4": -(2**31),
        "c0": -(2**63), "c1": "text", "c2": -0.5, "c3": True,
        "ms": datetime.datetime(2024, 1, 1, 0, 0, 0, 1000, tzinfo=datetime.UTC),
    }  # fmt: skip
    shard = Shard(consensus, blob, "leaves")
    shard.create(schema)
    append(shard, updates(schema, [{"id": 1, **samples}, {"id": 2}], ts=0))
    retracted = updates(schema, [{"id": 2}], ts=1, diff=-1)
    append(shard, pa.concat_tables([updates(schema, [{"id": 3, **samples}], ts=1), retracted]))
    expected = shard.snapshot()
    result = spark_engine.compact(shard)
    assert result.applied and result.outputs and all(ref.spark_types for ref in result.outputs)
    for got_snapshot in (shard.snapshot(), spark_engine.snapshot(shard)):
        assert got_snapshot.schema == expected.schema
        assert canonical(got_snapshot) == canonical(expected)
    append(shard, updates(schema, [{"id": 4, **samples}], ts=2))
    state = shard.state()
    got = read_updates(shard, state, 0, state.upper)
    pairs = zip(got.column("id").to_pylist(), got.column(DIFF).to_pylist(), strict=True)
    assert sorted(pairs) == [(1, 1), (2, -1), (2, 1), (3, 1), (4, 1)]  # times apart: kept
    assert got.schema.field(TS).type == pa.uint64()
    later = shard.snapshot()
    assert ArrowEngine().compact(shard).applied
    after = shard.snapshot()
    assert after.schema == later.schema and canonical(after) == canonical(later)
    assert (
        later.filter(pc.equal(later.column("id"), 4))
        .drop_columns(["id", TS, DIFF])
        .equals(expected.filter(pc.equal(expected.column("id"), 1)).drop_columns(["id", TS, DIFF]))
    )


def test_arrow_compaction_of_a_flat_schema_sorts_and_cancels(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Flat schemas compact by sorting: retractions cancel, output ordered and consolidated."""
    flat = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])
    shard = Shard(consensus, blob, "flat")
    shard.create(flat)
    append(shard, updates(flat, [{"k": 2, "v": "b"}, {"k": 1, "v": None}], ts=0))
    append(shard, updates(flat, [{"k": 2, "v": "b"}], ts=1, diff=-1))
    shard.advance_since(1)
    before = canonical(shard.snapshot())
    result = ArrowEngine().compact(shard)
    assert result.applied and result.inputs == 2
    assert result.output is not None and result.output.ordered and result.output.consolidated
    assert result.output.rows == 1 and result.output.lower == 1
    assert canonical(shard.snapshot()) == before
    assert len(shard.gc_orphans(grace_seconds=0)) == 2  # the inputs, left to the collection
    assert blob.list(f"shards/{shard.shard_id}") == [result.output.key(shard.shard_id)]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_rewrite_read_only_copy_then_leader_delta_on_both_engines(
    consensus: Consensus, blob: BlobStore, fence: Fence, spark: SparkSessionProvider, engine: str
) -> None:
    """The REWRITE scenario on each engine: read-only copy, old leader appends, leader delta."""
    source = source_shard(consensus, blob)
    target = target_shard(consensus, blob)
    chosen = engine_named(engine, spark)
    assert chosen.copy_transformed(source, target, [to_new], NEW, fence=None) == 4
    append(
        source,
        updates(V1, [{"id": 4, "name": "d", "owner": None, "tags": [{"k": "a", "v": 1}]}], ts=3),
    )
    append(
        source, updates(V1, [{"id": 1, "name": "a", "owner": None, "tags": None}], ts=4, diff=-1)
    )
    assert chosen.copy_transformed(source, target, [to_new], NEW, fence=fence) == 2
    assert target.state().upper == source.state().upper
    assert canonical(target.snapshot()) == expected_copy(source)
    assert chosen.copy_transformed(source, target, [to_new], NEW, fence=fence) == 0


@pytest.mark.spark
@pytest.mark.slow
def test_map_in_arrow_transform_sees_exact_arrow_types_and_reports_failures(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine
) -> None:
    """On Spark the transform gets the same Arrow types as on arrow (uint32, large_string, ...)
    and a failing transform surfaces as ShardError naming it."""
    odd = pa.schema(
        [
            pa.field("n", pa.uint32()),
            pa.field("s", pa.large_string()),
            pa.field("xs", pa.large_list(pa.field("item", pa.uint8()))),
        ]
    )
    out = pa.schema([pa.field("n", pa.uint64()), pa.field("s", pa.large_string())])

    def narrow(batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema != odd:
            raise TypeError(f"unexpected input schema {batch.schema}")
        return pa.RecordBatch.from_arrays(
            [pc.multiply(batch.column("n").cast(pa.uint64()), 2), batch.column("s")], schema=out
        )

    def explode(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise ValueError("boom")

    source = Shard(consensus, blob, "odd")
    source.create(odd)
    append(source, updates(odd, [{"n": 4_000_000_000, "s": "x", "xs": [255]}, {"n": 1}], ts=0))
    target = Shard(consensus, blob, "odd-new")
    target.create(out)
    assert spark_engine.copy_transformed(source, target, [narrow], out, fence=None) == 2
    assert sorted(r["n"] for r in target.snapshot().to_pylist()) == [2, 8_000_000_000]
    other = Shard(consensus, blob, "odd-other")
    other.create(out)
    with pytest.raises(ShardError) as info:
        spark_engine.copy_transformed(source, other, [explode], out, fence=None)
    assert info.value.details["reason"] == "transform-failed"
    assert "explode" in info.value.details["transform"]
    assert other.state().upper == 0


# --- engine equality (hypothesis) -----------------------------------------------------------

SMALL_INTS = st.integers(-2, 2)
WORDS = st.sampled_from(["a", "b", ""])
LEAF_TYPES = [
    pa.int64(),
    pa.string(),
    pa.float64(),
    pa.bool_(),
    pa.int32(),
    pa.int8(),
    pa.int16(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float32(),
    pa.decimal128(10, 2),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.binary(),
    pa.large_string(),
]
# Floats that only consolidate when compared as values (catalog.consolidate.floats).
FLOATS = [0.5, -1.25, 0.0, -0.0, math.nan, -math.nan]

INITIAL = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field(
            "s", pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
        ),
        pa.field(
            "ls", pa.list_(pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.string())]))
        ),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field("mv", pa.map_(pa.string(), pa.struct([pa.field("p", pa.float64())]))),
    ]
)
# Flat schemas take the arrow engine's sort-based compaction and Spark's sorted outputs.
FLAT = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("flag", pa.bool_()),
    ]
)


# Types an evolution can widen (WIDER), at the top level and in a struct.
NARROW = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.int8()),
        pa.field("u", pa.uint16()),
        pa.field("f", pa.float32()),
        pa.field("t", pa.string()),
        pa.field("d", pa.decimal128(10, 2)),
        pa.field("s", pa.struct([pa.field("c", pa.int16()), pa.field("b", pa.binary())])),
        pa.field("l", pa.list_(pa.int32())),
    ]
)


def values_of(dtype: pa.DataType, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Values of ``dtype`` from a small domain, so that rows collide and consolidate."""
    inner: st.SearchStrategy[Any]
    if pa.types.is_struct(dtype):
        inner = st.fixed_dictionaries({f.name: values_of(f.type, f.nullable) for f in dtype.fields})
    elif pa.types.is_list(dtype):
        inner = st.lists(values_of(dtype.value_type), max_size=2)
    elif pa.types.is_map(dtype):
        inner = st.lists(
            st.tuples(st.sampled_from(["k", "j"]), values_of(dtype.item_type)),
            max_size=2,
            unique_by=lambda kv: kv[0],
        )
    elif pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        inner = WORDS
    elif pa.types.is_binary(dtype):
        inner = st.sampled_from([b"", b"\x00", b"ab"])
    elif pa.types.is_floating(dtype):
        inner = st.sampled_from(FLOATS)
    elif pa.types.is_boolean(dtype):
        inner = st.booleans()
    elif pa.types.is_decimal(dtype):
        inner = st.sampled_from([decimal.Decimal("0.50"), decimal.Decimal("-1.25")])
    elif pa.types.is_date(dtype):
        inner = st.sampled_from([datetime.date(1970, 1, 1), datetime.date(2026, 11, 23)])
    elif pa.types.is_timestamp(dtype):
        utc = datetime.UTC
        inner = st.sampled_from(
            [datetime.datetime(2026, 1, 1, tzinfo=utc), datetime.datetime(1999, 12, 31, tzinfo=utc)]
        )
    elif pa.types.is_unsigned_integer(dtype):
        inner = st.sampled_from([0, 1, 2**dtype.bit_width - 1])
    else:
        inner = SMALL_INTS
    return st.one_of(st.none(), inner) if nullable else inner


# Lossless widenings (catalog.schema.lossless) an evolution may take, by the type it widens.
WIDER = {
    pa.int8(): [pa.int16(), pa.int64(), pa.float64()],
    pa.int16(): [pa.int32(), pa.float64()],
    pa.int32(): [pa.int64(), pa.float64()],
    pa.uint8(): [pa.uint16(), pa.int16()],
    pa.uint16(): [pa.int32(), pa.uint64()],
    pa.uint32(): [pa.int64(), pa.float64()],
    pa.float32(): [pa.float64()],
    pa.string(): [pa.large_string()],
    pa.binary(): [pa.large_binary()],
    pa.decimal128(10, 2): [pa.decimal128(12, 2)],
}


def _widen(draw: st.DrawFn, fields: list[pa.Field]) -> bool:
    """Widen one widenable field of ``fields`` (top level, or a struct's child) in place; a
    list becomes a large list."""
    lists = [i for i, f in enumerate(fields) if pa.types.is_list(f.type)]
    widen_a_list: bool = bool(lists) and draw(st.booleans())
    if widen_a_list:
        at = draw(st.sampled_from(lists))
        fields[at] = fields[at].with_type(pa.large_list(fields[at].type.value_field))
        return True
    spots = [(i, None) for i, f in enumerate(fields) if f.type in WIDER] + [
        (i, j)
        for i, f in enumerate(fields)
        if pa.types.is_struct(f.type)
        for j, c in enumerate(f.type.fields)
        if c.type in WIDER
    ]
    if not spots:
        return False
    i, j = draw(st.sampled_from(spots))
    if j is None:
        fields[i] = fields[i].with_type(draw(st.sampled_from(WIDER[fields[i].type])))
    else:
        children = list(fields[i].type.fields)
        children[j] = children[j].with_type(draw(st.sampled_from(WIDER[children[j].type])))
        fields[i] = fields[i].with_type(pa.struct(children))
    return True


@attrs.define
class History:
    """A random shard history: the schemas it went through and names never to reuse."""

    schema: pa.Schema
    next_name: int = 0

    def fresh(self) -> str:
        self.next_name += 1
        return f"f{self.next_name}"


@st.composite
def evolutions(draw: st.DrawFn, history: History) -> pa.Schema:
    """A backward-compatible next schema: add, delete or rename a field, top level or in a
    struct, or widen a type losslessly."""
    schema = history.schema
    structs = [f.name for f in schema if pa.types.is_struct(f.type) and f.type.num_fields > 1]
    listed = [
        f.name
        for f in schema
        if pa.types.is_list(f.type)
        and pa.types.is_struct(f.type.value_type)
        and f.type.value_type.num_fields > 1
    ]
    mapped = [
        f.name for f in schema if pa.types.is_map(f.type) and pa.types.is_struct(f.type.item_type)
    ]
    choice = draw(
        st.sampled_from(
            [
                "add",
                "add-nested",
                "add-in-list",
                "add-in-map",
                "delete",
                "delete-nested",
                "widen",
                "widen",
                "widen",
                "rename",
                "rename",
                "rename-nested",
            ]
        )
    )
    fields = list(schema)
    if choice == "widen" and _widen(draw, fields):
        event("a type widened")
    elif choice == "rename":
        at = draw(st.integers(0, len(fields) - 1))
        fields[at] = renamed(fields[at].with_name(history.fresh()), fields[at].name)
        event("a field renamed")
    elif choice == "rename-nested" and structs:
        index = schema.get_field_index(draw(st.sampled_from(structs)))
        children = list(schema.field(index).type.fields)
        at = draw(st.integers(0, len(children) - 1))
        children[at] = renamed(children[at].with_name(history.fresh()), children[at].name)
        fields[index] = fields[index].with_type(pa.struct(children))
        event("a struct child renamed")
    elif choice == "add" or (choice == "delete" and len(fields) < 2):
        leaf = draw(st.sampled_from([*LEAF_TYPES, pa.struct([pa.field("z", pa.int64())])]))
        fields.append(pa.field(history.fresh(), leaf))
    elif choice == "delete":
        fields.pop(draw(st.integers(0, len(fields) - 1)))
    elif choice in ("add-nested", "delete-nested") and structs:
        name = draw(st.sampled_from(structs))
        index = schema.get_field_index(name)
        children = list(schema.field(index).type.fields)
        if choice == "add-nested":
            children.append(pa.field(history.fresh(), draw(st.sampled_from(LEAF_TYPES))))
        else:
            children.pop(draw(st.integers(0, len(children) - 1)))
        fields[index] = pa.field(name, pa.struct(children))
    elif choice == "add-in-list" and listed:
        name = draw(st.sampled_from(listed))
        index = schema.get_field_index(name)
        element = list(schema.field(index).type.value_type.fields)
        element.append(pa.field(history.fresh(), draw(st.sampled_from(LEAF_TYPES))))
        fields[index] = pa.field(name, pa.list_(pa.struct(element)))
    elif choice == "add-in-map" and mapped:
        name = draw(st.sampled_from(mapped))
        index = schema.get_field_index(name)
        value = list(schema.field(index).type.item_type.fields)
        value.append(pa.field(history.fresh(), draw(st.sampled_from(LEAF_TYPES))))
        fields[index] = pa.field(name, pa.map_(pa.string(), pa.struct(value)))
    else:
        fields.append(pa.field(history.fresh(), pa.string()))
    return pa.schema(fields)


@st.composite
def update_rows(draw: st.DrawFn, schema: pa.Schema) -> list[dict[str, Any]]:
    row = st.fixed_dictionaries({f.name: values_of(f.type) for f in schema})
    return draw(st.lists(row, min_size=1, max_size=3))


@pytest.mark.spark
@pytest.mark.slow
@settings(
    max_examples=16,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_arrow_and_spark_engines_agree_on_random_histories(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine, data: st.DataObject
) -> None:
    """Appends, nested evolutions and compactions (by either engine): same snapshots on both."""
    history = History(schema=data.draw(st.sampled_from([INITIAL, FLAT, NARROW])))
    shard = Shard(consensus, blob, f"h-{uuid.uuid4().hex[:8]}")
    shard.create(history.schema)
    steps = data.draw(
        st.lists(
            st.sampled_from(
                ["append", "append", "evolve", "evolve", "compact-arrow", "compact-spark"]
            ),
            min_size=2,
            max_size=6,
        )
    )
    recent: list[dict[str, Any]] = []  # rows of the current schema, to retract or repeat
    for step in ["append", *steps]:
        state = shard.state()
        if step == "append":
            pool = data.draw(update_rows(history.schema)) + recent
            rows = data.draw(st.lists(st.sampled_from(pool), max_size=6)) if pool else []
            recent = rows
            span = data.draw(st.integers(1, 3))
            times = [state.upper + data.draw(st.integers(0, span - 1)) for _ in rows]
            diffs = [data.draw(st.sampled_from([1, -1, 2])) for _ in rows]
            table = pa.Table.from_pylist(rows, schema=history.schema)
            table = table.append_column(TS, pa.array(times, pa.uint64()))
            table = table.append_column(DIFF, pa.array(diffs, pa.int64()))
            assert shard.compare_and_append(table, state.upper, state.upper + span).ok
        elif step == "evolve":
            history.schema = data.draw(evolutions(history))
            recent = []
            assert shard.compare_and_evolve_schema(state.schema_id, history.schema).ok
        else:
            if data.draw(st.booleans()) and state.upper > 1:
                shard.advance_since(data.draw(st.integers(state.since, state.upper - 1)))
            engine = ArrowEngine() if step == "compact-arrow" else spark_engine
            assert engine.compact(shard).applied
    state = shard.state()
    as_of = data.draw(st.integers(state.since, state.upper - 1))
    expected = ArrowEngine().snapshot(shard, as_of)
    got = spark_engine.snapshot(shard, as_of)
    assert got.schema == expected.schema
    assert canonical(got) == canonical(expected)
    # Streamed (read --json): chunks of exact types, together the same rows.
    chunks = list(spark_engine.snapshot_chunks(shard, as_of, chunk_rows=2))
    assert sum(c.num_rows for c in chunks) == expected.num_rows, "every row comes in a chunk"
    assert all(c.schema == expected.schema for c in chunks)
    streamed = pa.concat_tables(chunks) if chunks else expected.schema.empty_table()
    assert canonical(streamed) == canonical(expected)


WIDENED = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.int64()),
        pa.field("u", pa.int32()),
        pa.field("f", pa.float64()),
        pa.field("t", pa.large_string()),
        pa.field("d", pa.decimal128(12, 2)),
        pa.field("s", pa.struct([pa.field("c", pa.int32()), pa.field("b", pa.large_binary())])),
        pa.field("l", pa.large_list(pa.int64())),
    ]
)


def _stamped(table: pa.Table, ts: int, diff: int) -> pa.Table:
    times = pa.array([ts] * len(table), pa.uint64())
    return table.append_column(TS, times).append_column(
        DIFF, pa.array([diff] * len(table), pa.int64())
    )


def _extreme_rows(schema: pa.Schema, first: int) -> pa.Table:
    narrow = schema.field("n").type == pa.int8()
    rows = [
        {"id": first, "n": -128 if narrow else -(2**40), "u": 65535, "f": -0.0,
         "t": "é", "d": decimal.Decimal("-99999999.99"), "s": {"c": -32768, "b": b"\x00"},
         "l": [2**31 - 1, None]},
        {"id": first + 1, "n": 127, "u": 0, "f": 3.4028234663852886e38, "t": "",
         "d": decimal.Decimal("0.01"), "s": {"c": 32767, "b": b""}, "l": []},
        {"id": first + 2, "n": None, "u": None, "f": math.nan, "t": None, "d": None, "s": None,
         "l": None},
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("compactor", ["arrow", "spark"])
def test_widened_history_reads_the_same_bits_on_both_engines(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine, compactor: str
) -> None:
    """Every widening of the rule table at once, top level and in a struct: batches stored
    narrow and wide read the same on arrow and Spark, before and after a compaction by
    either engine, and a retraction written wide cancels a row stored narrow."""
    shard = Shard(consensus, blob, f"w-{uuid.uuid4().hex[:8]}")
    shard.create(NARROW)
    narrow = _extreme_rows(NARROW, 1)
    assert shard.compare_and_append(_stamped(narrow, 0, 1), 0, 1).ok
    assert shard.compare_and_evolve_schema(0, WIDENED).ok
    wide = _extreme_rows(WIDENED, 10)
    retract = narrow.slice(1, 1).cast(WIDENED)  # the second narrow row, written wide
    both = pa.concat_tables([_stamped(wide, 1, 1), _stamped(retract, 1, -1)])
    assert shard.compare_and_append(both, 1, 2).ok
    for step in ("before", "after"):
        expected = ArrowEngine().snapshot(shard, 1)
        got = spark_engine.snapshot(shard, 1)
        assert expected.schema.field("n").type == pa.int64()
        assert got.schema == expected.schema, step
        assert canonical(got) == canonical(expected), step
        assert len(expected) == 5, step  # 3 narrow + 3 wide - 1 retracted
        if step == "before":
            engine = ArrowEngine() if compactor == "arrow" else spark_engine
            assert engine.compact(shard).applied


RENAMED_FROM = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("owner", pa.string()),
        pa.field("s", pa.struct([pa.field("c", pa.int16()), pa.field("b", pa.binary())])),
        pa.field("l", pa.list_(pa.struct([pa.field("k", pa.string())]))),
    ]
)
# owner -> owner_id, s.c -> s.count (widened), l.items.k -> l.items.key
RENAMED = pa.schema(
    [
        pa.field("id", pa.int64()),
        renamed(pa.field("owner_id", pa.string()), "owner"),
        pa.field("s", pa.struct(
            [renamed(pa.field("count", pa.int32()), "c"), pa.field("b", pa.binary())]
        )),
        pa.field("l", pa.list_(pa.struct([renamed(pa.field("key", pa.string()), "k")]))),
    ]
)  # fmt: skip


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("compactor", ["arrow", "spark"])
def test_renamed_history_reads_the_same_bits_on_both_engines(
    consensus: Consensus, blob: BlobStore, spark_engine: SparkEngine, compactor: str
) -> None:
    """Renames at the top level, in a struct (with a widening) and in list elements: batches
    stored under the old names and the new ones read the same on arrow and Spark, under the
    new names, before and after a compaction by either engine, and a retraction written under
    the new names cancels a row stored under the old ones."""
    shard = Shard(consensus, blob, f"r-{uuid.uuid4().hex[:8]}")
    shard.create(RENAMED_FROM)
    old = pa.Table.from_pylist([
        {"id": 1, "owner": "é", "s": {"c": -32768, "b": b"\x00"}, "l": [{"k": "a"}, None]},
        {"id": 2, "owner": None, "s": None, "l": []},
        {"id": 3, "owner": "x", "s": {"c": 7, "b": None}, "l": None},
    ], schema=RENAMED_FROM)  # fmt: skip
    assert shard.compare_and_append(_stamped(old, 0, 1), 0, 1).ok
    assert shard.compare_and_evolve_schema(0, RENAMED).ok
    live = shard.state().live_schema
    new = pa.Table.from_pylist([
        {"id": 10, "owner_id": "n", "s": {"count": 2**20, "b": b"\x01"}, "l": [{"key": "z"}]},
    ], schema=live)  # fmt: skip
    retract = migrate_batch(old.slice(2, 1), shard.state().live(0), live, passthrough=())
    both = pa.concat_tables([_stamped(new, 1, 1), _stamped(retract, 1, -1)])
    assert shard.compare_and_append(both, 1, 2).ok
    for step in ("before", "after"):
        expected = ArrowEngine().snapshot(shard, 1)
        got = spark_engine.snapshot(shard, 1)
        assert expected.schema.names[:4] == ["id", "owner_id", "s", "l"], step
        assert got.schema == expected.schema, step
        assert canonical(got) == canonical(expected), step
        rows = {r["id"]: r for r in expected.drop_columns([TS, DIFF]).to_pylist()}
        assert sorted(rows) == [1, 2, 10], step  # row 3 retracted under the new names
        assert rows[1]["s"] == {"count": -32768, "b": b"\x00"}, step
        assert rows[1]["l"] == [{"key": "a"}, None], step
        if step == "before":
            engine = ArrowEngine() if compactor == "arrow" else spark_engine
            assert engine.compact(shard).applied


# --- CLI ------------------------------------------------------------------------------------


def bootstrap(consensus: Consensus, blob: BlobStore, shard: Shard) -> None:
    """A catalog naming ``shard`` as collection mz_catalog.items, blobs in ``blob``."""
    consensus.ensure(SHARDS_KEY)
    ref = CollectionRef(
        global_id="s1", name="mz_catalog.items", shard_id=shard.shard_id, fingerprint="x"
    )
    state = CatalogState(
        version="0.1.0", deploy_generation=1, blob_uri=blob.uri, collections={"s1": ref}
    )
    consensus.commit([catalog_write_op(state, -1)])


def run_cli(zk_env: ZkEnv, *args: str, spark: SparkSessionProvider | None = None) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main,
        ["--log-level", "WARNING", *args, "--zk", zk_env.hosts, "--env", zk_env.name],
        obj={"spark": spark},
    )


def test_cli_read_prints_json_lines_and_a_table(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """read --json prints the snapshot's rows; without --json a table naming the collection."""
    source = source_shard(consensus, blob)
    bootstrap(consensus, blob, source)
    result = run_cli(
        zk_env, "read", "--collection", "mz_catalog.items", "--json", "--engine", "arrow"
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(json.dumps(r, sort_keys=True) for r in rows) == canonical(source.snapshot())
    result = run_cli(zk_env, "read", "--collection", "mz_catalog.items", "--as-of", "0")
    assert result.exit_code == 0, result.output
    assert "mz_catalog.items as of 0" in result.stdout and "owner" in result.stdout


def test_cli_read_table_shows_the_first_rows_and_says_how_to_see_every_one(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """A collection of more rows than a table shows: ``read`` prints the first 100 and says so
    (a collection may hold millions); ``--limit`` prints as many as it says, ``--json`` all."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    shard = Shard(consensus, blob, "many")
    shard.create(schema)
    append(shard, updates(schema, [{"id": i, "name": f"n{i}"} for i in range(150)], 0))
    bootstrap(consensus, blob, shard)
    where = ["read", "--collection", "mz_catalog.items"]
    table = run_cli(zk_env, *where)
    assert table.exit_code == 0, table.output
    assert "the first 100 rows (--limit N shows N, --json or --output every row" in table.stdout
    assert sum(line.startswith("│ ") for line in table.stdout.splitlines()) == 100
    limited = run_cli(zk_env, *where, "--limit", "120")
    assert "120 rows (--limit 120)" in limited.stdout and "the first" not in limited.stdout
    every = run_cli(zk_env, *where, "--json")
    assert len(every.stdout.splitlines()) == 150


def test_cli_read_json_writes_rows_as_get_read_does_and_they_append_back(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """read --json writes times in ISO 8601, bytes in base64, decimals as strings and maps as
    objects, as GET /read answers; and those lines parse back into the same rows, as
    POST /append reads them (orchestrator.wire.ndjson)."""
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False), pa.field("at", pa.timestamp("ms", tz="UTC")),
        pa.field("raw", pa.binary()), pa.field("amount", pa.decimal128(10, 2)),
        pa.field("tags", pa.map_(pa.string(), pa.binary())),
    ])  # fmt: skip
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    row = {"id": 1, "at": at, "raw": b"\x00\xff", "amount": decimal.Decimal("12.34"),
           "tags": [("k", b"\x01")]}  # fmt: skip
    shard = Shard(consensus, blob, "typed")
    shard.create(schema)
    append(shard, updates(schema, [row], 0))
    bootstrap(consensus, blob, shard)
    result = run_cli(zk_env, "read", "--collection", "mz_catalog.items", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "id": 1, "at": "2026-01-02T03:04:05.678000+00:00", "raw": "AP8=", "amount": "12.34",
        "tags": {"k": "AQ=="}, TS: 0, DIFF: 1,
    }  # fmt: skip
    back = rows_to_table(result.stdout.encode(), update_schema(schema))
    assert back.drop_columns([TS, DIFF]).to_pylist() == [{**row, "at": at}]


def test_cli_read_of_an_unknown_collection_exits_2_naming_it(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """An unknown collection or a blob URI other than the recorded one is bad input (exit 2)."""
    bootstrap(consensus, blob, source_shard(consensus, blob))
    result = run_cli(zk_env, "read", "--collection", "mz_catalog.nope", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stderr)
    assert error["collection"] == "mz_catalog.nope" and error["reason"] == "unknown-collection"
    result = run_cli(zk_env, "compact", "--collection", "mz_catalog.items", "--blob", "/elsewhere")
    assert result.exit_code == 2


@pytest.mark.spark
@pytest.mark.slow
def test_cli_compact_then_read_on_spark(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv, spark: SparkSessionProvider
) -> None:
    """compact on each engine leaves reads unchanged; read --engine spark agrees with arrow."""
    source = source_shard(consensus, blob)
    bootstrap(consensus, blob, source)
    before = canonical(source.snapshot())
    name = ["--collection", "mz_catalog.items"]
    result = run_cli(zk_env, "compact", *name, "--engine", "spark", "--json", spark=spark)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["applied"] and summary["inputs"] == 3 and summary["engine"] == "spark"
    append(source, updates(V1, [{"id": 7, "name": "g", "owner": None, "tags": None}], ts=3))
    result = run_cli(zk_env, "compact", *name, "--engine", "arrow")
    assert result.exit_code == 0, result.output
    assert source.state().batch_count == 1
    result = run_cli(
        zk_env, "read", *name, "--as-of", "2", "--json", "--engine", "spark", spark=spark
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(json.dumps(r, sort_keys=True) for r in rows) == before


def test_cli_refuses_a_local_blob_with_a_cluster_master_and_bad_spark_conf(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """Before any Spark work: a local blob path with a spark:// master exits 2 naming
    --blob-shared; a malformed --spark-conf exits 2 naming it. Nothing was written."""
    source = source_shard(consensus, blob)
    bootstrap(consensus, blob, source)
    version = source.state().version
    name = ["--collection", "mz_catalog.items", "--engine", "spark"]
    result = run_cli(zk_env, "compact", *name, "--spark-master", "spark://127.0.0.1:9")
    assert result.exit_code == 2, result.output
    assert "--blob-shared" in result.output and "spark://127.0.0.1:9" in result.output
    result = run_cli(zk_env, "read", *name, "--spark-conf", "executor.memory=4g")
    assert result.exit_code == 2, result.output
    assert "'executor.memory=4g'" in result.output
    assert source.state().version == version


@pytest.mark.spark
@pytest.mark.slow
def test_cli_read_output_writes_exact_parquet_parts_on_both_engines(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv, spark: SparkSessionProvider, tmp_path: Any
) -> None:
    """read --output DIR writes the snapshot as Parquet parts (exact types, a _SUCCESS
    manifest) on either engine; a non-empty DIR and --limit with --output exit 2; --limit on
    Spark returns exactly that many rows."""
    import pyarrow.parquet as pq

    source = source_shard(consensus, blob)
    bootstrap(consensus, blob, source)
    expected = source.snapshot()
    name = ["--collection", "mz_catalog.items"]
    for engine in ("arrow", "spark"):
        out = tmp_path / f"out-{engine}"
        result = run_cli(
            zk_env, "read", *name, "--engine", engine, "--output", str(out), "--json", spark=spark
        )
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["rows"] == expected.num_rows and summary["engine"] == engine
        manifest = json.loads((out / "_SUCCESS").read_text())
        parts = [pq.read_table(out / part) for part in manifest["parts"]]
        got = pa.concat_tables(parts)
        assert got.schema == expected.schema
        assert canonical(got) == canonical(expected)
        again = run_cli(zk_env, "read", *name, "--engine", engine, "--output", str(out))
        assert again.exit_code == 2 and "not empty" in again.output
    both = run_cli(zk_env, "read", *name, "--output", str(tmp_path / "x"), "--limit", "1")
    assert both.exit_code == 2
    limited = run_cli(
        zk_env, "read", *name, "--engine", "spark", "--limit", "2", "--json", spark=spark
    )
    assert limited.exit_code == 0, limited.output
    assert len(limited.stdout.splitlines()) == 2


def test_cli_read_format_arrow_writes_one_stream_on_both_engines(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv, spark: SparkSessionProvider, tmp_path: Any
) -> None:
    """read --format arrow --output FILE writes the snapshot as one Arrow IPC stream (a chunk
    at a time) on either engine; an existing FILE and --format arrow without --output exit 2."""
    source = source_shard(consensus, blob)
    bootstrap(consensus, blob, source)
    expected = source.snapshot()
    name = ["--collection", "mz_catalog.items", "--format", "arrow"]
    for engine in ("arrow", "spark"):
        out = tmp_path / f"items-{engine}.arrows"
        result = run_cli(zk_env, "read", *name, "--engine", engine, "--output", str(out),
                         spark=spark)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"wrote {expected.num_rows} rows" in result.stdout
        got = pa.ipc.open_stream(out.read_bytes()).read_all()
        assert got.schema == expected.schema
        assert canonical(got) == canonical(expected)
        again = run_cli(zk_env, "read", *name, "--engine", engine, "--output", str(out))
        assert again.exit_code == 2 and "exists" in again.output
    missing = run_cli(zk_env, "read", *name)
    assert missing.exit_code == 2 and "--output FILE" in missing.output
