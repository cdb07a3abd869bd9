"""A shard: an ordered schema history, Parquet batches of updates, and two frontiers.

ZooKeeper layout (keys relative to the environment root)::

    shards/<shard_id>             ShardState JSON (below): the whole state (format 1), or its
                                  head (format 2: schemas, flags, an owed contraction)
    shards/<shard_id>/batches     format 2: the body (batches, roll-ups, frontiers, write
                                  ledger); every change is a CAS on the versions of the halves
                                  it changes (catalog.shard.stored)
    shards/<shard_id>/l-<seq>     ephemeral reader leases ({"holder", "created", "holds",
                                  "schema_id": the schema the reader reads with, if named})

Blob layout (below the environment's blob URI)::

    shards/<shard_id>/<uuid>.parquet      one batch: the collection's columns, then _ts, _diff
    shards/<shard_id>/rollup-<uuid>.json  an immutable list of older batch entries (see below)

Rows are updates ``(row..., _ts uint64, _diff int64)``. ``upper`` is the write frontier: every
time below it is complete, appends name the upper they expect and the one they move it to.
``since`` is the read frontier: times below it may have been advanced to it by compaction, so a
snapshot needs ``since <= as_of < upper``.

Schemas are numbered 0, 1, 2...; each entry is the *migration type* of ``catalog.schema`` (the
live schema plus tombstones of deleted fields), so checking a new schema against the last entry
checks it against the whole history. A batch records the schema id it was written with and is
migrated lazily on read and compaction; data is never rewritten to register a schema.

Invariants:

* a blob is written before the CAS that references it; a failed CAS leaves an unreferenced blob
  that :meth:`Shard.gc_orphans` removes, never a dangling reference;
* the state stays far below ZooKeeper's 1 MB limit: batch entries are a few dozen bytes, and
  when more than :data:`ROLLUP_THRESHOLD` are inline they move into an immutable rollup blob that
  the state references by name;
* sealed shards take no appends; finalized shards take nothing and keep a tombstone state;
* every append records its identity in the state's write ledger in the same transaction
  (:mod:`catalog.shard.ledger`), so an append whose answer was lost is resolved by its id, never
  by comparing frontiers, and is applied exactly once.

Consolidation (snapshot and compaction) sums ``_diff`` over identical ``(row, _ts)`` and drops
zeros (``catalog.consolidate``). A snapshot goes by runs of one numeric key column when one
separates the rows (only rows sharing that key's value are compared), else by sorting; compaction
sorts (its output comes sorted and is marked ``ordered``); nested columns stand in as their
value ids (hash grouping only for small tables). :func:`consolidate` is re-exported here."""

from __future__ import annotations

from catalog.consolidate import DIFF, TS, consolidate
from catalog.shard.append import Rows, append_rows, with_updates
from catalog.shard.coverage import SchemaUse, ShardCoverage, shard_coverage
from catalog.shard.expansion import written_as
from catalog.shard.handle import Shard
from catalog.shard.keylog import KEY_RETENTION_SECONDS, KeyLog, KeySegment
from catalog.shard.ledger import WRITE_MEMORY, Carry, WriteLedger, WriteMark
from catalog.shard.listing import blob_prefix
from catalog.shard.merges import MERGE_FANOUT, SLOW_DOWN_BATCHES, STOP_BATCHES
from catalog.shard.ops import (
    clear_contraction_op,
    contract_op,
    create_op,
    evolve_op,
    expand_op,
    read_states,
)
from catalog.shard.origin import Origin
from catalog.shard.state import (
    GC_GRACE_SECONDS,
    LEASE_PREFIX,
    MAX_ROLLUPS,
    ROLLUP_THRESHOLD,
    AppendResult,
    BatchRef,
    CompactionResult,
    Contraction,
    EvolveResult,
    Lease,
    RollupRef,
    ShardState,
    body_key,
    find_schema_id,
    new_shard_id,
    shard_key,
    update_schema,
)
from catalog.shard.stored import change_ops, delete_ops, read_stored
from catalog.shard.updates import advance_times

__all__ = [
    "DIFF",
    "GC_GRACE_SECONDS",
    "KEY_RETENTION_SECONDS",
    "LEASE_PREFIX",
    "MAX_ROLLUPS",
    "MERGE_FANOUT",
    "ROLLUP_THRESHOLD",
    "SLOW_DOWN_BATCHES",
    "STOP_BATCHES",
    "TS",
    "WRITE_MEMORY",
    "AppendResult",
    "BatchRef",
    "Carry",
    "CompactionResult",
    "Contraction",
    "EvolveResult",
    "KeyLog",
    "KeySegment",
    "Lease",
    "Origin",
    "RollupRef",
    "Rows",
    "SchemaUse",
    "Shard",
    "ShardCoverage",
    "ShardState",
    "WriteLedger",
    "WriteMark",
    "advance_times",
    "append_rows",
    "blob_prefix",
    "body_key",
    "change_ops",
    "clear_contraction_op",
    "consolidate",
    "contract_op",
    "create_op",
    "delete_ops",
    "evolve_op",
    "expand_op",
    "find_schema_id",
    "new_shard_id",
    "read_states",
    "read_stored",
    "shard_coverage",
    "shard_key",
    "update_schema",
    "with_updates",
    "written_as",
]
