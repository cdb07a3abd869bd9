"""catalog.shard against a real ZooKeeper and real Parquet files."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import MAX_VALUE_BYTES, Consensus, Fence
from catalog.environment import EPOCH_KEY, CatalogState, CollectionRef
from catalog.errors import (
    CorruptBlobError,
    FencedError,
    ReaderFencedError,
    SchemaIncompatibleError,
    ShardError,
    ShardFinalizedError,
    VersionMismatchError,
)
from catalog.shard import (
    DIFF,
    TS,
    BatchRef,
    Shard,
    ShardState,
    consolidate,
    create_op,
    evolve_op,
    new_shard_id,
    read_states,
)
from catalog.shard.append import listed
from support.shards import canonical, contents, updates
from support.zookeeper import ZkEnv, kazoo_client

pytestmark = pytest.mark.integration

S0 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("owner", pa.string()),
    ]
)
S1 = pa.schema([*S0, pa.field("comment", pa.string())])  # added a nullable field
S2 = pa.schema([S1.field("id"), S1.field("name"), S1.field("comment")])  # deleted owner


@pytest.fixture
def consensus(env_consensus: Consensus) -> Consensus:
    return env_consensus


@pytest.fixture
def blob(tmp_path: Path) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blobs"))


@pytest.fixture
def shard(consensus: Consensus, blob: BlobStore) -> Shard:
    handle = Shard(consensus, blob, new_shard_id())
    handle.create(S0)
    return handle


def rows(*ids: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", **extra} for i in ids]


def append(shard: Shard, schema: pa.Schema, data: list[dict[str, Any]], diff: int = 1) -> int:
    """Append ``data`` at the current upper, moving it by one; the new upper."""
    upper = shard.state().upper
    result = shard.compare_and_append(updates(schema, data, upper, diff), upper, upper + 1)
    assert result.ok
    return result.upper


def batch_keys(shard: Shard) -> list[str]:
    return [k for k in shard.blob.list(f"shards/{shard.shard_id}") if k.endswith(".parquet")]


# --- state, create, schemas ----------------------------------------------------------------------


def test_create_and_read_state(shard: Shard) -> None:
    """A new shard has schema id 0, upper and since 0, no batches, and round-trips."""
    state = shard.state()
    assert (state.schema_id, state.upper, state.since, state.batch_count) == (0, 0, 0, 0)
    assert state.live_schema.equals(S0)
    assert ShardState.decode(state.encode(), state.version) == state


def test_create_twice_is_refused_unless_exist_ok(shard: Shard) -> None:
    """Creating an existing shard raises ShardError (exists); exist_ok returns its state."""
    with pytest.raises(ShardError) as info:
        shard.create(S0)
    assert info.value.details["reason"] == "exists"
    assert shard.create(S1, exist_ok=True).live_schema.equals(S0)


def test_missing_shard_is_not_found(consensus: Consensus, blob: BlobStore) -> None:
    """state() of an unknown shard raises ShardError with reason not-found."""
    with pytest.raises(ShardError) as info:
        Shard(consensus, blob, "nope").state()
    assert info.value.details["reason"] == "not-found"


def test_evolve_registers_next_id_and_identical_is_a_no_op(shard: Shard) -> None:
    """A compatible schema gets the next id; registering it again writes nothing."""
    result = shard.compare_and_evolve_schema(0, S1)
    assert (result.ok, result.schema_id) == (True, 1)
    version = shard.state().version
    again = shard.compare_and_evolve_schema(1, S1)
    assert (again.ok, again.schema_id) == (True, 1)
    assert shard.state().version == version


def test_evolve_with_stale_expected_id_returns_the_current(shard: Shard) -> None:
    """A stale expected id is a mismatch result carrying the current id and live schema."""
    shard.compare_and_evolve_schema(0, S1)
    result = shard.compare_and_evolve_schema(0, S2)
    assert not result.ok
    assert result.schema_id == 1
    assert result.schema.equals(S1)


def test_incompatible_evolution_raises_with_rule(shard: Shard) -> None:
    """A type change is refused with SchemaIncompatibleError naming rule and path."""
    changed = pa.schema([pa.field("id", pa.string(), nullable=False), *list(S0)[1:]])
    with pytest.raises(SchemaIncompatibleError) as info:
        shard.compare_and_evolve_schema(0, changed)
    assert (info.value.rule, info.value.path) == ("type-changed", "id")


def test_readding_a_deleted_field_is_refused_across_the_history(shard: Shard) -> None:
    """Tombstones reserve deleted names: owner, deleted at id 2, cannot come back later."""
    shard.compare_and_evolve_schema(0, S1)
    shard.compare_and_evolve_schema(1, S2)
    readded = pa.schema([*S2, pa.field("owner", pa.string())])
    with pytest.raises(SchemaIncompatibleError) as info:
        shard.compare_and_evolve_schema(2, readded)
    assert info.value.rule == "field-readded"


def test_many_shards_created_and_evolved_in_one_transaction(
    consensus: Consensus, blob: BlobStore
) -> None:
    """create_op/evolve_op batch many shards into one multi-op; read_states reads them at once."""
    ids = [new_shard_id() for _ in range(50)]
    consensus.commit([create_op(i, S0)[0] for i in ids])
    states = read_states(consensus, ids)
    built = [evolve_op(s, S1) for s in states.values() if s is not None]
    consensus.commit([op for op, _ in built if op is not None])
    after = read_states(consensus, [*ids, "missing"])
    assert after["missing"] is None
    assert all(s is not None and s.schema_id == 1 for i, s in after.items() if i != "missing")
    assert built[0][1] == after[ids[0]]
    assert built[0][1].version == after[ids[0]].version  # type: ignore[union-attr]
    assert evolve_op(after[ids[0]], S1)[0] is None  # type: ignore[arg-type]


def test_stale_evolve_op_in_a_transaction_names_the_shard(shard: Shard) -> None:
    """An evolve op built from a stale state fails the whole transaction with the shard's key."""
    stale = shard.state()
    shard.compare_and_evolve_schema(0, S1)
    op, _ = evolve_op(stale, S1)
    assert op is not None
    with pytest.raises(VersionMismatchError) as info:
        shard.consensus.commit([op])
    assert info.value.key == shard.key


