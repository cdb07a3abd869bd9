"""catalog.migration: the (GlobalId, Version, DeployGeneration) -> ShardId map on real ZooKeeper."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence
from catalog.environment import EPOCH_KEY, MIGRATION_SHARD_ID, SHARDS_KEY
from catalog.errors import ConnectionLostError, FencedError
from catalog.migration import MIGRATION_SCHEMA, MigrationEntry, MigrationShard
from catalog.retry import CasRetry
from catalog.shard import Shard, new_shard_id
from support.zookeeper import ZkEnv, kazoo_client

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@pytest.fixture
def consensus(env_consensus: Consensus) -> Consensus:
    return env_consensus


@pytest.fixture
def blob(tmp_path: Path) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blobs"))


@pytest.fixture
def migration(consensus: Consensus, blob: BlobStore) -> MigrationShard:
    return MigrationShard(consensus, blob)


def entry(gid: str, version: str = "0.2.0", generation: int = 2, shard: str = "") -> MigrationEntry:
    return MigrationEntry(gid, version, generation, shard or f"shard-{gid}-{version}-{generation}")


def test_ensure_creates_the_well_known_shard_once(migration: MigrationShard) -> None:
    """ensure creates shards/migration with the fixed schema; calling it again changes nothing."""
    state = migration.ensure()
    assert state.shard_id == MIGRATION_SHARD_ID
    assert state.live_schema.equals(MIGRATION_SCHEMA)
    assert migration.ensure().version == state.version
    assert migration.entries() == []


def test_entries_of_a_missing_migration_shard_are_empty(migration: MigrationShard) -> None:
    """Reading before anyone created the shard yields no entries (and writes nothing)."""
    assert migration.entries() == []
    assert migration.entries_for("0.2.0", 2) == {}
    assert not migration.shard.exists()


def test_entries_for_matches_version_and_generation_exactly(migration: MigrationShard) -> None:
    """Only entries of exactly (version, generation) are returned; others are ignored."""
    mine = [entry("s1"), entry("s2")]
    others = [entry("s1", "0.2.0", 1), entry("s1", "0.3.0", 2), entry("s3", "0.1.0", 2)]
    migration.append_entries(mine + others)
    assert migration.entries_for("0.2.0", 2) == {"s1": mine[0], "s2": mine[1]}
    assert migration.entries_for("0.2.0", 3) == {}
    assert migration.entries() == sorted(mine + others)


def test_appending_twice_keeps_one_entry(migration: MigrationShard) -> None:
    """Appending entries that are already live is skipped (retries never duplicate)."""
    upper = migration.append_entries([entry("s1")])
    assert migration.append_entries([entry("s1")]) == upper
    snap = migration.shard.snapshot()
    assert snap.column("_diff").to_pylist() == [1]


def test_retract_removes_and_is_idempotent(migration: MigrationShard) -> None:
    """Retracted entries disappear; retracting again (or unknown entries) writes nothing."""
    migration.append_entries([entry("s1"), entry("s2")])
    upper = migration.retract([entry("s1"), entry("s9")], fence=None)
    assert migration.entries() == [entry("s2")]
    assert migration.retract([entry("s1")], fence=None) == upper
    assert migration.entries(as_of=0) == [entry("s1"), entry("s2")]  # history stays readable


def test_retract_with_a_stale_fence_is_rejected(migration: MigrationShard) -> None:
    """A leader whose epoch moved cannot retract."""
    migration.append_entries([entry("s1")])
    migration.consensus.cas(EPOCH_KEY, b"1", -1)
    fence = Fence(EPOCH_KEY, 0)
    migration.consensus.cas(EPOCH_KEY, b"2", 0)
    with pytest.raises(FencedError):
        migration.retract([entry("s1")], fence=fence)
    assert migration.entries() == [entry("s1")]


def test_ensure_replacement_shards_creates_then_reuses(migration: MigrationShard) -> None:
    """The first call creates shards and entries; the second reuses them and creates none."""
    wanted = {"s1": SCHEMA, "s2": SCHEMA}
    first = migration.ensure_replacement_shards("0.2.0", 2, wanted)
    assert sorted(first) == ["s1", "s2"]
    for shard_id in first.values():
        state = Shard(migration.consensus, migration.blob, shard_id).state()
        assert state.live_schema.equals(SCHEMA)
    upper = migration.shard.state().upper
    assert migration.ensure_replacement_shards("0.2.0", 2, wanted) == first
    assert migration.shard.state().upper == upper
    other = migration.ensure_replacement_shards("0.2.0", 3, wanted)
    assert set(other.values()).isdisjoint(first.values())


def test_custom_creator_is_called_only_for_missing(migration: MigrationShard) -> None:
    """create_shard is called once per missing global id, with its schema."""
    calls: list[str] = []

    def create(gid: str, schema: pa.Schema) -> str:
        calls.append(gid)
        shard_id = new_shard_id()
        Shard(migration.consensus, migration.blob, shard_id).create(schema)
        return shard_id

    migration.ensure_replacement_shards("0.2.0", 2, {"s1": SCHEMA}, create)
    migration.ensure_replacement_shards("0.2.0", 2, {"s1": SCHEMA, "s2": SCHEMA}, create)
    assert calls == ["s1", "s2"]


def test_racing_processes_of_one_generation_agree(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """4 threads with their own clients, same (version, generation): one shard per collection,
    one entry each, and the losers' shards discarded."""
    wanted = {f"s{i}": SCHEMA for i in range(6)}

    def racer() -> dict[str, str]:
        client = kazoo_client(zk_env.hosts)
        client.start(timeout=15)
        try:
            shard = MigrationShard(Consensus(client, zk_env.root), blob)
            return shard.ensure_replacement_shards("0.2.0", 2, wanted)
        finally:
            client.stop()
            client.close()

    with ThreadPoolExecutor(4) as pool:
        results = [f.result(timeout=120) for f in [pool.submit(racer) for _ in range(4)]]
    assert all(r == results[0] for r in results)
    migration = MigrationShard(consensus, blob)
    assert {e.global_id: e.shard_id for e in migration.entries()} == results[0]
    assert len(migration.entries()) == len(wanted)
    shards = set(consensus.children(SHARDS_KEY)) - {MIGRATION_SHARD_ID}
    assert shards == set(results[0].values())


