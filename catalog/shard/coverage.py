"""Lazy-migration coverage of one shard: what each registered schema still holds.

Registering a schema never rewrites data: batches keep the schema id they were written with and
are migrated when read. So every old schema stays needed while a batch is stored under it or a
reader leases the shard to read with it; once neither holds, the old schema *can retire* (only
its migration type, tombstones included, stays in the history). Compaction moves every batch to
the latest schema, which is how old schemas retire (``compact --until-retired``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import attrs

from catalog.consensus import decode_json, decoding
from catalog.schema.diff import renamed_paths
from catalog.schema.lossless import narrower_paths
from catalog.shard.handle import Shard
from catalog.shard.state import ShardState

__all__ = ["RollupCounts", "SchemaUse", "ShardCoverage", "shard_coverage"]


@attrs.frozen
class SchemaUse:
    """What schema ``schema_id`` of a shard holds: stored batches and rows, leased readers."""

    schema_id: int
    batches: int = 0
    rows: int = 0
    readers: int = 0
    #: Dotted paths where this schema's type is narrower than the latest's (its batches are
    #: widened when read, until compaction rewrites them).
    narrower: tuple[str, ...] = ()
    #: Fields this schema names otherwise than the latest (``old.path -> new name``): its
    #: batches are stored under the old names, read under the new ones, until compaction.
    renamed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = attrs.asdict(self)
        out["narrower"] = list(self.narrower)
        out["renamed"] = list(self.renamed)
        return out


@attrs.frozen
class ShardCoverage:
    """Every registered schema of a shard with its use; the last one is the latest."""

    shard_id: str
    schemas: tuple[SchemaUse, ...]
    #: Old schema ids a release still writes with (the one a pending upgrade came from: it
    #: may be promoted back).
    writers: tuple[int, ...] = ()

    @property
    def latest_schema_id(self) -> int:
        return len(self.schemas) - 1

    @property
    def needed(self) -> tuple[int, ...]:
        """Schema ids still needed: the latest, and any old one holding data, readers or a
        release that may write with it."""
        latest = self.latest_schema_id
        return tuple(
            u.schema_id
            for u in self.schemas
            if u.schema_id == latest or u.batches or u.readers or u.schema_id in self.writers
        )

    @property
    def retirable(self) -> tuple[int, ...]:
        """Old schema ids nothing needs any more."""
        needed = set(self.needed)
        return tuple(u.schema_id for u in self.schemas if u.schema_id not in needed)

    @property
    def old_batches(self) -> int:
        """Batches stored under an old schema (what compaction would migrate)."""
        return sum(u.batches for u in self.schemas[:-1])

    @property
    def old_rows(self) -> int:
        return sum(u.rows for u in self.schemas[:-1])

    def to_json(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "latest_schema_id": self.latest_schema_id,
            "schemas": [u.to_json() for u in self.schemas],
            "needed": list(self.needed),
            "retirable": list(self.retirable),
            "old_batches": self.old_batches,
            "old_rows": self.old_rows,
        }


def reader_schemas(shard: Shard) -> Counter[int]:
    """How many current reader leases read with each schema id (leases that name none are
    not counted: they read the latest)."""
    found = shard.consensus.get_many(shard.leases())
    counts: Counter[int] = Counter()
    for key, value in found.items():
        if value is None:
            continue  # released meanwhile
        raw = decode_json(value.value, key)
        with decoding(key, "reader lease"):
            if raw.get("schema_id") is not None:
                counts[int(raw["schema_id"])] += 1
    return counts


# Per rollup name: batches and rows by schema id (rollups are immutable, so a summary computed
# once holds for as long as the rollup exists).
RollupCounts = MutableMapping[str, tuple[Counter[int], Counter[int]]]


def shard_coverage(
    shard: Shard,
    state: ShardState | None = None,
    *,
    readers: bool = True,
    rollup_counts: RollupCounts | None = None,
) -> ShardCoverage:
    """The coverage of ``shard`` at ``state`` (default: its current state); rolled-up batch
    entries are read from their blobs, or taken from ``rollup_counts`` (which learns the ones
    read); ``readers`` also lists its leases."""
    state = shard.state() if state is None else state
    batches: Counter[int] = Counter()
    rows: Counter[int] = Counter()
    for rollup in state.rollups:
        counted = rollup_counts.get(rollup.name) if rollup_counts is not None else None
        if counted is None:
            counted = (Counter(), Counter())
            for batch in shard.batches(attrs.evolve(state, batches=(), rollups=(rollup,))):
                counted[0][batch.schema_id] += 1
                counted[1][batch.schema_id] += batch.rows
            if rollup_counts is not None:
                rollup_counts[rollup.name] = counted
        batches.update(counted[0])
        rows.update(counted[1])
    for batch in state.batches:
        batches[batch.schema_id] += 1
        rows[batch.schema_id] += batch.rows
    leased = reader_schemas(shard) if readers and not state.finalized else Counter()
    latest = state.live_schema
    uses = tuple(
        SchemaUse(
            schema_id, batches[schema_id], rows[schema_id], leased[schema_id],
            narrower_paths(state.live(schema_id), latest) if batches[schema_id] else (),
            renamed_paths(state.live(schema_id), latest) if batches[schema_id] else (),
        )
        for schema_id in range(len(state.schemas))
    )  # fmt: skip
    return ShardCoverage(state.shard_id, uses)