# --- append and snapshot ---------------------------------------------------------------------


def test_append_and_snapshot_consolidate(shard: Shard) -> None:
    """Inserts and retractions consolidate; every snapshot row carries _ts == as_of."""
    append(shard, S0, rows(1, 2, 3))
    append(shard, S0, rows(2), diff=-1)
    append(shard, S0, rows(3))
    snap = shard.snapshot()
    assert snap.schema.names == [*S0.names, TS, DIFF]
    assert contents(snap) == {(1, "n1", None): 1, (3, "n3", None): 2}
    assert set(snap.column(TS).to_pylist()) == {2}
    assert contents(shard.snapshot(0)) == {
        (1, "n1", None): 1,
        (2, "n2", None): 1,
        (3, "n3", None): 1,
    }


def test_upper_mismatch_is_a_result_and_leaves_no_blob(shard: Shard) -> None:
    """A wrong expected upper returns ok=False with the current upper; nothing is stored."""
    append(shard, S0, rows(1))
    before = batch_keys(shard)
    result = shard.compare_and_append(updates(S0, rows(2), 0), 0, 1)
    assert (result.ok, result.upper) == (False, 1)
    assert batch_keys(shard) == before


def test_empty_append_moves_the_upper_without_a_blob(shard: Shard) -> None:
    """An empty batch only advances the upper."""
    result = shard.compare_and_append(updates(S0, [], 0), 0, 10)
    assert (result.ok, result.upper, result.state.batch_count) == (True, 10, 0)
    assert batch_keys(shard) == []


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: updates(S0, rows(1), 5), "ts-out-of-range"),
        (lambda: updates(S0, rows(1), 0).drop_columns([TS]), "missing-column"),
        (lambda: updates(S1, rows(1), 0), "columns-mismatch"),
        (
            lambda: updates(S0, rows(1), 0).set_column(0, "id", pa.array([1], pa.int32())),
            "type-mismatch",
        ),
        (
            lambda: updates(S0, rows(1), 0).set_column(0, "id", pa.array([None], pa.int64())),
            "null-in-non-null",
        ),
        (
            lambda: updates(S0, rows(1), 0).set_column(3, TS, pa.array([-1], pa.int64())),
            "bad-update-column",
        ),
    ],
)
def test_invalid_batches_are_refused(shard: Shard, build: Any, reason: str) -> None:
    """Rows outside [expected, new upper) or not matching the schema are refused, unwritten."""
    with pytest.raises(ShardError) as info:
        shard.compare_and_append(build(), 0, 1)
    assert info.value.details["reason"] == reason
    assert batch_keys(shard) == []
    assert shard.state().upper == 0


