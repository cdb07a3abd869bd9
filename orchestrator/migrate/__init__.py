"""The read-only and leader migration algorithms of docs/design-upgrade.md.

A process runs ``check_read_only`` first (every process, leader or not), then, once elected,
``migrate_as_leader`` with its :class:`~orchestrator.election.Leadership`. The writes each makes:

read-only
    only migration-shard entries and shards keyed by its *own* ``(version, generation)``: a
    replacement or rewrite target found at exactly that key is reused, otherwise created and its
    entry compare-and-appended (racing processes of the same key converge on the winner's entry).
    Evolutions are checked against the shard's whole schema history; nothing else is written, so
    any other release, older ones included, can still start.

leader (every write carries the epoch check)
    1. the same replacement shards (plus shards for builtins new in this release);
    2. evolutions, first half: the *expansion* (the shard's latest schema plus the release's
       added fields) with the contraction it owes recorded in the same write; a schema already
       registered is reused; on a lost race re-read: same schema -> done, compatible -> retry,
       otherwise halt. Fields a newer release's crashed leader registered are kept, not
       deleted (:func:`registration_schema`), so that release can still start later;
    3. rewrite targets receive the delta of their source shard since the read-only copy;
    4. **one** transaction switches the catalog (version, generation, collection -> shard,
       fingerprints), queues the replaced and removed shards for finalization, so a crash
       can never leave a queued shard that the catalog still names, and records the upgrade as
       *pending* (:mod:`catalog.pending`): the release it came from may be promoted back
       (:mod:`orchestrator.migrate.rollback`) and nothing it needs is finalized;
    5. migration-shard entries of earlier versions (and of this version at lower generations)
       are retracted, and their shards queued for finalization unless the catalog names them;
    6. once finalized (``finalize``, the leader's ``--finalize-after`` timer, or at once with a
       window of 0: :mod:`orchestrator.migrate.finalization`), evolutions' second half: the
       recorded *contractions* (deletions, relaxed nullability) of that version, and the
       records of aborted upgrades to other versions dropped
       (:mod:`orchestrator.migrate.evolution`).

Every step is idempotent: a leader killed between any two writes is succeeded by a process that
re-plans from the durable state and completes the same work.

A read-only process killed between creating replacement shards and appending their entries
leaves shards nothing names. The serving leader collects them (:func:`collect_orphan_shards`,
after a grace period and only while no other process is checking): it seals and queues them
in one transaction conditioned on the catalog and the migration shard, and an entry append
is conditioned on its shards' versions, so no entry can ever name a collected shard."""

from __future__ import annotations

from orchestrator.migrate.cleanup import (
    ORPHAN_GRACE_SECONDS,
    collect_orphan_shards,
    finalize_pending,
    pending_finalization,
)
from orchestrator.migrate.compaction import COMPACT_MIN_BATCHES, compact_due
from orchestrator.migrate.context import (
    FINALIZE_AFTER_SECONDS,
    PHASE_CHECKING,
    PHASE_FINALIZING,
    PHASE_REPLACEMENTS,
    PHASE_REWRITE,
    PHASE_SCHEMAS,
    PHASE_SWITCH,
    CheckResult,
    LeaderResult,
    MigrationContext,
)
from orchestrator.migrate.durable import registration_schema
from orchestrator.migrate.finalization import (
    FinalizeAnswer,
    complete_finalization,
    finalization_due,
    request_finalization,
)
from orchestrator.migrate.frontiers import advance_frontiers
from orchestrator.migrate.garbage import GC_INTERVAL_SECONDS, collect_garbage
from orchestrator.migrate.leader import migrate_as_leader
from orchestrator.migrate.read_only import check_read_only

__all__ = [
    "COMPACT_MIN_BATCHES",
    "FINALIZE_AFTER_SECONDS",
    "GC_INTERVAL_SECONDS",
    "ORPHAN_GRACE_SECONDS",
    "PHASE_CHECKING",
    "PHASE_FINALIZING",
    "PHASE_REPLACEMENTS",
    "PHASE_REWRITE",
    "PHASE_SCHEMAS",
    "PHASE_SWITCH",
    "CheckResult",
    "FinalizeAnswer",
    "LeaderResult",
    "MigrationContext",
    "advance_frontiers",
    "check_read_only",
    "collect_garbage",
    "collect_orphan_shards",
    "compact_due",
    "complete_finalization",
    "finalization_due",
    "finalize_pending",
    "migrate_as_leader",
    "pending_finalization",
    "registration_schema",
    "request_finalization",
]
