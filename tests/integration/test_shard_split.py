"""Split shard states (head and body) against a real ZooKeeper and real Parquet files.

A registration writes the head alone, whatever the number of batches the body lists; an append
writes the body alone; a seal or a finalization writes both, so no append lands after one. A
whole (format 1) state is read as before and split by its first write of batches.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
import pyarrow as pa
import pytest

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Delete, SetData
from catalog.errors import CorruptStateError, ShardFinalizedError
from catalog.shard import (
    BatchRef,
    Shard,
    ShardState,
    body_key,
    evolve_op,
    new_shard_id,
    read_states,
    shard_key,
)
from catalog.shard.state import NEWEST_FORMAT
from catalog.shard.stored import Torn, decode_stored
from support.shards import contents, updates

pytestmark = pytest.mark.integration

S0 = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def wider(schema: pa.Schema, n: int) -> pa.Schema:
    return pa.schema([*schema, pa.field(f"added{n}", pa.string())])


@pytest.fixture
def consensus(env_consensus: Consensus) -> Consensus:
    return env_consensus


@pytest.fixture
def shard(consensus: Consensus, tmp_path: Path) -> Shard:
    handle = Shard(consensus, BlobStore.from_uri(str(tmp_path / "blobs")), new_shard_id())
    handle.create(S0)
    return handle


def append(shard: Shard, ids: list[int], schema: pa.Schema = S0) -> None:
    state = shard.state()
    data = [{"id": i, "name": f"n{i}"} for i in ids]
    table = updates(schema, data, state.upper, 1)
    result = shard.compare_and_append(table, state.upper, state.upper + 1)
    assert result.ok


def stat(consensus: Consensus, key: str) -> tuple[bytes, int]:
    found = consensus.get(key)
    assert found is not None
    return found.value, found.version


def test_a_new_shard_is_whole_and_its_first_append_splits_it(
    consensus: Consensus, shard: Shard
) -> None:
    assert not shard.state().split and consensus.get(body_key(shard.shard_id)) is None
    shard.compare_and_evolve_schema(0, wider(S0, 1))  # a head change keeps it whole
    assert not shard.state().split
    append(shard, [1, 2], wider(S0, 1))
    state = shard.state()
    assert state.split and state.link == 1 and state.upper == 1
    assert contents(shard.snapshot()) == {(1, "n1", None): 1, (2, "n2", None): 1}
    head = consensus.get(shard.key)
    assert head is not None and b'"batches"' not in head.value


def test_registration_on_a_shard_of_500_batches_writes_a_small_head_only(
    consensus: Consensus, shard: Shard
) -> None:
    """The op a leader puts into its registration transaction is the head (about 1 KB here),
    not the ~30 KB listing; the body znode is not written."""
    refs = [BatchRef(f"{i:032x}", 0, 10, i, i + 1) for i in range(500)]
    assert shard.compare_and_append_batches(refs, 0, 500).ok
    state = shard.state()
    body_before = stat(consensus, body_key(shard.shard_id))
    assert len(body_before[0]) > 25_000
    op, new = evolve_op(state, wider(S0, 1))
    assert isinstance(op, SetData) and op.key == shard.key and len(op.value) < 2_000
    consensus.commit([op])
    assert stat(consensus, body_key(shard.shard_id)) == body_before
    after = shard.state()
    assert after.schema_id == 1 and after.revision == new.revision and len(after.batches) == 500


def test_a_whole_state_from_an_earlier_release_is_read_and_split_on_its_first_append(
    consensus: Consensus, shard: Shard
) -> None:
    """A format 1 state listing batches (as written before the split) reads the same, a
    registration keeps it whole, and an append splits it without losing a batch."""
    append(shard, [1])
    split = shard.state()
    whole = attrs.evolve(split, body_version=-1)
    consensus.commit(
        [
            Delete(body_key(shard.shard_id), split.body_version),
            SetData(shard.key, whole.encode(), split.version),
        ]
    )
    legacy = shard.state()
    assert not legacy.split and legacy.upper == 1 and len(legacy.batches) == 1
    shard.compare_and_evolve_schema(0, wider(S0, 1))
    assert not shard.state().split
    append(shard, [2], wider(S0, 1))
    state = shard.state()
    assert state.split and state.upper == 2 and len(state.batches) == 2
    assert contents(shard.snapshot()) == {(1, "n1", None): 1, (2, "n2", None): 1}


def test_a_seal_moves_the_body_so_a_racing_append_cannot_land(
    consensus: Consensus, shard: Shard
) -> None:
    append(shard, [1])
    before = shard.state()
    shard.seal()
    sealed = shard.state()
    assert sealed.body_version == before.body_version + 1 and sealed.link == before.link + 1
    with pytest.raises(ShardFinalizedError):
        append(shard, [2])
    shard.finalize(wait=0)
    tomb = shard.state()
    assert tomb.is_tombstone and tomb.split


def test_a_head_and_body_of_different_writes_are_told_apart(
    consensus: Consensus, shard: Shard
) -> None:
    """A reader holding a head from before a registration and a body written with the new
    schema id, or a head from before a seal and the sealed body, must read again."""
    append(shard, [1])
    old_head = consensus.get(shard.key)
    shard.compare_and_evolve_schema(0, wider(S0, 1))
    append(shard, [2], wider(S0, 1))
    body = consensus.get(body_key(shard.shard_id))
    assert old_head is not None and body is not None
    with pytest.raises(Torn):
        decode_stored(old_head, body)
    head = consensus.get(shard.key)
    assert head is not None
    shard.seal()
    sealed_body = consensus.get(body_key(shard.shard_id))
    assert sealed_body is not None
    with pytest.raises(Torn):
        decode_stored(head, sealed_body)
    state = shard.state()
    assert state.sealed and all(b.schema_id <= state.schema_id for b in state.batches)


def test_readers_never_see_a_batch_of_a_schema_their_head_lacks(
    consensus: Consensus, shard: Shard
) -> None:
    """Registrations and appends with the new schema race many state reads (a stress test:
    the torn pairs it could meet are built deterministically in the test above)."""
    stop = threading.Event()
    seen: list[str] = []

    def read() -> None:
        while not stop.is_set():
            try:
                state = read_states(consensus, [shard.shard_id])[shard.shard_id]
                assert state is not None
                for batch in state.batches:
                    state.live(batch.schema_id)  # ShardError for a schema the head lacks
            except Exception as exc:  # reported by the main thread
                seen.append(repr(exc))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    schema = S0
    try:
        for n in range(25):
            new = wider(schema, n)
            assert shard.compare_and_evolve_schema(n, new).ok
            schema = new
            append(shard, [n], schema)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert seen == []
    state = shard.state()
    assert state.schema_id == 25 and state.upper == 25


def test_a_state_of_a_newer_format_is_named_not_misread(consensus: Consensus, shard: Shard) -> None:
    _, version = stat(consensus, shard.key)
    newer = NEWEST_FORMAT + 1  # formats 3 and 4 are this code's own (numbered fields)
    consensus.commit([SetData(shard.key, b'{"format": %d, "shard_id": "x"}' % newer, version)])
    with pytest.raises(CorruptStateError) as caught:
        shard.state()
    assert "newer catalog-upgrade" in caught.value.message
    assert caught.value.details["reason"] == "newer-format"


def test_discard_and_states_of_a_split_shard(consensus: Consensus, shard: Shard) -> None:
    """A split shard whose batches were all compacted away is discarded with both halves."""
    refs = [BatchRef(f"{i:032x}", 0, 10, i, i + 1) for i in range(1)]
    assert shard.compare_and_append_batches(refs, 0, 1).ok
    state = shard.state()
    emptied = attrs.evolve(state, batches=())
    shard.cas(state, emptied, None)
    assert read_states(consensus, [shard.shard_id])[shard.shard_id] is not None
    shard.discard()
    assert consensus.get(shard_key(shard.shard_id)) is None
    assert consensus.get(body_key(shard.shard_id)) is None
    assert read_states(consensus, [shard.shard_id]) == {shard.shard_id: None}


def test_state_round_trips_through_both_halves(consensus: Consensus, shard: Shard) -> None:
    append(shard, [1, 2, 3])
    shard.compare_and_evolve_schema(0, wider(S0, 1))
    state = shard.state()
    head, body = consensus.get(shard.key), consensus.get(body_key(shard.shard_id))
    assert head is not None and body is not None
    again = decode_stored(head, body)
    assert again == state and again.revision == state.revision
    assert ShardState.decode(state.encode()) == state  # the whole form still round-trips