@pytest.mark.parametrize("lost_write", [1, 2, 3])
def test_lost_answer_of_any_write_leaves_no_orphan_shard(
    consensus: Consensus, blob: BlobStore, lost_write: int
) -> None:
    """The answer of a write (the migration shard's creation, the shards' creation, the entry
    append) is lost after it landed: re-run as a leader re-runs its migration, the shards the
    lost write named are reused, so every shard created is the one its entry names."""
    consensus.cas(EPOCH_KEY, b"1", -1)
    lossy = Consensus(consensus.client, consensus.root)
    writes: list[str] = []

    def lose(key: str) -> None:
        writes.append(key)
        if len(writes) == lost_write:
            raise ConnectionLostError("answer lost after the commit landed", keys=[key])

    lossy.after_fenced_write = lose
    wanted = {f"s{i}": SCHEMA for i in range(3)}
    migration = MigrationShard(lossy, blob)
    mapping = CasRetry()(
        lambda: migration.ensure_replacement_shards("0.2.0", 2, wanted, fence=Fence(EPOCH_KEY, 0))
    )
    assert len(writes) >= lost_write, "the lost write happened"
    shards = set(consensus.children(SHARDS_KEY)) - {MIGRATION_SHARD_ID}
    assert shards == set(mapping.values()) and len(shards) == 3
    names = {e.global_id: e.shard_id for e in MigrationShard(consensus, blob).entries()}
    assert names == mapping


def test_compaction_keeps_the_live_entries_and_drops_retracted_ones(
    migration: MigrationShard,
) -> None:
    """Twenty upgrades' worth of appends and retractions collapse into one batch holding only
    the live entries; below the threshold nothing happens."""
    for round_ in range(20):
        migration.append_entries([entry("s1", f"0.{round_}.0"), entry("s2", f"0.{round_}.0")])
        if round_:
            migration.retract([entry("s1", f"0.{round_ - 1}.0")], fence=None)
    live = migration.entries()
    assert migration.shard.state().batch_count == 39
    assert migration.compact_if_needed()
    state = migration.shard.state()
    assert state.batch_count == 1 and state.row_count == len(live) == 21
    assert migration.entries() == live
    assert not migration.compact_if_needed()
