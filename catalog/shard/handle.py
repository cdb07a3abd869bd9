"""The shard handle: one shard's state in ZooKeeper and its batches in blob storage."""

from __future__ import annotations

from catalog.shard.compact import ShardCompaction
from catalog.shard.lifecycle import ShardLifecycle


class Shard(ShardCompaction, ShardLifecycle):
    """A handle on one shard: its state in ``consensus`` and its batches in ``blob``.

    Handles are cheap and hold no durable state (only a cache of immutable rollups); create one
    per thread or share one. ``rollup_threshold`` and ``max_rollups`` exist for tests; every
    writer of a shard should use the same values (any values are correct, only sizes differ).
    """

    __slots__ = ()
