"""Which shards the leader's sweep compacts (orchestrator.migrate.compaction._due)."""

from __future__ import annotations

import pyarrow as pa

from catalog.schema import migration_type
from catalog.shard import BatchRef, ShardState
from orchestrator.migrate.compaction import compaction_due

S0 = pa.schema([pa.field("id", pa.int64())])
S1 = S0.append(pa.field("note", pa.string()))


def state(*schema_ids: int, sealed: bool = False) -> ShardState:
    return ShardState(
        "s",
        (migration_type(S0), migration_type(S1)),
        batches=tuple(BatchRef(f"b{i}", sid, 10, i, i + 1) for i, sid in enumerate(schema_ids)),
        upper=len(schema_ids),
        sealed=sealed,
    )


def test_long_lists_and_old_schema_batches_are_due() -> None:
    """Due: min_batches batches, or two or more with one under an old schema; never a sealed
    shard or a single batch."""
    assert compaction_due(state(1, 1, 1, 1), min_batches=4)
    assert not compaction_due(state(1, 1, 1), min_batches=4)
    assert compaction_due(state(0, 1), min_batches=64)
    assert not compaction_due(state(0), min_batches=64)
    assert not compaction_due(state(0, 1, 1, 1, 1, sealed=True), min_batches=4)
