"""Unit tests of catalog.shard.state: the live schemas a state hands out."""

from __future__ import annotations

import attrs
import pyarrow as pa
import pytest

from catalog.errors import ShardError
from catalog.schema import TOMBSTONE_KEY
from catalog.shard import state as shard_state
from catalog.shard.state import ShardState

LIVE = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string())])
# Equal to LIVE for Arrow (== ignores field metadata), but ``b`` is deleted.
DELETED_B = pa.schema(
    [pa.field("a", pa.int32()), pa.field("b", pa.string(), metadata={TOMBSTONE_KEY: b"true"})]
)


def test_schemas_equal_for_arrow_keep_their_own_live_schemas() -> None:
    """The live schema is looked up by the migration type's identity, not Arrow's equality,
    which cannot tell a tombstone from a live field."""
    assert LIVE == DELETED_B
    with_b = ShardState(shard_id="s", schemas=(LIVE,))
    without_b = ShardState(shard_id="s", schemas=(DELETED_B,))
    assert with_b.live(0).names == ["a", "b"]
    assert without_b.live(0).names == ["a"]
    assert with_b.live(0).names == ["a", "b"]


def test_states_evolved_from_one_another_walk_a_schema_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each commit evolves the state it writes from the one before; the live schema of their
    shared migration type is worked out once, not once per commit."""
    walks: list[pa.Schema] = []
    real = shard_state.live_schema

    def counted(mtype: pa.Schema) -> pa.Schema:
        walks.append(mtype)
        return real(mtype)

    monkeypatch.setattr(shard_state, "live_schema", counted)
    mtype = pa.schema([pa.field("x", pa.int64()), pa.field("y", pa.int64())])
    state = ShardState(shard_id="s", schemas=(mtype,))
    first = state.live(0)
    for upper in range(1, 50):
        state = attrs.evolve(state, upper=upper)
        assert state.live(0) is first
    assert walks == [mtype]


def test_an_unknown_schema_id_is_refused_by_name() -> None:
    state = ShardState(shard_id="s7", schemas=(LIVE,))
    with pytest.raises(ShardError, match="shard s7 has no schema id 3"):
        state.live(3)
