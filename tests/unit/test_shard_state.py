"""Unit tests of catalog.shard.state: the live schemas a state hands out."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog.errors import ShardError
from catalog.schema import TOMBSTONE_KEY
from catalog.shard.state import ShardState

LIVE = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string())])
# Equal to LIVE for Arrow (== ignores field metadata), but ``b`` is deleted.
DELETED_B = pa.schema(
    [pa.field("a", pa.int32()), pa.field("b", pa.string(), metadata={TOMBSTONE_KEY: b"true"})]
)


def test_schemas_equal_for_arrow_keep_their_own_live_schemas() -> None:
    """Each state walks its own migration types: Arrow's equality cannot tell a tombstone
    from a live field, so no look-up may go by it."""
    assert LIVE == DELETED_B
    with_b = ShardState(shard_id="s", schemas=(LIVE,))
    without_b = ShardState(shard_id="s", schemas=(DELETED_B,))
    assert with_b.live(0).names == ["a", "b"]
    assert without_b.live(0).names == ["a"]
    assert with_b.live(0).names == ["a", "b"]


def test_an_unknown_schema_id_is_refused_by_name() -> None:
    state = ShardState(shard_id="s7", schemas=(LIVE,))
    with pytest.raises(ShardError, match="shard s7 has no schema id 3"):
        state.live(3)