def test_unknown_schema_id_is_refused(shard: Shard) -> None:
    """Appending with a schema id that was never registered is refused."""
    with pytest.raises(ShardError) as info:
        shard.compare_and_append(updates(S0, rows(1), 0), 0, 1, schema_id=3)
    assert info.value.details["reason"] == "unknown-schema"


def test_old_batches_are_migrated_lazily_to_the_reader(shard: Shard) -> None:
    """Batches of schemas 0, 1, 2 read together as the latest schema (owner dropped)."""
    append(shard, S0, rows(1, owner="ann"))
    shard.compare_and_evolve_schema(0, S1)
    append(shard, S1, rows(2, comment="c2"))
    shard.compare_and_evolve_schema(1, S2)
    # a writer still on schema 1 may keep appending with it
    upper = shard.state().upper
    shard.compare_and_append(updates(S1, rows(3, owner="x"), upper), upper, upper + 1, schema_id=1)
    snap = shard.snapshot()
    assert snap.schema.names == ["id", "name", "comment", TS, DIFF]
    assert contents(snap) == {(1, "n1", None): 1, (2, "n2", "c2"): 1, (3, "n3", None): 1}


def test_deleting_a_field_merges_rows_that_only_differed_there(shard: Shard) -> None:
    """After owner is deleted, rows equal except for owner consolidate into one."""
    append(shard, S0, rows(1, owner="a"))
    append(shard, S0, rows(1, owner="b"))
    shard.compare_and_evolve_schema(0, S1)
    shard.compare_and_evolve_schema(1, S2)
    assert contents(shard.snapshot()) == {(1, "n1", None): 2}


def test_reader_schemas_are_fenced_or_projected(shard: Shard) -> None:
    """A reader needing a deleted field is fenced; a projection of the latest schema is not."""
    append(shard, S0, rows(1, owner="a"))
    shard.compare_and_evolve_schema(0, S1)
    shard.compare_and_evolve_schema(1, S2)
    with pytest.raises(ReaderFencedError) as info:
        shard.snapshot(reader_schema=S0)
    assert info.value.path == "owner"
    projection = pa.schema([pa.field("name", pa.string()), pa.field("id", pa.int64())])
    snap = shard.snapshot(reader_schema=projection)
    assert contents(snap) == {("n1", 1): 1}


def test_as_of_not_complete_errors_or_waits(shard: Shard) -> None:
    """as_of >= upper errors at once, or waits (on a watch) for an append to complete it."""
    append(shard, S0, rows(1))
    with pytest.raises(ShardError) as info:
        shard.snapshot(1)
    assert info.value.details == {
        "shard_id": shard.shard_id,
        "reason": "not-complete",
        "as_of": 1,
        "upper": 1,
    }

    def later() -> None:
        time.sleep(0.2)
        append(shard, S0, rows(2))

    writer = threading.Thread(target=later)
    writer.start()
    snap = shard.snapshot(1, timeout=10)
    writer.join()
    # It returned on the append: at its timeout it raises (below).
    assert contents(snap) == {(1, "n1", None): 1, (2, "n2", None): 1}
    with pytest.raises(ShardError) as timed_out:
        shard.snapshot(5, timeout=0.2)
    assert timed_out.value.details["reason"] == "not-complete"


