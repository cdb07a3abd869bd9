"""Exactly-once appends against a real ZooKeeper: an append whose answer was lost is resolved by
its own identity (the shard's write ledger), whatever moved its batch before the re-read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence
from catalog.environment import CONTAINER_KEYS, EPOCH_KEY
from catalog.errors import ConnectionLostError, WriteOutcomeUnknownError
from catalog.pipeline import copy_transformed
from catalog.shard import Shard, ShardState, WriteMark, new_shard_id
from catalog.shard.append import Rows, append_rows
from support.shards import contents, updates
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

S0 = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
FENCE = Fence(EPOCH_KEY, 0)


@pytest.fixture
def consensus(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    store = Consensus(zk_client, zk_env.root)
    store.ensure(*CONTAINER_KEYS)
    store.cas(EPOCH_KEY, b"1", -1)  # a leader's fence: the epoch at the version it took over at
    return store


@pytest.fixture
def blob(tmp_path: Path) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blobs"))


def batch(*ids: int, ts: int) -> pa.Table:
    return updates(S0, [{"id": i, "name": f"n{i}"} for i in ids], ts=ts)


def append(shard: Shard, *ids: int) -> None:
    upper = shard.state().upper
    assert shard.compare_and_append(batch(*ids, ts=upper), upper, upper + 1).ok


def appends(shard: Shard, *ids: int) -> None:
    for i in ids:
        append(shard, i)


def losing_shard(
    consensus: Consensus,
    blob: BlobStore,
    shard_id: str,
    between: Callable[[], Any],
    **options: Any,
) -> Shard:
    """A handle on ``shard_id`` whose first fenced write lands, then ``between`` runs (through
    another handle), then the answer is lost (ConnectionLostError), as when ZooKeeper's reply
    never arrives while other writers move on."""
    lossy = Consensus(consensus.client, consensus.root)
    lost: list[str] = []

    def lose(key: str) -> None:
        if lost:
            return
        lost.append(key)
        between()
        raise ConnectionLostError("answer lost after the commit landed", keys=[key])

    lossy.after_fenced_write = lose
    return Shard(lossy, blob, shard_id, **options)


@pytest.fixture
def shard(consensus: Consensus, blob: BlobStore) -> Shard:
    handle = Shard(consensus, blob, new_shard_id())
    handle.create(S0)
    append(handle, 1)
    append(handle, 2)
    return handle


def test_lost_answer_then_compaction_applies_once(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """The batch was compacted away before the re-read: the ledger still names the append."""
    writer = losing_shard(consensus, blob, shard.shard_id, shard.compact)
    result = writer.compare_and_append(batch(3, ts=2), 2, 3, fence=FENCE, write_id="w-3")
    assert result.ok and result.replayed and result.upper == 3
    state = shard.state()
    assert state.batch_count == 1  # the compaction's output holds the appended row
    assert contents(shard.snapshot()) == {(i, f"n{i}"): 1 for i in (1, 2, 3)}
    assert state.writes.find("w-3") is not None


def test_lost_answer_then_rollup_and_other_appends_applies_once(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Other appends moved the upper and rolled the batch up: found by id, not by frontier."""
    plain = Shard(consensus, blob, new_shard_id(), rollup_threshold=2)
    plain.create(S0)
    append(plain, 1)
    writer = losing_shard(
        consensus,
        blob,
        plain.shard_id,
        lambda: appends(plain, 3, 4, 5),
        rollup_threshold=2,
    )
    result = writer.compare_and_append(batch(2, ts=1), 1, 2, fence=FENCE)
    assert result.ok and result.replayed and result.upper == 2
    state = plain.state()
    assert state.upper == 5 and state.rollups, "the lost batch now lives in a rollup"
    assert contents(plain.snapshot()) == {(i, f"n{i}"): 1 for i in (1, 2, 3, 4, 5)}


