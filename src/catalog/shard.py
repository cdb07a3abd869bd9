"""A shard: an ordered schema history, Parquet batches of updates, and two frontiers.

ZooKeeper layout (keys relative to the environment root)::

    shards/<shard_id>             ShardState JSON (below); every change is a CAS on its version
    shards/<shard_id>/l-<seq>     ephemeral reader leases ({"holder", "created"})

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
* sealed shards take no appends; finalized shards take nothing and keep a tombstone state.

Consolidation (snapshot and compaction) sums ``_diff`` over identical ``(row, _ts)`` and drops
zeros, vectorized with ``Table.group_by``. Arrow cannot group on nested columns, so each nested
column is first replaced by a dense int64 *value id* (equal values, equal ids) built bottom-up:
primitive leaves are dictionary-encoded, structs combine their children's ids, lists become the
binary string of their elements' ids; the representative row of each group is then taken back
from the input by index. See :func:`consolidate`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import attrs
import pyarrow as pa

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence, Op

__all__ = [
    "DIFF",
    "ROLLUP_THRESHOLD",
    "TS",
    "AppendResult",
    "BatchRef",
    "CompactionResult",
    "EvolveResult",
    "Lease",
    "RollupRef",
    "Shard",
    "ShardState",
    "advance_times",
    "consolidate",
    "create_op",
    "evolve_op",
    "new_shard_id",
    "read_states",
    "shard_key",
    "update_schema",
]

TS = "_ts"
DIFF = "_diff"
# Inline batch entries above this many are rolled up into a blob (an entry is ~80 bytes).
ROLLUP_THRESHOLD = 500
# Rollup references above this many are merged into one rollup.
MAX_ROLLUPS = 64
# Unreferenced blobs younger than this are left alone by gc_orphans: a writer may be between
# its blob write and its CAS.
GC_GRACE_SECONDS = 300.0


def shard_key(shard_id: str) -> str:
    """The consensus key of a shard's state."""
    raise NotImplementedError


def new_shard_id() -> str:
    """A fresh, unique shard id."""
    raise NotImplementedError