def test_snapshot_of_an_empty_shard(shard: Shard) -> None:
    """A shard with upper 0 reads as empty with the right schema."""
    snap = shard.snapshot()
    assert snap.num_rows == 0
    assert snap.schema.names == [*S0.names, TS, DIFF]


# --- since and compaction --------------------------------------------------------------------


def test_since_only_moves_forward_and_not_past_upper(shard: Shard) -> None:
    """advance_since is monotone; passing the upper is refused; as_of below since is refused."""
    append(shard, S0, rows(1))
    append(shard, S0, rows(2))
    assert shard.advance_since(1).since == 1
    assert shard.downgrade_since(0).since == 1
    with pytest.raises(ShardError) as info:
        shard.advance_since(9)
    assert info.value.details["reason"] == "since-beyond-upper"
    with pytest.raises(ShardError) as below:
        shard.snapshot(0)
    assert below.value.details["reason"] == "compacted"


def test_compaction_keeps_every_snapshot_at_or_after_since(shard: Shard) -> None:
    """Compaction (times below since advanced, consolidated, latest schema) changes no read."""
    for i in range(6):
        append(shard, S0, rows(i % 3, owner=f"o{i % 2}"), diff=1 if i < 4 else -1)
    shard.compare_and_evolve_schema(0, S1)
    append(shard, S1, rows(7, comment="x"))
    shard.advance_since(3)
    before = {t: canonical(shard.snapshot(t)) for t in range(3, 7)}
    result = shard.compact()
    assert result.applied and result.inputs == 7
    state = shard.state()
    assert state.batch_count == 1
    assert state.batches[0].schema_id == state.schema_id
    assert state.batches[0].lower >= 3
    assert {t: canonical(shard.snapshot(t)) for t in range(3, 7)} == before
    # The inputs are left to the garbage collection (a reader may still read them).
    assert len(batch_keys(shard)) == 8
    assert len(shard.gc_orphans(grace_seconds=0)) == 7
    assert batch_keys(shard) == [state.batches[0].key(shard.shard_id)]


def test_compacted_single_time_batch_reads_without_regrouping(shard: Shard) -> None:
    """A compacted batch at one time is flagged consolidated; a reader projecting a column
    away still gets rows merged (the shortcut is only taken when nothing is dropped)."""
    append(shard, S0, rows(1, owner="a"))
    append(shard, S0, rows(1, owner="b"))
    shard.advance_since(1)
    output = shard.compact().output
    assert output is not None and output.consolidated and output.lower == output.upper - 1
    assert contents(shard.snapshot()) == {(1, "n1", "a"): 1, (1, "n1", "b"): 1}
    projection = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    assert contents(shard.snapshot(reader_schema=projection)) == {(1, "n1"): 2}
    shard.compare_and_evolve_schema(0, S1)
    shard.compare_and_evolve_schema(1, S2)
    assert contents(shard.snapshot()) == {(1, "n1", None): 2}


