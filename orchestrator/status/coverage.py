"""Lazy-migration coverage of an environment: for every collection, what each of its shard's
schemas still holds, which old schemas are still needed and which can retire.

While an upgrade is pending, the schema the release it came from writes with stays needed.
``status --coverage`` and ``/status?coverage`` show it, the serving leader exports it as
Prometheus gauges, and ``compact --until-retired`` compacts until a collection's old schemas
hold nothing. Reading it costs one pipelined read of the shard states, one lease listing per
collection, and the rollup blobs of shards that have them.
"""

from __future__ import annotations

from typing import Any

import attrs

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.pending import read_pending
from catalog.schema import fingerprint
from catalog.shard import Shard, ShardCoverage, read_states, shard_coverage
from catalog.shard.coverage import RollupCounts

__all__ = ["CollectionCoverage", "CoverageReport", "read_coverage"]


@attrs.frozen
class CollectionCoverage:
    """One collection's shard coverage."""

    name: str
    global_id: str
    coverage: ShardCoverage

    @property
    def migrated(self) -> bool:
        """Every stored batch is on the latest schema."""
        return self.coverage.old_batches == 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "global_id": self.global_id, **self.coverage.to_json()}


@attrs.frozen
class CoverageReport:
    """Every collection's coverage, by name."""

    collections: tuple[CollectionCoverage, ...] = ()

    @property
    def retirable(self) -> int:
        """Old schemas, over all collections, that nothing needs any more."""
        return sum(len(c.coverage.retirable) for c in self.collections)

    @property
    def pending(self) -> tuple[CollectionCoverage, ...]:
        """Collections with batches still stored under an old schema."""
        return tuple(c for c in self.collections if not c.migrated)

    def get(self, name: str) -> CollectionCoverage | None:
        return next((c for c in self.collections if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "collections": [c.to_json() for c in self.collections],
            "pending_collections": len(self.pending),
            "old_batches": sum(c.coverage.old_batches for c in self.collections),
            "old_rows": sum(c.coverage.old_rows for c in self.collections),
            "retirable_schemas": self.retirable,
        }


def read_coverage(
    consensus: Consensus, *, readers: bool = True, rollup_counts: RollupCounts | None = None
) -> CoverageReport:
    """The coverage of every collection the catalog names (empty before bootstrap).

    A process reading it again and again (the leader's metrics) passes the same
    ``rollup_counts``: each rollup blob is then read once, and forgotten once no shard lists it.
    """
    found = read_catalog(consensus)
    if found is None:
        return CoverageReport()
    catalog = found[0]
    pending = read_pending(consensus)
    previous = pending[0].previous.collections if pending is not None else {}
    blob = BlobStore.from_uri(catalog.blob_uri)
    refs = sorted(catalog.collections.values(), key=lambda ref: ref.name)
    states = read_states(consensus, [ref.shard_id for ref in refs])
    collections = []
    for ref in refs:
        state = states.get(ref.shard_id)
        if state is None:
            continue  # named but gone: status reports it
        shard = Shard(consensus, blob, ref.shard_id)
        coverage = shard_coverage(shard, state, readers=readers, rollup_counts=rollup_counts)
        before = previous.get(ref.global_id)
        if before is not None and before.shard_id == ref.shard_id:
            # The release the pending upgrade came from writes with its own schema id.
            writers = tuple(
                i for i in range(len(state.schemas))
                if fingerprint(state.live(i)) == before.fingerprint
            )  # fmt: skip
            coverage = attrs.evolve(coverage, writers=writers)
        collections.append(CollectionCoverage(ref.name, ref.global_id, coverage))
    if rollup_counts is not None:
        listed = {r.name for state in states.values() if state is not None for r in state.rollups}
        for name in set(rollup_counts) - listed:
            del rollup_counts[name]
    return CoverageReport(tuple(collections))
