"""Blob garbage collection against a real ZooKeeper and real Parquet blobs: unreferenced blobs
go once unreferenced for the grace on ZooKeeper's clock, never while referenced or leased."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.environment import read_catalog
from catalog.errors import ShardError
from catalog.release import Builtin, Mechanism, Migration, Release
from catalog.shard import DIFF, TS, Shard
from catalog.shard.readers import ReaderRegistry
from orchestrator.clock import zookeeper_now
from orchestrator.migrate import (
    MigrationContext,
    advance_frontiers,
    check_read_only,
    collect_garbage,
    compact_due,
    finalize_pending,
    migrate_as_leader,
)
from support.migrations import Env, bootstrap
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])
RELEASE = Release(
    version="1.0.0", builtins=[Builtin("mz_catalog", "t", "table", "s1", SCHEMA)], migrations=[]
)
GRACE = 1.0


class AfterBlobWrite(BlobStore):
    """A real BlobStore that runs a hook right after its next batch write: the moment a writer
    sits between its blob write and its CAS."""

    hook: Any = None

    def put_batch(self, key: str, table: pa.Table | pa.RecordBatch) -> None:
        super().put_batch(key, table)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


def rows(*ids: int, ts: int) -> pa.Table:
    return pa.table(
        {"id": list(ids), TS: [ts] * len(ids), DIFF: [1] * len(ids)},
        schema=pa.schema([*SCHEMA, pa.field(TS, pa.uint64()), pa.field(DIFF, pa.int64())]),
    )


def append(shard: Shard, *ids: int) -> None:
    upper = shard.state().upper
    assert shard.compare_and_append(rows(*ids, ts=upper), upper, upper + 1).ok


def wait_grace(ctx: MigrationContext, since: float) -> None:
    while zookeeper_now(ctx.consensus, None) - since < GRACE:
        time.sleep(0.2)


@pytest.fixture
def env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> Any:
    made = Env(zk_client, zk_env.root, BlobStore.from_uri(str(tmp_path / "blob")))
    yield made
    made.close()


def test_unreferenced_blobs_go_after_the_grace_never_while_leased(env: Env) -> None:
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard = ctx.shard(found[0].collections["s1"].shard_id)
    append(shard, 1)
    referenced = shard.referenced_keys()
    # What a writer killed between its blob write and its CAS leaves behind.
    orphan = f"shards/{shard.shard_id}/{uuid.uuid4().hex}.parquet"
    ctx.blob.put_batch(orphan, rows(9, ts=1))

    start = zookeeper_now(ctx.consensus, None)
    assert collect_garbage(ctx, None, grace_seconds=GRACE) == []  # first seen now
    assert collect_garbage(ctx, None, grace_seconds=GRACE) == []  # not for long enough
    wait_grace(ctx, start)
    with shard.lease(holder="reader"):
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []  # leased: left alone
        assert ctx.blob.exists(orphan)
    assert collect_garbage(ctx, None, grace_seconds=GRACE) == [orphan]
    assert not ctx.blob.exists(orphan)
    assert all(ctx.blob.exists(k) for k in referenced)
    assert shard.snapshot().column("id").to_pylist() == [1]


def test_compaction_inputs_stay_readable_until_the_grace_and_go_after_it(env: Env) -> None:
    """Compaction leaves its inputs (and rollups merged away) to the garbage collection: a
    reader that listed them before the compaction still reads them; they go only once
    unreferenced for the grace, and not while a reader leases the shard."""
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard_id = found[0].collections["s1"].shard_id
    shard = Shard(ctx.consensus, ctx.blob, shard_id, rollup_threshold=2)
    for i in range(5):
        append(shard, i)
    before = shard.state()
    inputs = shard.referenced_keys(before)
    assert before.rollups and len(inputs) >= 5
    assert shard.compact().applied
    assert all(ctx.blob.exists(k) for k in inputs), "inputs deleted under a reader"
    assert sorted(shard.snapshot_of(before).column("id").to_pylist()) == [0, 1, 2, 3, 4]
    start = zookeeper_now(ctx.consensus, None)
    assert collect_garbage(ctx, None, grace_seconds=GRACE) == []
    wait_grace(ctx, start)
    with shard.lease(holder="reader"):
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []
    assert sorted(collect_garbage(ctx, None, grace_seconds=GRACE)) == sorted(inputs)
    assert not any(ctx.blob.exists(k) for k in inputs)
    assert sorted(shard.snapshot().column("id").to_pylist()) == [0, 1, 2, 3, 4]


def test_a_blob_whose_cas_lands_after_it_was_seen_unreferenced_is_kept(env: Env) -> None:
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard_id = found[0].collections["s1"].shard_id
    store = AfterBlobWrite(filesystem=ctx.blob.filesystem, root=ctx.blob.root, uri=ctx.blob.uri)
    seen: list[float] = []

    def sweep_between_blob_and_cas() -> None:
        seen.append(zookeeper_now(ctx.consensus, None))
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []

    store.hook = sweep_between_blob_and_cas
    writer = Shard(ctx.consensus, store, shard_id)
    append(writer, 1, 2)
    assert seen, "the sweep ran while the blob was unreferenced"
    wait_grace(ctx, seen[0])
    assert collect_garbage(ctx, None, grace_seconds=GRACE) == []
    assert sorted(writer.snapshot().column("id").to_pylist()) == [1, 2]


def test_tombstones_and_empty_election_containers_retire(env: Env) -> None:
    """After a replacement, the finalized old shard's tombstone and the old generation's empty
    election container go once past the retention; everything still named stays."""
    ctx = bootstrap(env, RELEASE)
    old = read_catalog(ctx.consensus)
    assert old is not None
    old_shard = old[0].collections["s1"].shard_id
    replaced = Release(
        version="1.1.0",
        builtins=[Builtin("mz_catalog", "t", "table", "s1", pa.schema([("id", pa.string())]))],
        migrations=[Migration("1.1.0", "mz_catalog", "t", "table", Mechanism.REPLACEMENT)],
    )
    new = env.ctx(replaced, 2)
    leadership = env.lead(new)
    migrate_as_leader(new, leadership)
    env.elections[0].stop()  # generation 1's last candidate leaves
    assert finalize_pending(new, leadership.fence) == [old_shard]
    assert new.shard(old_shard).state().is_tombstone
    assert collect_garbage(new, leadership.fence, retention_seconds=3600) == []
    assert new.consensus.exists(f"shards/{old_shard}"), "kept within the retention"
    collect_garbage(new, leadership.fence, retention_seconds=0)
    assert not new.consensus.exists(f"shards/{old_shard}")
    assert new.consensus.children("election") == ["2"]
    current = read_catalog(new.consensus)
    assert current is not None
    assert all(new.consensus.exists(f"shards/{s}") for s in current[0].shard_ids())


def test_since_moves_to_the_latest_time_held_back_by_reader_leases(env: Env) -> None:
    """The leader moves since forward as far as leases allow; compaction then cancels a row
    inserted and deleted at different times, and reads of the latest state never change."""
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard = ctx.shard(found[0].collections["s1"].shard_id)
    for i in range(1, 5):
        append(shard, i)
    upper = shard.state().upper
    gone = rows(4, ts=upper).set_column(2, DIFF, pa.array([-1], pa.int64()))
    assert shard.compare_and_append(gone, upper, upper + 1).ok  # row 4 deleted again
    with shard.lease(holder="historian", as_of=1):
        assert advance_frontiers(ctx, found[0], None) == 1
        assert shard.state().since == 1  # held back by the read at time 1
        assert sorted(shard.snapshot(1).column("id").to_pylist()) == [1, 2]
    assert advance_frontiers(ctx, found[0], None) == 1
    state = shard.state()
    assert state.since == state.upper - 1
    before = sorted(shard.snapshot().column("id").to_pylist())
    result = shard.compact()
    assert result.applied and result.output is not None and result.output.rows == 3
    assert sorted(shard.snapshot().column("id").to_pylist()) == before == [1, 2, 3]


def test_scheduled_compaction_picks_long_and_old_schema_shards_and_leaves_big_ones(
    env: Env,
) -> None:
    """compact_due compacts a shard listing min_batches batches, at most `limit` per sweep, and
    leaves one with more rows than max_rows alone; reads never change."""
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    catalog = found[0]
    shard = ctx.shard(catalog.collections["s1"].shard_id)
    for i in range(3):
        append(shard, i)
    assert compact_due(ctx, catalog, None, min_batches=4) == []  # not long enough yet
    append(shard, 3)
    assert compact_due(ctx, catalog, None, min_batches=4, max_rows=3) == []  # too big here
    assert compact_due(ctx, catalog, None, min_batches=4) == [shard.shard_id]
    assert shard.state().batch_count == 1
    assert sorted(shard.snapshot().column("id").to_pylist()) == [0, 1, 2, 3]
    assert compact_due(ctx, catalog, None, min_batches=0) == []  # turned off


def test_a_prepared_copy_holds_its_source_since_below_its_checkpoint(env: Env) -> None:
    """A read-only copy of a REWRITE holds the source's ``since`` below the copy's upper (its
    checkpoint), so a restarted copy, and the delta copy at promotion, go on by time: the
    serving leader's frontier sweep stops there, and follows the copy as it catches up. A copy
    prepared but not started holds ``since`` where it is."""
    v1 = Release("1.0.0", [Builtin("mz_catalog", "t", "table", "s1", SCHEMA)])
    strings = pa.schema([pa.field("id", pa.string(), nullable=False)])

    def to_strings(batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = pc.cast(batch.column("id"), pa.string())
        return pa.RecordBatch.from_arrays([ids], schema=strings)

    v2 = Release(
        "1.1.0",
        [Builtin("mz_catalog", "t", "table", "s1", strings)],
        [Migration("1.1.0", "mz_catalog", "t", "table", Mechanism.REWRITE, transform=to_strings)],
        previous=v1,
    )
    leader = bootstrap(env, v1)
    found = read_catalog(leader.consensus)
    assert found is not None
    source = leader.shard(found[0].collections["s1"].shard_id)
    for i in range(1, 6):
        append(source, i)
    green = env.ctx(v2, 2)
    check_read_only(green)  # copies the source up to its upper: 5 rows
    copy = leader.shard(fresh_entry(green, 2))
    copied = copy.state().upper
    assert copied == source.state().upper
    for i in range(6, 9):
        append(source, i)
    assert advance_frontiers(leader, found[0], None) == 1
    assert source.state().since == copied - 1  # not past what the copy read
    check_read_only(green)  # a restart: goes on by time from its checkpoint
    assert sorted(copy.snapshot().column("id").to_pylist()) == [str(i) for i in range(1, 9)]
    assert advance_frontiers(leader, found[0], None) == 1
    assert source.state().since == source.state().upper - 1 == copy.state().upper - 1

    fresh = ctx_with_new_copy(env, v2, 3, leader)
    assert fresh.shard(fresh_entry(fresh, 3)).state().upper == 0
    append(source, 9)
    assert advance_frontiers(leader, found[0], None) == 0  # held where it is: not started


def ctx_with_new_copy(env: Env, release: Release, generation: int, leader: Any) -> Any:
    """A process of ``release`` at ``generation`` whose copy is prepared but not started (its
    replacement shard created and recorded, nothing copied)."""
    from orchestrator.migrate.replacements import ensure_shards

    found = read_catalog(leader.consensus)
    assert found is not None
    ctx = env.ctx(release, generation)
    schema = release.builtins[0].schema
    ensure_shards(ctx, {"s1": schema}, found[0], fence=None)
    return ctx


def fresh_entry(ctx: Any, generation: int) -> str:
    (entry,) = [e for e in ctx.migration_shard().entries() if e.deploy_generation == generation]
    return entry.shard_id


def test_a_first_read_of_a_shard_that_does_not_exist_says_so_and_registers_nothing(
    env: Env,
) -> None:
    """A first read sends its registration ahead of its state read: when the shard does not
    exist, the read's own error stands (the registration's create fails too), and the
    process's next first read of a real shard registers as usual."""
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    readers = ReaderRegistry(ctx.consensus, "reader-1")
    missing = ctx.shard("no-such-shard")
    with pytest.raises(ShardError, match="does not exist"), readers.reading(missing, None):
        raise AssertionError("a missing shard was read")
    shard = ctx.shard(found[0].collections["s1"].shard_id)
    append(shard, 0)
    with readers.reading(shard, None) as state:
        assert state.batch_count == 1
    (registration,) = shard.leases()
    assert registration.rsplit("/", 1)[1].startswith("l-")