def test_compaction_output_ordered_only_when_sortable(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Sortable columns give an ordered output; nested columns an unordered one."""
    flat = Shard(consensus, blob, new_shard_id())
    flat.create(S0)
    append(flat, S0, rows(3, 1, 2))
    assert flat.compact().output == attrs.evolve(flat.state().batches[0], ordered=True)
    ids = flat.snapshot().column("id").to_pylist()
    assert sorted(ids) == [1, 2, 3]
    nested_schema = pa.schema([pa.field("id", pa.int64()), pa.field("tags", pa.list_(pa.string()))])
    nested = Shard(consensus, blob, new_shard_id())
    nested.create(nested_schema)
    append(nested, nested_schema, [{"id": 1, "tags": ["a"]}])
    output = nested.compact().output
    assert output is not None and not output.ordered


def test_order_does_not_survive_a_field_deletion(shard: Shard) -> None:
    """An ordered batch is no longer ordered once a later schema deletes one of its fields."""
    append(shard, S0, rows(1, 2))
    shard.compact()
    shard.compare_and_evolve_schema(0, S1)
    batch = shard.state().batches[0]
    assert shard.state().is_ordered_in(batch)
    shard.compare_and_evolve_schema(1, S2)
    assert not shard.state().is_ordered_in(batch)


class HookedBlob(BlobStore):
    """A real BlobStore that runs a hook once, before its next batch write (fault injection)."""

    hook: Any = None

    def put_batch(self, key: str, table: pa.Table | pa.RecordBatch) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        super().put_batch(key, table)


def hooked(shard: Shard, hook: Any) -> Shard:
    store = HookedBlob(filesystem=shard.blob.filesystem, root=shard.blob.root, uri=shard.blob.uri)
    store.hook = hook
    return Shard(shard.consensus, store, shard.shard_id)


def test_append_during_compaction_is_kept(shard: Shard) -> None:
    """An append landing between compaction's read and its CAS survives the compaction."""
    append(shard, S0, rows(1))
    append(shard, S0, rows(2))
    result = hooked(shard, lambda: append(shard, S0, rows(3))).compact()
    assert result.applied and result.inputs == 2
    assert shard.state().batch_count == 2
    assert contents(shard.snapshot()) == {(i, f"n{i}", None): 1 for i in (1, 2, 3)}


def test_compaction_losing_to_another_deletes_its_output(shard: Shard) -> None:
    """When another compaction replaced the inputs first, the loser reports it and deletes its
    own output at once (the winner's inputs are the garbage collection's)."""
    append(shard, S0, rows(1))
    append(shard, S0, rows(2))
    inputs = set(batch_keys(shard))
    result = hooked(shard, shard.compact).compact()
    assert not result.applied
    state = shard.state()
    assert state.batch_count == 1
    winner = state.batches[0].key(shard.shard_id)
    assert set(batch_keys(shard)) == {winner, *inputs}
    assert set(shard.gc_orphans(grace_seconds=0)) == inputs
    assert batch_keys(shard) == [winner]
    assert contents(shard.snapshot()) == {(1, "n1", None): 1, (2, "n2", None): 1}


# --- fencing, crashes, garbage ---------------------------------------------------------------


def test_fenced_writer_is_rejected_and_leaves_no_blob(shard: Shard) -> None:
    """After the epoch moves, a write with the old Fence raises FencedError; its blob is gone."""
    shard.consensus.cas(EPOCH_KEY, b"1", -1)
    fence = Fence(EPOCH_KEY, 0)
    assert shard.compare_and_append(updates(S0, rows(1), 0), 0, 1, fence=fence).ok
    shard.consensus.cas(EPOCH_KEY, b"2", 0)  # a newer leader took over
    with pytest.raises(FencedError):
        shard.compare_and_append(updates(S0, rows(2), 1), 1, 2, fence=fence)
    with pytest.raises(FencedError):
        shard.compare_and_evolve_schema(0, S1, fence=fence)
    with pytest.raises(FencedError):
        shard.compact(fence=fence)
    state = shard.state()
    assert (state.upper, state.schema_id) == (1, 0)
    assert batch_keys(shard) == [state.batches[0].key(shard.shard_id)]


def test_crash_between_blob_write_and_cas_leaves_only_garbage(shard: Shard) -> None:
    """A blob written without its CAS is unreferenced; reads ignore it and gc removes it."""
    append(shard, S0, rows(1))
    orphan = BatchRef("deadbeef", 0, 1, 1, 2)
    shard.blob.put_batch(orphan.key(shard.shard_id), updates(S0, rows(9), 1))
    assert orphan.key(shard.shard_id) not in shard.referenced_keys()
    assert contents(shard.snapshot()) == {(1, "n1", None): 1}
    assert shard.gc_orphans() == []  # younger than the grace period: maybe a live writer
    assert shard.gc_orphans(grace_seconds=0) == [orphan.key(shard.shard_id)]
    assert batch_keys(shard) == [shard.state().batches[0].key(shard.shard_id)]
    assert contents(shard.snapshot()) == {(1, "n1", None): 1}


def test_corrupt_batch_is_reported_with_its_key(shard: Shard) -> None:
    """A truncated batch file makes the snapshot fail with CorruptBlobError naming the key."""
    append(shard, S0, rows(1))
    key = shard.state().batches[0].key(shard.shard_id)
    path = Path(shard.blob.path(key))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(CorruptBlobError) as info:
        shard.snapshot()
    assert info.value.details["key"] == key


# --- seal, leases, finalize ------------------------------------------------------------------


def test_sealed_shard_refuses_appends_but_reads(shard: Shard) -> None:
    """After seal, appends raise ShardFinalizedError (reason sealed); snapshots still work."""
    append(shard, S0, rows(1))
    shard.seal()
    shard.seal()
    with pytest.raises(ShardFinalizedError) as info:
        shard.compare_and_append(updates(S0, rows(2), 1), 1, 2)
    assert info.value.details["reason"] == "sealed"
    assert contents(shard.snapshot()) == {(1, "n1", None): 1}


def test_finalize_waits_for_a_lease_then_deletes_blobs(shard: Shard) -> None:
    """finalize blocks until the lease is released (by another thread), then tombstones."""
    append(shard, S0, rows(1))
    append(shard, S0, rows(2))
    taken, release = threading.Event(), threading.Event()

    def reader() -> None:
        with shard.lease("reader-1"):
            taken.set()
            release.wait(10)

    thread = threading.Thread(target=reader)
    thread.start()
    assert taken.wait(10)
    assert len(shard.leases()) == 1
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    state = shard.finalize(wait=10)
    assert time.monotonic() - started >= 0.25
    thread.join()
    assert state.is_tombstone and state.sealed
    assert shard.blob.list(f"shards/{shard.shard_id}") == []
    assert shard.finalize().version == state.version  # twice: no-op
    with pytest.raises(ShardFinalizedError):
        shard.snapshot()
    with pytest.raises(ShardFinalizedError), shard.lease():
        pass
    with pytest.raises(ShardFinalizedError):
        shard.compare_and_append(updates(S0, rows(3), 2), 2, 3)


def test_finalize_timeout_leaves_it_resumable(shard: Shard) -> None:
    """With a lease held past the wait, finalize raises (leased); a later call completes it."""
    append(shard, S0, rows(1))
    with shard.lease("slow-reader"):
        with pytest.raises(ShardError) as info:
            shard.finalize(wait=0.2)
        assert info.value.details["reason"] == "leased"
        state = shard.state()
        assert state.finalized and not state.is_tombstone
        with pytest.raises(ShardFinalizedError), shard.lease("late"):
            pass
    assert shard.finalize(wait=5).is_tombstone


def test_discard_removes_an_unused_shard(consensus: Consensus, blob: BlobStore) -> None:
    """discard deletes a never-written shard entirely; a shard with batches is refused."""
    empty = Shard(consensus, blob, new_shard_id())
    empty.create(S0)
    empty.discard()
    assert not empty.exists()
    used = Shard(consensus, blob, new_shard_id())
    used.create(S0)
    append(used, S0, rows(1))
    with pytest.raises(ShardError) as info:
        used.discard()
    assert info.value.details["reason"] == "not-empty"


# --- sizes and rollups -----------------------------------------------------------------------


def test_rollups_keep_real_appends_readable(consensus: Consensus, blob: BlobStore) -> None:
    """Past the threshold batch entries move into rollup blobs (merged past max_rollups);
    snapshots, compaction and gc see every batch."""
    shard = Shard(consensus, blob, new_shard_id(), rollup_threshold=4, max_rollups=2)
    shard.create(S0)
    for i in range(23):
        append(shard, S0, rows(i))
    state = shard.state()
    assert state.batch_count == 23
    assert len(state.batches) <= 4 and 1 <= len(state.rollups) <= 2
    fresh = Shard(consensus, blob, shard.shard_id)  # no cached rollups
    assert len(fresh.batches()) == 23
    assert contents(fresh.snapshot()) == {(i, f"n{i}", None): 1 for i in range(23)}
    # Only rollups merged away are unreferenced (left to the garbage collection).
    orphans = fresh.gc_orphans(grace_seconds=0)
    assert all("/rollup-" in key for key in orphans)
    assert fresh.gc_orphans(grace_seconds=0) == []
    assert fresh.compact().inputs == 23
    assert contents(fresh.snapshot()) == {(i, f"n{i}", None): 1 for i in range(23)}
    fresh.gc_orphans(grace_seconds=0)
    assert len(blob.list(f"shards/{shard.shard_id}")) == 1


def test_state_with_10000_batches_stays_small(shard: Shard) -> None:
    """10,000 batch entries through the rollup path: the znode stays a few dozen KB."""
    state = shard.state()
    inline_only = attrs.evolve(
        state, batches=tuple(BatchRef(new_shard_id(), 0, 100_000, t, t + 1) for t in range(10_000))
    )
    assert len(inline_only.encode()) > MAX_VALUE_BYTES  # why rollups exist
    for t in range(10_000):
        ref = BatchRef(new_shard_id(), 0, 100_000, 1_700_000_000_000 + t, 1_700_000_000_001 + t)
        state = listed(shard, state, [ref], 1_700_000_000_001 + t)
    stored = shard.cas(shard.state(), state, None)
    size = len(shard.consensus.get(shard.key).value)  # type: ignore[union-attr]
    print(
        f"\nshard state with 10,000 batches: {size} bytes "
        f"({len(stored.batches)} inline, {len(stored.rollups)} rollups)"
    )
    assert stored.batch_count == 10_000
    assert size < 64 * 1024
    assert len(Shard(shard.consensus, shard.blob, shard.shard_id).batches()) == 10_000


def test_catalog_state_of_1000_collections_stays_small() -> None:
    """The catalog value with 1,000 collections is far below the znode limit."""
    catalog = CatalogState(
        version="0.11.0",
        deploy_generation=7,
        blob_uri="s3://bucket/catalog-upgrade/prod",
        collections={
            f"s{i}": CollectionRef(f"s{i}", f"mz_catalog.mz_object_{i}", new_shard_id(), "f" * 64)
            for i in range(1000)
        },
    )
    size = len(catalog.encode())
    print(f"\ncatalog state with 1,000 collections: {size} bytes")
    assert size < MAX_VALUE_BYTES // 2
    assert CatalogState.decode(catalog.encode()) == catalog


# --- races -----------------------------------------------------------------------------------


def append_until_done(shard: Shard, worker: int, count: int, schema_id: int | None = None) -> int:
    """Append ``count`` single-row batches (ids worker*1000+i), retrying lost races."""
    mismatches = 0
    for i in range(count):
        data = rows(worker * 1000 + i)
        upper = shard.state().upper
        while True:
            result = shard.compare_and_append(
                updates(S0, data, upper), upper, upper + 1, schema_id=schema_id
            )
            if result.ok:
                break
            mismatches += 1
            upper = result.upper
    return mismatches


def test_eight_threads_racing_appends_lose_nothing(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """8 threads (own clients) racing compare_and_append: every row exactly once."""
    shard_id = new_shard_id()
    Shard(consensus, blob, shard_id).create(S0)
    per_thread = 8
    mismatches: list[int] = []

    def worker(number: int) -> None:
        with connected(zk_env) as client:
            mismatches.append(
                append_until_done(
                    Shard(Consensus(client, zk_env.root), blob, shard_id), number, per_thread
                )
            )

    run_all([lambda n=n: worker(n) for n in range(8)])
    shard = Shard(consensus, blob, shard_id)
    expected = {
        (n * 1000 + i, f"n{n * 1000 + i}", None): 1 for n in range(8) for i in range(per_thread)
    }
    assert contents(shard.snapshot()) == expected
    assert shard.state().upper == 64
    assert len(batch_keys(shard)) == 64  # losers deleted their blobs
    assert sum(mismatches) > 0  # the race really happened


def test_eight_threads_racing_evolutions_lose_nothing(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """8 threads each adding their own field, retrying on mismatch: all 8 fields registered."""
    shard_id = new_shard_id()
    Shard(consensus, blob, shard_id).create(S0)

    def worker(number: int) -> None:
        with connected(zk_env) as client:
            shard = Shard(Consensus(client, zk_env.root), blob, shard_id)
            state = shard.state()
            while True:
                schema = pa.schema([*state.live_schema, pa.field(f"f{number}", pa.string())])
                result = shard.compare_and_evolve_schema(state.schema_id, schema)
                if result.ok:
                    return
                state = result.state

    run_all([lambda n=n: worker(n) for n in range(8)])
    state = Shard(consensus, blob, shard_id).state()
    assert state.schema_id == 8
    assert sorted(state.live_schema.names[3:]) == [f"f{n}" for n in range(8)]
    for i in range(1, 9):  # each step added exactly one field
        assert len(state.live(i)) == len(state.live(i - 1)) + 1


def test_appends_and_evolutions_race_together(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """Appends with a pinned schema id keep landing while other threads evolve the schema."""
    shard_id = new_shard_id()
    Shard(consensus, blob, shard_id).create(S0)

    def appender(number: int) -> None:
        with connected(zk_env) as client:
            shard = Shard(Consensus(client, zk_env.root), blob, shard_id)
            append_until_done(shard, number, 5, schema_id=0)

    def evolver(number: int) -> None:
        with connected(zk_env) as client:
            shard = Shard(Consensus(client, zk_env.root), blob, shard_id)
            state = shard.state()
            while not (
                result := shard.compare_and_evolve_schema(
                    state.schema_id,
                    pa.schema([*state.live_schema, pa.field(f"e{number}", pa.string())]),
                )
            ).ok:
                state = result.state

    run_all(
        [lambda n=n: appender(n) for n in range(4)] + [lambda n=n: evolver(n) for n in range(4)]
    )
    shard = Shard(consensus, blob, shard_id)
    assert shard.state().schema_id == 4
    assert len(contents(shard.snapshot())) == 20


def _process_appender(hosts: str, root: str, blob_uri: str, shard_id: str, worker: int) -> int:
    client = kazoo_client(hosts)
    client.start(timeout=15)
    try:
        shard = Shard(Consensus(client, root), BlobStore.from_uri(blob_uri), shard_id)
        return append_until_done(shard, worker, 10)
    finally:
        client.stop()
        client.close()


def test_four_processes_racing_appends_lose_nothing(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """4 spawned processes, each with its own kazoo client, racing appends: all 40 rows once."""
    shard_id = new_shard_id()
    Shard(consensus, blob, shard_id).create(S0)
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        results = [
            pool.apply_async(_process_appender, (zk_env.hosts, zk_env.root, blob.uri, shard_id, n))
            for n in range(4)
        ]
        [r.get(timeout=120) for r in results]
    shard = Shard(consensus, blob, shard_id)
    expected = {(n * 1000 + i, f"n{n * 1000 + i}", None): 1 for n in range(4) for i in range(10)}
    assert contents(shard.snapshot()) == expected
    assert len(batch_keys(shard)) == 40


# --- helpers ---------------------------------------------------------------------------------


def run_all(jobs: list[Any]) -> None:
    """Run ``jobs`` on their own threads at once; re-raise the first failure."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result(timeout=120)


class connected:
    """A started KazooClient of the test's server, closed on exit."""

    def __init__(self, env: ZkEnv) -> None:
        self.client = kazoo_client(env.hosts)

    def __enter__(self) -> KazooClient:
        self.client.start(timeout=15)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.stop()
        self.client.close()


def test_consolidate_is_exposed_for_the_pipeline() -> None:
    """consolidate sums diffs of identical (row, _ts) and drops zeros (used by the pipeline)."""
    data = updates(S0, rows(1, 1, 2), [0, 0, 1], [1, -1, 2])
    assert canonical(consolidate(data)) == [(2, "n2", None, 1, 2)]
