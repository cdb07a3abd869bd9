"""What a migration runs with (the process's release, stores and retry) and what it reports."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.migration import MigrationShard
from catalog.pipeline.pacing import Pacer
from catalog.pipeline.spark.config import SparkConfig
from catalog.release import (
    Plan,
    Release,
    Version,
)
from catalog.retry import CasRetry
from catalog.shard import Shard
from orchestrator.drift import Drift

PHASE_CHECKING = "checking"


PHASE_REPLACEMENTS = "writing replacements"


PHASE_SCHEMAS = "registering schemas"


PHASE_REWRITE = "copying rewrites"


PHASE_SWITCH = "switching collections"


PHASE_FINALIZING = "finalizing"


#: The sidecar's default reversible window (``--finalize-after``): a day, so a bad release found
#: during a working day's soak, or by the next on-call shift, can still be rolled back.
FINALIZE_AFTER_SECONDS = 24 * 3600.0


def _no_phase(_phase: str) -> None:
    return None


def _nothing() -> None:
    return None


@attrs.frozen
class MigrationContext:
    """Everything a migration run needs; no global state."""

    consensus: Consensus
    blob: BlobStore
    release: Release
    deploy_generation: int
    process_id: str
    on_phase: Callable[[str], None] = _no_phase
    #: Called once the leader's catalog switch committed: the catalog names the shards this
    #: leader serves, so appends may go on while it finishes (retractions, a finalization
    #: decided already), as they go on during a serving leader's own finalization.
    on_switched: Callable[[], None] = _nothing
    retry: CasRetry = attrs.field(factory=CasRetry)
    # The engine of REWRITE copies (arrow, spark or auto) and how Spark runs, if it does.
    engine: str = "auto"
    spark: SparkConfig = attrs.field(factory=SparkConfig)
    #: The pace of long steps (REWRITE copies): progress, a rate limit, pauses.
    pacer: Pacer = attrs.field(factory=Pacer)
    #: How long an upgrade this leader switches stays reversible before it finalizes it by
    #: itself (seconds; None: only ``finalize`` does). 0 finalizes at once: what in-process
    #: callers (tests, tools) get; the sidecar's default is ``FINALIZE_AFTER_SECONDS``.
    finalize_after: float | None = 0.0
    #: A rollback: the release of the pending upgrade (its inverse transforms), and the
    #: collections whose rows written under it the operator chose to discard.
    rollback_from: Release | None = None
    discard_writes_to: frozenset[str] = frozenset()

    @property
    def version(self) -> Version:
        return self.release.version

    def shard(self, shard_id: str) -> Shard:
        return Shard(self.consensus, self.blob, shard_id)

    def migration_shard(self) -> MigrationShard:
        return MigrationShard(self.consensus, self.blob)


@attrs.frozen(hash=False)
class CheckResult:
    """Outcome of the read-only run (step 3 of docs/design-upgrade.md)."""

    bootstrap: bool
    catalog_version: str | None
    catalog_generation: int | None
    plan: Plan | None
    replacement_shards: Mapping[str, str] = attrs.field(factory=dict)
    release_version: str | None = None
    #: This process is the rollback of the pending upgrade (orchestrator.migrate.rollback).
    rollback: Any = None
    #: What is wrong with the environment whatever the release (orchestrator.drift).
    drifts: tuple[Drift, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The JSON the status ``plan`` field shows."""
        if self.rollback is not None:
            return {"bootstrap": False, **self.rollback.summary()}
        if self.bootstrap:
            return {"bootstrap": True, "from": None, "to": self.release_version}
        assert self.plan is not None
        counts: dict[str, int] = {}
        for m in self.plan.migrations:
            counts[m.mechanism.value] = counts.get(m.mechanism.value, 0) + 1
        return {
            "bootstrap": False,
            "from": self.catalog_version,
            "to": str(self.plan.to_version),
            "counts": counts,
            "new_builtins": [b.name for b in self.plan.new_builtins],
            "removed_builtins": [c.name for c in self.plan.removed_builtins],
            "migrations": [
                {
                    "name": m.name,
                    "global_id": m.global_id,
                    "mechanism": m.mechanism.value,
                    "shard_id": self.replacement_shards.get(m.global_id),
                }
                for m in self.plan.migrations
            ],
            "drift": [d.to_json() for d in self.drifts],
        }


@attrs.frozen(hash=False)
class LeaderResult:
    """What a leader run changed."""

    bootstrap: bool
    version: str
    deploy_generation: int
    evolved: tuple[str, ...] = ()
    replaced: Mapping[str, str] = attrs.field(factory=dict)
    queued_for_finalization: tuple[str, ...] = ()
    retracted_entries: int = 0
    seconds: float = 0.0
    #: The upgrade left pending (reversible) by this run, if any.
    pending: bool = False
    #: A rollback: the version rolled back from, and the collections whose rows were dropped.
    rolled_back_from: str | None = None
    rolled_back_from_generation: int | None = None
    discarded: tuple[str, ...] = ()
    #: The upgrade this run finalized (its version), if any.
    finalized: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pending": self.pending,
            "rolled_back_from": self.rolled_back_from,
            "discarded": list(self.discarded),
            "finalized": self.finalized,
            "bootstrap": self.bootstrap,
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "evolved": list(self.evolved),
            "replaced": dict(self.replaced),
            "queued_for_finalization": list(self.queued_for_finalization),
            "retracted_entries": self.retracted_entries,
            "seconds": round(self.seconds, 3),
        }