def test_a_read_under_a_registration_keeps_its_blobs_and_since_and_writes_nothing(
    env: Env,
) -> None:
    """Reads through a process's registration (catalog.shard.readers) write nothing after the
    first; a compaction's inputs a read under way is on are doomed, not deleted, until a
    heartbeat says that read is over; since never passes a read under way; an idle
    registration is dropped, so finalization is not held."""
    ctx = bootstrap(env, RELEASE)
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard = ctx.shard(found[0].collections["s1"].shard_id)
    for i in range(4):
        append(shard, i)
    readers = ReaderRegistry(ctx.consensus, "reader-1")
    with readers.reading(shard, None) as state:  # the first read registers: one write
        assert state.batch_count == 4
    client, path = ctx.consensus.client, ctx.consensus.path(shard.key)
    (registration,) = shard.leases()
    before = (client.exists(path).cversion, client.exists(ctx.consensus.path(registration)).version)
    for _ in range(20):
        with readers.reading(shard, None) as state:
            ids = shard.snapshot(None, state=state).column("id").to_pylist()
            assert sorted(ids) == [0, 1, 2, 3]
    # No lease made or dropped (the children's version) and the registration not rewritten.
    after = (client.exists(path).cversion, client.exists(ctx.consensus.path(registration)).version)
    assert after == before

    with readers.reading(shard, None) as under_way:
        inputs = shard.referenced_keys(under_way)
        assert shard.compact().applied
        start = zookeeper_now(ctx.consensus, None)
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []  # first seen
        wait_grace(ctx, start)
        readers.heartbeat()  # the read is still under way: reads_after stays behind
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []  # doomed, kept
        readers.heartbeat()
        assert collect_garbage(ctx, None, grace_seconds=GRACE) == []
        assert all(ctx.blob.exists(k) for k in inputs)
        assert advance_frontiers(ctx, found[0], None) == 1
        assert shard.state().since <= under_way.upper - 1  # never past the read
        table = shard.snapshot(None, state=under_way)
        assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3]
    readers.heartbeat()  # no read under way now: its own write stands for reads_after
    assert sorted(collect_garbage(ctx, None, grace_seconds=GRACE)) == sorted(inputs)
    assert sorted(shard.snapshot().column("id").to_pylist()) == [0, 1, 2, 3]
    readers.heartbeat()  # unused since the last one: the registration goes
    assert shard.leases() == []