def test_same_write_id_twice_writes_once(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """A second call with a landed write id returns the first append and writes nothing."""
    first = shard.compare_and_append(batch(3, ts=2), 2, 3, write_id="key")
    blobs = sorted(blob.list(f"shards/{shard.shard_id}"))
    again = shard.compare_and_append(batch(3, ts=3), 3, 4, write_id="key")
    assert first.ok and not first.replayed
    assert again.ok and again.replayed and again.mark == first.mark and again.upper == 3
    assert shard.state().upper == 3
    assert sorted(blob.list(f"shards/{shard.shard_id}")) == blobs
    assert contents(shard.snapshot()) == {(i, f"n{i}"): 1 for i in (1, 2, 3)}


def test_lost_answer_of_a_write_that_did_not_land_is_not_reported_landed(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """An id missing from a ledger that covers the expected upper proves the append absent."""
    other = shard.compare_and_append(batch(3, ts=2), 2, 3)
    assert other.ok
    result = shard.compare_and_append(batch(4, ts=2), 2, 3, write_id="never-landed")
    assert not result.ok and result.upper == 3 and not result.replayed


def test_ledger_that_forgot_the_write_reports_an_unknown_outcome(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """More appends than the ledger keeps ran before the re-read: unknown, never a duplicate."""
    forgetful = Shard(consensus, blob, shard.shard_id, write_memory=2)
    writer = losing_shard(
        consensus,
        blob,
        shard.shard_id,
        lambda: appends(forgetful, 4, 5, 6),
        write_memory=2,
    )
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        writer.compare_and_append(batch(3, ts=2), 2, 3, fence=FENCE, write_id="forgotten")
    assert unknown.value.details["write_id"] == "forgotten"
    assert unknown.value.details["shard_id"] == shard.shard_id
    assert contents(shard.snapshot())[(3, "n3")] == 1  # it had landed: never appended twice


def test_copy_carries_the_ledger_to_the_replacement_shard(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """An append recognised by id on the source is recognised on its copy after a switch."""
    assert shard.compare_and_append(batch(3, ts=2), 2, 3, write_id="before-switch").ok
    target = Shard(consensus, blob, new_shard_id())
    target.create(S0)
    assert copy_transformed(shard, target, [], S0, fence=None, engine="arrow") == 3
    again = target.compare_and_append(batch(3, ts=3), 3, 4, write_id="before-switch")
    assert again.replayed and again.upper == 3
    assert target.state().upper == 3
    assert target.state().writes.horizon <= 2


def test_state_written_before_ledgers_knows_nothing_below_its_upper(shard: Shard) -> None:
    """A state without a ledger (an older writer) decodes with its horizon at its upper."""
    raw: dict[str, Any] = shard.state().to_json()
    del raw["writes"]
    decoded = ShardState._from_json(raw, 0)
    assert decoded.writes.marks == () and decoded.writes.horizon == decoded.upper == 2


def test_a_group_commit_whose_answer_was_lost_lands_each_member_once(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """Three appends committed as one group; the answer is lost while another append moves the
    upper: the group is found by its first member, and every member has its own mark."""
    writer = losing_shard(consensus, blob, shard.shard_id, lambda: append(shard, 9))
    group = [("ka", 1), ("kb", 2), ("kc", 1)]
    result = writer.compare_and_append(batch(3, 4, 5, 6, ts=2), 2, 3, fence=FENCE, group=group)
    assert result.ok and result.replayed and result.upper == 3
    state = shard.state()
    marks = {m.id: (m.lower, m.upper, m.rows) for m in state.writes.marks}
    assert {k: marks[k] for k, _ in group} == {"ka": (2, 3, 1), "kb": (2, 3, 2), "kc": (2, 3, 1)}
    assert contents(shard.snapshot()) == {(i, f"n{i}"): 1 for i in (1, 2, 3, 4, 5, 6, 9)}


def test_a_known_state_that_moved_is_checked_again_before_the_group_is_written(
    consensus: Consensus, blob: BlobStore, shard: Shard
) -> None:
    """A group commit that starts from the state its last commit left (``known``) while the
    ledger learnt one of its members' ids at the same upper (as when a key log segment lands):
    the compare-and-set refuses the stale state, the members are checked again against the
    state read then, and the member the ledger holds is not written twice."""
    stale = shard.state()
    upper = stale.upper
    writes, _ = stale.writes.evicting([WriteMark("kb", 0, 1, 1)], shard.write_memory)
    shard.cas(stale, attrs.evolve(stale, writes=writes), None)
    rows_of = {"ka": 5, "kb": 7, "kc": 8}
    seen: list[list[str]] = []

    def members(state: ShardState) -> Rows | None:
        wanted = [k for k in rows_of if shard.find_write(state.writes, k) is None]
        seen.append(wanted)
        table = batch(*(rows_of[k] for k in wanted), ts=0).drop_columns(["_ts", "_diff"])
        return Rows(table, group=[(k, 1) for k in wanted])

    result = append_rows(shard, members, fence=FENCE, known=stale)
    assert result.ok and result.upper == upper + 1
    assert seen == [["ka", "kb", "kc"], ["ka", "kc"]]
    assert contents(shard.snapshot()) == {(i, f"n{i}"): 1 for i in (1, 2, 5, 8)}
