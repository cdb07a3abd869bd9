"""Compacting until old schemas retire: ``compact --until-retired``.

Lazy migration leaves batches under the schema they were written with; an old schema is needed
while any batch holds it (:mod:`catalog.shard.coverage`). Compaction rewrites a shard's batches
into its latest schema, so compacting every collection that holds data under an old schema
retires those schemas. Appends that land meanwhile under an old schema (an older release still
writing with its own) are caught by reading the coverage again: a collection is compacted again,
up to ``attempts`` times, until nothing is left under an old schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import structlog

from catalog.consensus import Consensus
from catalog.errors import BadInputError
from catalog.shard import CompactionResult, Shard, shard_coverage
from orchestrator.status.coverage import CollectionCoverage, read_coverage

__all__ = ["RetireOutcome", "compact_until_retired"]

log = structlog.get_logger(__name__)


@attrs.frozen
class RetireOutcome:
    """What compaction did for one collection: rows it moved off old schemas, passes made, and
    the coverage after it."""

    name: str
    rows_migrated: int
    passes: int
    after: CollectionCoverage

    @property
    def retired(self) -> bool:
        return self.after.migrated

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.name,
            "rows_migrated": self.rows_migrated,
            "passes": self.passes,
            "retired": self.retired,
            "retirable": list(self.after.coverage.retirable),
            "old_batches": self.after.coverage.old_batches,
        }


def compact_until_retired(
    consensus: Consensus,
    shard_of: Callable[[str], Shard],
    compact: Callable[[Shard], CompactionResult],
    *,
    collections: Sequence[str] = (),
    attempts: int = 3,
    on_start: Callable[[int, int], None] | None = None,
    on_done: Callable[[RetireOutcome], None] | None = None,
) -> list[RetireOutcome]:
    """Compact each collection (``collections``, default: every one holding data under an old
    schema) until nothing is stored under an old schema, or ``attempts`` passes were made.

    ``on_start`` hears the collections and old rows to move before any work; ``on_done`` each
    collection's outcome."""
    report = read_coverage(consensus, readers=False)
    if collections:
        unknown = sorted(set(collections) - {c.name for c in report.collections})
        if unknown:
            raise BadInputError(
                f"unknown collection(s) {', '.join(unknown)} (name them SCHEMA.NAME)",
                collections=unknown,
            )
        targets = [c for c in report.collections if c.name in collections]
    else:
        targets = list(report.pending)
    if on_start is not None:
        on_start(len(targets), sum(c.coverage.old_rows for c in targets))
    outcomes = []
    for item in targets:
        current, moved, passes = item, 0, 0
        while not current.migrated and passes < attempts:
            shard = shard_of(item.name)
            result = compact(shard)
            passes += 1
            if result.applied:
                moved += current.coverage.old_rows
            # Only this collection again (its shard as the catalog names it now).
            now = shard_coverage(shard_of(item.name), readers=False)
            current = CollectionCoverage(item.name, item.global_id, now)
        outcome = RetireOutcome(item.name, moved, passes, current)
        log.info("compacted_until_retired", **outcome.to_json())
        if on_done is not None:
            on_done(outcome)
        outcomes.append(outcome)
    return outcomes
