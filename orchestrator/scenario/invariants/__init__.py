"""Safety invariants of an upgrade environment, checked from its durable state.

:class:`InvariantChecker` reads ZooKeeper (and the blob store) directly through ``catalog``
(consensus, state, shard, migration), never through the processes it checks, after every step
of a scenario or a simulated walk. Each invariant has a stable id:

``single-leader``
    an epoch names one leader forever; epochs never go back; at most one process node claims to
    serve as leader of the current epoch, and it is the one the epoch names.
``no-stale-write``
    a write acknowledged by a process that was no longer the epoch's leader when the write was
    sent (a zombie) -- reported by the caller through :meth:`InvariantChecker.stale_write`.
``read-only-writes-nothing``
    across a step without a takeover, nothing durable changes outside the keys read-only
    processes own: the catalog, the epoch, the promotion target, the states
    of shards the catalog references, and migration-shard entries other than their own
    ``(version, generation)``.
``replacement-agreement``
    processes of one ``(version, generation)`` that are ready name the same replacement shard
    per collection, that shard is the migration shard's one entry for it, and once that
    ``(version, generation)`` is the catalog's, the catalog names those shards.
``rows-never-lost``
    every acknowledged row of a collection is in the collection's current shard exactly once
    (rewrites transform rows, they never drop or duplicate them), unless a replacement dropped
    the collection's data since; no row appears that nobody wrote.
``releases-can-start``
    every release of the history not older than the catalog version, whose upgrade path from
    the catalog version the history itself allows, plans cleanly against the durable state
    (the catalog, fingerprints and every shard's whole schema history).
``referenced-not-finalized``
    shards named by the catalog or by a live migration entry exist and are not finalized; the
    catalog's shards are not sealed either.
``unreferenced-cleaned``
    (final check, after the leader's finalizer ran) every shard nobody references is finalized.

The plan of ``releases-can-start`` is rebuilt here from shard states rather than by calling the
orchestrator's own helper: an invariant must not share the code it checks."""

from __future__ import annotations

from orchestrator.scenario.invariants.checker import InvariantChecker
from orchestrator.scenario.invariants.view import (
    INVARIANTS,
    DurableView,
    TrackedRows,
    Violation,
    describe,
)

__all__ = [
    "INVARIANTS",
    "DurableView",
    "InvariantChecker",
    "TrackedRows",
    "Violation",
    "describe",
]