def update_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a shard batch with collection schema ``schema``: its fields, _ts, _diff."""
    raise NotImplementedError


@attrs.frozen
class BatchRef:
    """One batch: blob ``name`` (``shards/<id>/<name>.parquet``), schema id, rows, time bounds.

    Every row has ``lower <= _ts < upper``. ``ordered``: the rows are sorted by all their columns
    in the batch's own schema (compaction output whose columns are all sortable).
    """

    name: str
    schema_id: int
    rows: int
    lower: int
    upper: int
    ordered: bool = False

    def key(self, shard_id: str) -> str:
        raise NotImplementedError


@attrs.frozen
class RollupRef:
    """An immutable blob ``shards/<id>/rollup-<name>.json`` holding older batch entries."""

    name: str
    batches: int
    rows: int
    lower: int
    upper: int

    def key(self, shard_id: str) -> str:
        raise NotImplementedError


@attrs.frozen
class ShardState:
    """A shard's durable state. ``version`` is the znode version it was read at (not encoded).

    ``schemas`` are migration types (tombstones kept); ``batches`` are the inline batch entries
    and ``rollups`` the blobs holding older ones (:meth:`Shard.batches` resolves both).
    ``finalized`` with batches still listed means finalization is under way (no new leases);
    a finalized state without batches or rollups is the tombstone.
    """

    shard_id: str
    schemas: tuple[pa.Schema, ...]
    batches: tuple[BatchRef, ...] = ()
    rollups: tuple[RollupRef, ...] = ()
    upper: int = 0
    since: int = 0
    sealed: bool = False
    finalized: bool = False
    version: int = attrs.field(default=-1, eq=False)

    @property
    def schema_id(self) -> int:
        """The latest schema id."""
        raise NotImplementedError

    @property
    def schema(self) -> pa.Schema:
        """The latest migration type (tombstones included)."""
        raise NotImplementedError

    @property
    def live_schema(self) -> pa.Schema:
        """The latest live schema (what writers write and readers read by default)."""
        raise NotImplementedError

    def live(self, schema_id: int) -> pa.Schema:
        """The live schema registered as ``schema_id``; ShardError when unknown."""
        raise NotImplementedError

    @property
    def batch_count(self) -> int:
        """Inline plus rolled-up batches."""
        raise NotImplementedError

    @property
    def is_tombstone(self) -> bool:
        raise NotImplementedError

    def encode(self) -> bytes:
        """Compact JSON (schemas as base64 Arrow IPC)."""
        raise NotImplementedError

    @classmethod
    def decode(cls, data: bytes, version: int = -1) -> ShardState:
        raise NotImplementedError


@attrs.frozen
class AppendResult:
    """Outcome of :meth:`Shard.compare_and_append`.

    ``ok``: the batch is durable and ``upper`` is the new upper. Otherwise the shard's upper was
    not ``expected_upper``: nothing was written and ``upper`` is the current one (persist's
    ``UpperMismatch``); re-read, and retry with it if appropriate.
    """

    ok: bool
    upper: int
    state: ShardState


@attrs.frozen
class EvolveResult:
    """Outcome of :meth:`Shard.compare_and_evolve_schema`.

    ``ok``: ``schema_id`` now holds the requested schema (new, or already there when the latest
    schema was identical). Otherwise the latest id was not the expected one: ``schema_id`` and
    ``schema`` (live) are the current latest, and nothing was written.
    """

    ok: bool
    schema_id: int
    schema: pa.Schema
    state: ShardState


@attrs.frozen
class CompactionResult:
    """Outcome of :meth:`Shard.compact`: ``applied`` False when another writer replaced the
    inputs first (the output blob was deleted again)."""

    applied: bool
    inputs: int
    output: BatchRef | None
    state: ShardState


@attrs.frozen
class Lease:
    """A reader lease: an ephemeral znode that finalization waits for."""

    shard_id: str
    key: str
    holder: str


def create_op(shard_id: str, schema: pa.Schema) -> tuple[Op, ShardState]:
    """The op creating shard ``shard_id`` with first schema ``schema`` (for a caller's multi-op).

    The ``shards`` container must exist. Raises SchemaIncompatibleError for an invalid schema.
    """
    raise NotImplementedError


def evolve_op(state: ShardState, schema: pa.Schema) -> tuple[Op | None, ShardState]:
    """The CAS op registering live ``schema`` on top of ``state`` (read at ``state.version``).

    Returns ``(None, state)`` when ``schema`` is already the latest (nothing to write).
    Raises SchemaIncompatibleError (checked against the whole history, tombstones included)
    and ShardFinalizedError for a finalized shard. The op is a ``SetData`` on the shard key at
    ``state.version``: put many into one fenced ``Consensus.commit`` to evolve many shards in
    one transaction; a VersionMismatchError names the shard that moved.
    """
    raise NotImplementedError


def read_states(consensus: Consensus, shard_ids: Sequence[str]) -> dict[str, ShardState | None]:
    """The states of many shards in one pipelined read (None for a shard that does not exist)."""
    raise NotImplementedError


def advance_times(table: pa.Table, since: int) -> pa.Table:
    """``table`` with every ``_ts`` below ``since`` advanced to ``since``."""
    raise NotImplementedError


def consolidate(table: pa.Table) -> pa.Table:
    """Sum ``_diff`` over identical ``(columns..., _ts)`` and drop rows whose sum is zero.

    Works for any column types, nested included (see the module docstring); the output keeps
    the input's schema, with one row per distinct ``(row, _ts)``, in no particular order.
    """
    raise NotImplementedError


@attrs.define
class Shard:
    """A handle on one shard: its state in ``consensus`` and its batches in ``blob``."""

    consensus: Consensus
    blob: BlobStore
    shard_id: str
    _rollup_cache: dict[str, tuple[BatchRef, ...]] = attrs.field(factory=dict, init=False)

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    # -- state ------------------------------------------------------------------------------

    def create(
        self, schema: pa.Schema, *, fence: Fence | None = None, exist_ok: bool = False
    ) -> ShardState:
        """Create the shard with first schema ``schema`` (id 0), upper 0, since 0.

        With ``exist_ok`` an existing shard is returned as is; otherwise ShardError (reason
        ``exists``).
        """
        raise NotImplementedError

    def state(self) -> ShardState:
        """The current state; ShardError (reason ``not-found``) when the shard does not exist."""
        raise NotImplementedError

    def exists(self) -> bool:
        raise NotImplementedError

    def batches(self, state: ShardState | None = None) -> list[BatchRef]:
        """Every batch of ``state`` (default: current), rolled-up ones first, in append order."""
        raise NotImplementedError

    # -- schemas ----------------------------------------------------------------------------

    def compare_and_evolve_schema(
        self, expected_id: int, schema: pa.Schema, *, fence: Fence | None = None
    ) -> EvolveResult:
        """Register live ``schema`` as the next schema id if the latest id is ``expected_id``.

        Identical to the latest: ok, no write. Latest id differs: not ok, carrying the current
        id and schema. Incompatible with the history: SchemaIncompatibleError. Races with other
        writers that leave the latest id unchanged are retried internally.
        """
        raise NotImplementedError

    # -- writes -----------------------------------------------------------------------------

    def compare_and_append(
        self,
        batch: pa.Table | pa.RecordBatch,
        expected_upper: int,
        new_upper: int,
        *,
        schema_id: int | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        """Append ``batch`` and move the upper from ``expected_upper`` to ``new_upper``.

        ``batch`` has the columns of the live schema ``schema_id`` (default: latest), in that
        order, plus ``_ts`` (uint64) and ``_diff`` (int64) anywhere; every ``_ts`` must lie in
        ``[expected_upper, new_upper)``. Invalid input raises ShardError (``reason`` says which
        rule) before anything is written; a sealed or finalized shard raises
        ShardFinalizedError. An upper mismatch is a result (``ok=False`` with the current
        upper), not an exception, like persist. The Parquet blob is written before the CAS;
        empty batches write no blob.
        """
        raise NotImplementedError

    def advance_since(self, since: int, *, fence: Fence | None = None) -> ShardState:
        """Move ``since`` forward to ``since`` (never back; at most the upper)."""
        raise NotImplementedError

    downgrade_since = advance_since

    def seal(self, *, fence: Fence | None = None) -> ShardState:
        """Refuse every further append (idempotent). Readers may still read."""
        raise NotImplementedError

    def finalize(self, *, fence: Fence | None = None, wait: float | None = 60.0) -> ShardState:
        """Seal, refuse new leases, wait for existing leases to end, delete blobs, tombstone.

        Waiting uses a ZooKeeper child watch; ``wait`` bounds it (None: forever) and ShardError
        (reason ``leased``, with the holders) is raised on timeout, leaving the shard mid-way:
        calling finalize again completes it. Finalizing a tombstone is a no-op.
        """
        raise NotImplementedError

    def discard(self, *, fence: Fence | None = None) -> None:
        """Delete a shard that never received a batch (an orphan of a lost race) entirely."""
        raise NotImplementedError

    # -- reads ------------------------------------------------------------------------------

    def snapshot(
        self,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        timeout: float | None = None,
    ) -> pa.Table:
        """The shard's contents as of ``as_of`` (default: ``upper - 1``), consolidated.

        Columns: ``reader_schema`` (default: the latest live schema), then ``_ts`` and
        ``_diff``. Every returned row has ``_ts == as_of`` and a non-zero ``_diff``: times at or
        below ``as_of`` are indistinguishable in a snapshot, so they are collapsed. A reader
        schema that is not a projection of the shard's latest schema raises ReaderFencedError.
        ``as_of >= upper`` raises ShardError (reason ``not-complete``) at once, or after waiting
        up to ``timeout`` seconds (a data watch, not polling); ``as_of < since`` raises
        ShardError (reason ``compacted``).
        """
        raise NotImplementedError

    @contextlib.contextmanager
    def lease(self, holder: str = "") -> Iterator[Lease]:
        """Hold a reader lease while the block runs: finalization waits until it is released.

        Raises ShardFinalizedError when the shard is finalized (or being finalized).
        """
        raise NotImplementedError
        yield  # pragma: no cover

    def leases(self) -> list[str]:
        """Keys of the current reader leases."""
        raise NotImplementedError

    # -- maintenance ------------------------------------------------------------------------

    def compact(self, *, fence: Fence | None = None) -> CompactionResult:
        """Merge every batch into one, in the latest schema, times below since advanced.

        The output is consolidated; it is sorted and marked ``ordered`` when every column is
        sortable. The blob is written, then the state CAS replaces exactly the input batches;
        appends that landed meanwhile are kept. When the inputs were replaced by another
        compaction first, the output is deleted and ``applied`` is False.
        """
        raise NotImplementedError

    def gc_orphans(self, *, grace_seconds: float = GC_GRACE_SECONDS) -> list[str]:
        """Delete blobs below the shard's prefix that its state does not reference.

        Only blobs older than ``grace_seconds`` (a writer may be between blob write and CAS).
        Returns the deleted keys.
        """
        raise NotImplementedError

    def referenced_keys(self, state: ShardState | None = None) -> set[str]:
        """Every blob key ``state`` references: batches, rollups."""
        raise NotImplementedError


