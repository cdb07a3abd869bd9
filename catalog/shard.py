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
zeros (``catalog.consolidate``). A snapshot goes by runs of one numeric key column when one
separates the rows (only rows sharing that key's value are compared), else by sorting; compaction
sorts (its output comes sorted and is marked ``ordered``); nested columns go by hash grouping
with value ids. :func:`consolidate` is re-exported here.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from kazoo.exceptions import NoNodeError

from catalog.blob import BlobStore
from catalog.consensus import (
    CONNECTION_ERRORS,
    CasRetry,
    Check,
    Consensus,
    Create,
    Delete,
    Fence,
    Op,
    SetData,
    decode_json,
    encode_json,
)
from catalog.consolidate import (
    DIFF,
    TS,
    consolidate,
    consolidate_hashed,
    consolidate_sorted,
    is_nested,
    is_sortable,
)
from catalog.errors import (
    ConnectionLostError,
    CorruptBlobError,
    ShardError,
    ShardFinalizedError,
    VersionMismatchError,
)
from catalog.schema import (
    check_reader,
    evolve,
    live_schema,
    migrate_batch,
    migration_preserves_order,
    migration_type,
    schema_diff,
    schema_from_bytes,
    schema_to_bytes,
)
from catalog.state import SHARDS_KEY

__all__ = [
    "DIFF",
    "GC_GRACE_SECONDS",
    "LEASE_PREFIX",
    "MAX_ROLLUPS",
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
    "blob_prefix",
    "consolidate",
    "create_op",
    "evolve_op",
    "new_shard_id",
    "read_states",
    "shard_key",
    "update_schema",
]

log = structlog.get_logger(__name__)

LEASE_PREFIX = "l-"
# Inline batch entries above this many are rolled up into a blob (an entry is ~80 bytes).
ROLLUP_THRESHOLD = 500
# Rollup references above this many are merged into one rollup.
MAX_ROLLUPS = 64
# Unreferenced blobs younger than this are left alone by gc_orphans: a writer may be between
# its blob write and its CAS.
GC_GRACE_SECONDS = 300.0
# A snapshot whose blobs vanished under it (compaction or rollup merge) re-reads this often.
_READ_ATTEMPTS = 5
_STATE_FORMAT = 1


def shard_key(shard_id: str) -> str:
    """The consensus key of a shard's state."""
    return f"{SHARDS_KEY}/{shard_id}"


def blob_prefix(shard_id: str) -> str:
    """The blob directory holding every batch and rollup of a shard."""
    return f"shards/{shard_id}"


def new_shard_id() -> str:
    """A fresh, unique shard id (32 hex digits)."""
    return uuid.uuid4().hex


def update_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a shard batch with collection schema ``schema``: its fields, _ts, _diff."""
    return pa.schema(
        [
            *schema,
            pa.field(TS, pa.uint64(), nullable=False),
            pa.field(DIFF, pa.int64(), nullable=False),
        ],
        metadata=schema.metadata,
    )


def _shard_error(message: str, shard_id: str, reason: str, **details: Any) -> ShardError:
    return ShardError(message, shard_id=shard_id, reason=reason, **details)


@attrs.frozen
class BatchRef:
    """One batch: blob ``name`` (``shards/<id>/<name>.parquet``), schema id, rows, time bounds.

    Every row has ``lower <= _ts < upper``. ``ordered``: the rows are sorted by all their columns
    in the batch's own schema (compaction output whose columns are all sortable); whether the
    order survives a migration is :meth:`ShardState.is_ordered_in`. ``consolidated``: no two
    rows share ``(row, _ts)`` and no diff is zero (compaction output), so a snapshot of this
    batch alone at a single time needs no consolidation pass.
    """

    name: str
    schema_id: int
    rows: int
    lower: int
    upper: int
    ordered: bool = False
    consolidated: bool = False

    def key(self, shard_id: str) -> str:
        return f"{blob_prefix(shard_id)}/{self.name}.parquet"

    def to_json(self) -> list[Any]:
        flags = int(self.ordered) | (int(self.consolidated) << 1)
        return [self.name, self.schema_id, self.rows, self.lower, self.upper, flags]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> BatchRef:
        name, schema_id, rows, lower, upper, flags = data
        return cls(
            name,
            int(schema_id),
            int(rows),
            int(lower),
            int(upper),
            ordered=bool(flags & 1),
            consolidated=bool(flags & 2),
        )


@attrs.frozen
class RollupRef:
    """An immutable blob ``shards/<id>/rollup-<name>.json`` holding older batch entries."""

    name: str
    batches: int
    rows: int
    lower: int
    upper: int

    def key(self, shard_id: str) -> str:
        return f"{blob_prefix(shard_id)}/rollup-{self.name}.json"

    def to_json(self) -> list[Any]:
        return [self.name, self.batches, self.rows, self.lower, self.upper]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> RollupRef:
        name, batches, rows, lower, upper = data
        return cls(name, int(batches), int(rows), int(lower), int(upper))


def _schemas_equal(a: tuple[pa.Schema, ...], b: tuple[pa.Schema, ...]) -> bool:
    return len(a) == len(b) and all(
        x.equals(y, check_metadata=True) for x, y in zip(a, b, strict=True)
    )


@attrs.frozen(hash=False)
class ShardState:
    """A shard's durable state. ``version`` is the znode version it was read at (not encoded).

    ``schemas`` are migration types (tombstones kept); ``batches`` are the inline batch entries
    and ``rollups`` the blobs holding older ones (:meth:`Shard.batches` resolves both).
    ``finalized`` with batches still listed means finalization is under way (no new leases);
    a finalized state without batches or rollups is the tombstone.
    """

    shard_id: str
    schemas: tuple[pa.Schema, ...] = attrs.field(eq=attrs.cmp_using(eq=_schemas_equal))
    batches: tuple[BatchRef, ...] = ()
    rollups: tuple[RollupRef, ...] = ()
    upper: int = 0
    since: int = 0
    sealed: bool = False
    finalized: bool = False
    version: int = attrs.field(default=-1, eq=False)

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    @property
    def schema_id(self) -> int:
        """The latest schema id."""
        return len(self.schemas) - 1

    @property
    def schema(self) -> pa.Schema:
        """The latest migration type (tombstones included)."""
        return self.schemas[-1]

    @property
    def live_schema(self) -> pa.Schema:
        """The latest live schema (what writers write and readers read by default)."""
        return live_schema(self.schemas[-1])

    def live(self, schema_id: int) -> pa.Schema:
        """The live schema registered as ``schema_id``; ShardError when unknown."""
        if not 0 <= schema_id < len(self.schemas):
            raise _shard_error(
                f"shard {self.shard_id} has no schema id {schema_id} (latest is {self.schema_id})",
                self.shard_id,
                "unknown-schema",
                schema_id=schema_id,
                latest_schema_id=self.schema_id,
            )
        return live_schema(self.schemas[schema_id])

    def is_ordered_in(self, batch: BatchRef, schema_id: int | None = None) -> bool:
        """Whether ``batch`` is still sorted once migrated to ``schema_id`` (default: latest)."""
        target = self.schema_id if schema_id is None else schema_id
        return batch.ordered and migration_preserves_order(
            self.live(batch.schema_id), self.live(target)
        )

    @property
    def batch_count(self) -> int:
        """Inline plus rolled-up batches."""
        return len(self.batches) + sum(r.batches for r in self.rollups)

    @property
    def row_count(self) -> int:
        """Stored update rows (before consolidation), inline plus rolled up."""
        return sum(b.rows for b in self.batches) + sum(r.rows for r in self.rollups)

    @property
    def is_tombstone(self) -> bool:
        return self.finalized and not self.batches and not self.rollups

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _STATE_FORMAT,
            "shard_id": self.shard_id,
            "schemas": [base64.b64encode(schema_to_bytes(s)).decode() for s in self.schemas],
            "batches": [b.to_json() for b in self.batches],
            "rollups": [r.to_json() for r in self.rollups],
            "upper": self.upper,
            "since": self.since,
            "sealed": self.sealed,
            "finalized": self.finalized,
        }

    def encode(self) -> bytes:
        """Compact JSON (schemas as base64 Arrow IPC)."""
        return encode_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, version: int = -1) -> ShardState:
        raw = decode_json(data)
        return cls(
            shard_id=raw["shard_id"],
            schemas=tuple(schema_from_bytes(base64.b64decode(s)) for s in raw["schemas"]),
            batches=tuple(BatchRef.from_json(b) for b in raw["batches"]),
            rollups=tuple(RollupRef.from_json(r) for r in raw["rollups"]),
            upper=int(raw["upper"]),
            since=int(raw["since"]),
            sealed=bool(raw["sealed"]),
            finalized=bool(raw["finalized"]),
            version=version,
        )


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
    schema: pa.Schema = attrs.field(eq=attrs.cmp_using(eq=lambda a, b: a.equals(b)))
    state: ShardState


@attrs.frozen
class CompactionResult:
    """Outcome of :meth:`Shard.compact`: ``applied`` False when another writer replaced the
    inputs first (the output blob was deleted again). ``outputs`` lists every output batch
    (:meth:`Shard.commit_compaction` may commit several); ``output`` is the only one, if one."""

    applied: bool
    inputs: int
    output: BatchRef | None
    state: ShardState
    outputs: tuple[BatchRef, ...] = ()


@attrs.frozen
class Lease:
    """A reader lease: an ephemeral znode that finalization waits for."""

    shard_id: str
    key: str
    holder: str


# --- ops for a caller's own transaction ------------------------------------------------------


def create_op(shard_id: str, schema: pa.Schema) -> tuple[Op, ShardState]:
    """The op creating shard ``shard_id`` with first schema ``schema`` (for a caller's multi-op).

    The ``shards`` container must exist. Raises SchemaIncompatibleError for an invalid schema.
    The returned state carries version 0, the version the create gives the znode.
    """
    state = ShardState(shard_id=shard_id, schemas=(migration_type(schema),), version=0)
    return Create(shard_key(shard_id), state.encode()), state


def evolve_op(state: ShardState, schema: pa.Schema) -> tuple[Op | None, ShardState]:
    """The CAS op registering live ``schema`` on top of ``state`` (read at ``state.version``).

    Returns ``(None, state)`` when ``schema`` is already the latest (nothing to write).
    Raises SchemaIncompatibleError (checked against the whole history, tombstones included)
    and ShardFinalizedError for a finalized shard. The op is a ``SetData`` on the shard key at
    ``state.version``: put many into one fenced ``Consensus.commit`` to evolve many shards in
    one transaction; a VersionMismatchError names the shard that moved. The returned state
    carries the version the op gives the znode.
    """
    if state.finalized:
        raise _finalized(state)
    mtype = evolve(state.schema, schema)
    if mtype.equals(state.schema, check_metadata=True):
        return None, state
    new = attrs.evolve(state, schemas=(*state.schemas, mtype), version=state.version + 1)
    return SetData(state.key, new.encode(), state.version), new


def read_states(consensus: Consensus, shard_ids: Sequence[str]) -> dict[str, ShardState | None]:
    """The states of many shards in one pipelined read (None for a shard that does not exist)."""
    found = consensus.get_many([shard_key(s) for s in shard_ids])
    out: dict[str, ShardState | None] = {}
    for shard_id in shard_ids:
        value = found[shard_key(shard_id)]
        out[shard_id] = None if value is None else ShardState.decode(value.value, value.version)
    return out


def _finalized(state: ShardState) -> ShardFinalizedError:
    what = "finalized" if state.finalized else "sealed"
    return ShardFinalizedError(
        f"shard {state.shard_id} is {what}: no more writes",
        shard_id=state.shard_id,
        reason=what,
    )


# --- consolidation ----------------------------------------------------------------------------


def advance_times(table: pa.Table, since: int) -> pa.Table:
    """``table`` with every ``_ts`` below ``since`` advanced to ``since``."""
    index = table.schema.get_field_index(TS)
    if since <= 0 or table.num_rows == 0:
        return table
    advanced = pc.max_element_wise(table.column(index), pa.scalar(since, pa.uint64()))
    return table.set_column(index, table.schema.field(index), advanced)


def _sort(table: pa.Table) -> tuple[pa.Table, bool]:
    """``table`` sorted by every column, or unchanged (False) when a column is not sortable."""
    if any(is_nested(f.type) for f in table.schema):
        return table, False
    try:
        return table.sort_by([(n, "ascending") for n in table.column_names]), True
    except pa.ArrowNotImplementedError:
        return table, False


def _already_consolidated(state: ShardState, batch: BatchRef, reader: pa.Schema) -> bool:
    """Whether ``batch`` read alone as ``reader`` is consolidated as it is stored.

    True for a consolidated batch at a single time whose migration to the reader drops nothing
    (dropping a column, at any depth, can make distinct rows equal).
    """
    return (
        batch.consolidated
        and batch.lower == batch.upper - 1
        and not schema_diff(state.live(batch.schema_id), reader)["dropped"]
    )


def _time_bounds(table: pa.Table) -> tuple[int, int]:
    bounds = pc.min_max(table.column(TS))
    return int(bounds["min"].as_py()), int(bounds["max"].as_py()) + 1


def _prepare_append(
    batch: pa.Table | pa.RecordBatch,
    live: pa.Schema,
    expected_upper: int,
    new_upper: int,
    shard_id: str,
) -> pa.Table:
    """Validate an appended batch against its schema and frontier; the batch as stored."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    names = table.column_names
    for column in (TS, DIFF):
        if column not in names:
            raise _shard_error(
                f"batch for shard {shard_id} has no {column} column",
                shard_id,
                "missing-column",
                column=column,
            )
    data_names = [n for n in names if n not in (TS, DIFF)]
    if data_names != live.names:
        raise _shard_error(
            f"batch columns {data_names} do not match the schema's {live.names}",
            shard_id,
            "columns-mismatch",
            expected=live.names,
            actual=data_names,
        )
    columns: list[pa.ChunkedArray] = []
    for field in live:
        column = table.column(field.name)
        if not column.type.equals(field.type):
            raise _shard_error(
                f"column {field.name} is {column.type}, the schema says {field.type}",
                shard_id,
                "type-mismatch",
                column=field.name,
                expected=str(field.type),
                actual=str(column.type),
            )
        if not field.nullable and column.null_count:
            raise _shard_error(
                f"column {field.name} is not nullable but has {column.null_count} nulls",
                shard_id,
                "null-in-non-null",
                column=field.name,
            )
        # Equal types may still differ in list element names; take the registered ones.
        columns.append(column.cast(field.type) if str(column.type) != str(field.type) else column)
    times, diffs = table.column(TS), table.column(DIFF)
    for column, name in ((times, TS), (diffs, DIFF)):
        if not pa.types.is_integer(column.type) or column.null_count:
            raise _shard_error(
                f"{name} must be a non-null integer column (got {column.type})",
                shard_id,
                "bad-update-column",
                column=name,
            )
    try:
        times = times.cast(pa.uint64())
        diffs = diffs.cast(pa.int64())
    except pa.ArrowInvalid as exc:
        raise _shard_error(
            f"{TS}/{DIFF} out of range: {exc}", shard_id, "bad-update-column", column=TS
        ) from exc
    stored = pa.Table.from_arrays([*columns, times, diffs], schema=update_schema(live))
    if stored.num_rows:
        lower, upper = _time_bounds(stored)
        if lower < expected_upper or upper > new_upper:
            raise _shard_error(
                f"rows at times [{lower}, {upper - 1}] fall outside "
                f"[{expected_upper}, {new_upper})",
                shard_id,
                "ts-out-of-range",
                expected_upper=expected_upper,
                new_upper=new_upper,
                min_ts=lower,
                max_ts=upper - 1,
            )
    return stored


# --- the shard handle ------------------------------------------------------------------------


@attrs.define
class Shard:
    """A handle on one shard: its state in ``consensus`` and its batches in ``blob``.

    Handles are cheap and hold no durable state (only a cache of immutable rollups); create one
    per thread or share one. ``rollup_threshold`` and ``max_rollups`` exist for tests; every
    writer of a shard should use the same values (any values are correct, only sizes differ).
    """

    consensus: Consensus
    blob: BlobStore
    shard_id: str
    retry: Callable[[], CasRetry] = CasRetry
    rollup_threshold: int = ROLLUP_THRESHOLD
    max_rollups: int = MAX_ROLLUPS
    _rollups: dict[str, tuple[BatchRef, ...]] = attrs.field(factory=dict, init=False)

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    @property
    def _log(self) -> Any:
        return log.bind(shard=self.shard_id)

    # -- state ------------------------------------------------------------------------------

    def create(
        self, schema: pa.Schema, *, fence: Fence | None = None, exist_ok: bool = False
    ) -> ShardState:
        """Create the shard with first schema ``schema`` (id 0), upper 0, since 0.

        With ``exist_ok`` an existing shard is returned as is; otherwise ShardError (reason
        ``exists``).
        """
        op, state = create_op(self.shard_id, schema)
        self.consensus.ensure(SHARDS_KEY)
        try:
            self.consensus.commit([op], fence=fence)
        except VersionMismatchError as exc:
            if exist_ok:
                return self.state()
            raise _shard_error(
                f"shard {self.shard_id} already exists", self.shard_id, "exists"
            ) from exc
        self._log.info("shard_created", schema_fields=schema.names)
        return state

    def state(self) -> ShardState:
        """The current state; ShardError (reason ``not-found``) when the shard does not exist."""
        found = self.consensus.get(self.key)
        if found is None:
            raise _shard_error(f"shard {self.shard_id} does not exist", self.shard_id, "not-found")
        return ShardState.decode(found.value, found.version)

    def exists(self) -> bool:
        return self.consensus.exists(self.key)

    def batches(self, state: ShardState | None = None) -> list[BatchRef]:
        """Every batch of ``state`` (default: current), rolled-up ones first, in append order."""
        state = self.state() if state is None else state
        out: list[BatchRef] = []
        for rollup in state.rollups:
            out.extend(self._rollup_entries(rollup))
        out.extend(state.batches)
        return out

    def _rollup_entries(self, rollup: RollupRef) -> tuple[BatchRef, ...]:
        cached = self._rollups.get(rollup.name)
        if cached is None:
            raw = decode_json(self.blob.get_bytes(rollup.key(self.shard_id)))
            cached = tuple(BatchRef.from_json(b) for b in raw["batches"])
            if len(cached) != rollup.batches:
                raise CorruptBlobError(
                    f"rollup {rollup.key(self.shard_id)} lists {len(cached)} batches, "
                    f"the state recorded {rollup.batches}",
                    key=rollup.key(self.shard_id),
                    reason="row-count",
                )
            self._rollups[rollup.name] = cached
        return cached

    def _write_rollup(self, entries: Sequence[BatchRef]) -> RollupRef:
        rollup = RollupRef(
            name=uuid.uuid4().hex,
            batches=len(entries),
            rows=sum(b.rows for b in entries),
            lower=min(b.lower for b in entries),
            upper=max(b.upper for b in entries),
        )
        body = encode_json({"shard_id": self.shard_id, "batches": [b.to_json() for b in entries]})
        self.blob.put_bytes(rollup.key(self.shard_id), body)
        self._rollups[rollup.name] = tuple(entries)
        return rollup

    def _cas(
        self, old: ShardState, new: ShardState, fence: Fence | None, guards: Sequence[Check] = ()
    ) -> ShardState:
        ops: list[Op] = [SetData(self.key, new.encode(), old.version), *guards]
        stat = self.consensus.commit(ops, fence=fence)[0]
        return attrs.evolve(new, version=stat.version)

    def _check_guards(self, guards: Sequence[Check]) -> None:
        """Raise ShardError (``guard-moved``) when a guard's key is gone or at another version."""
        if not guards:
            return
        found = self.consensus.get_many([g.key for g in guards])
        moved = []
        for guard in guards:
            current = found[guard.key]
            if current is None or (guard.version >= 0 and current.version != guard.version):
                moved.append(guard.key)
        if moved:
            raise _shard_error(
                f"append to shard {self.shard_id} refused: {', '.join(moved)} changed",
                self.shard_id,
                "guard-moved",
                keys=moved,
            )

    def _update(
        self, change: Callable[[ShardState], ShardState | None], fence: Fence | None
    ) -> ShardState:
        """Read, apply ``change`` (None: nothing to do), CAS; retried on lost races."""

        def attempt() -> ShardState:
            current = self.state()
            new = change(current)
            return current if new is None else self._cas(current, new, fence)

        return self.retry()(attempt)

    # -- schemas ----------------------------------------------------------------------------

    def compare_and_evolve_schema(
        self, expected_id: int, schema: pa.Schema, *, fence: Fence | None = None
    ) -> EvolveResult:
        """Register live ``schema`` as the next schema id if the latest id is ``expected_id``.

        Identical to the latest: ok, no write. Latest id differs: not ok, carrying the current
        id and schema. Incompatible with the history: SchemaIncompatibleError. Races with other
        writers that leave the latest id unchanged are retried internally.
        """

        def attempt() -> EvolveResult:
            current = self.state()
            if current.schema_id != expected_id:
                return EvolveResult(False, current.schema_id, current.live_schema, current)
            op, new = evolve_op(current, schema)
            if op is not None:
                self.consensus.commit([op], fence=fence)
                self._log.info("schema_evolved", schema_id=new.schema_id)
            return EvolveResult(True, new.schema_id, new.live_schema, new)

        return self.retry()(attempt)

    # -- writes -----------------------------------------------------------------------------

    def compare_and_append(
        self,
        batch: pa.Table | pa.RecordBatch,
        expected_upper: int,
        new_upper: int,
        *,
        schema_id: int | None = None,
        fence: Fence | None = None,
        guards: Sequence[Check] = (),
    ) -> AppendResult:
        """Append ``batch`` and move the upper from ``expected_upper`` to ``new_upper``.

        ``batch`` has the columns of the live schema ``schema_id`` (default: latest), in that
        order, plus ``_ts`` (uint64) and ``_diff`` (int64) anywhere; every ``_ts`` must lie in
        ``[expected_upper, new_upper)``. Invalid input raises ShardError (``reason`` says which
        rule) before anything is written; a sealed or finalized shard raises
        ShardFinalizedError. An upper mismatch is a result (``ok=False`` with the current
        upper), not an exception, like persist. The Parquet blob is written before the CAS;
        empty batches write no blob. Races that leave the upper unchanged (a schema evolution,
        a compaction) are retried internally. ``guards`` are version checks of other keys made
        in the same transaction: when one of them moved, ShardError (reason ``guard-moved``,
        with the ``keys``) is raised and nothing is appended.
        """
        if new_upper < expected_upper:
            raise _shard_error(
                f"new upper {new_upper} is below the expected upper {expected_upper}",
                self.shard_id,
                "upper-regression",
                expected_upper=expected_upper,
                new_upper=new_upper,
            )
        initial = self.state()
        if initial.sealed or initial.finalized:
            raise _finalized(initial)
        if initial.upper != expected_upper:
            return AppendResult(False, initial.upper, initial)
        schema_id = initial.schema_id if schema_id is None else schema_id
        stored = _prepare_append(
            batch, initial.live(schema_id), expected_upper, new_upper, self.shard_id
        )
        ref: BatchRef | None = None
        if stored.num_rows:
            lower, upper = _time_bounds(stored)
            ref = BatchRef(uuid.uuid4().hex, schema_id, stored.num_rows, lower, upper)
            self.blob.put_batch(ref.key(self.shard_id), stored)
        uncertain = False
        pending = [initial]
        replaced: list[str] = []

        def attempt() -> AppendResult:
            nonlocal uncertain
            current = pending.pop() if pending else self.state()
            if uncertain and ref is not None and ref in current.batches:
                return AppendResult(True, current.upper, current)  # our lost answer did land
            if current.sealed or current.finalized:
                raise _finalized(current)
            if current.upper != expected_upper:
                return AppendResult(False, current.upper, current)
            new, written, old_rollups = self._appended(current, ref, new_upper)
            try:
                result = self._cas(current, new, fence, guards)
            except VersionMismatchError:
                self.blob.delete_many(written)
                self._check_guards(guards)
                raise
            except ConnectionLostError:
                uncertain = True
                raise
            replaced[:] = old_rollups
            return AppendResult(True, new_upper, result)

        try:
            result = self.retry()(attempt)
        except BaseException:
            if ref is not None and not uncertain:
                self.blob.delete(ref.key(self.shard_id))
            raise
        if not result.ok and ref is not None and not uncertain:
            self.blob.delete(ref.key(self.shard_id))
        if result.ok:
            self.blob.delete_many(replaced)
            self._log.debug("appended", upper=result.upper, rows=stored.num_rows)
        return result

    def _appended(
        self, state: ShardState, ref: BatchRef | None, new_upper: int
    ) -> tuple[ShardState, list[str], list[str]]:
        """``state`` with ``ref`` appended (rolling entries up as needed).

        Returns the new state, the blobs written for it, and the blobs it no longer references.
        """
        inline = state.batches if ref is None else (*state.batches, ref)
        rollups = state.rollups
        written: list[str] = []
        replaced: list[str] = []
        if len(inline) > self.rollup_threshold:
            rollup = self._write_rollup(state.batches)
            written.append(rollup.key(self.shard_id))
            rollups = (*rollups, rollup)
            inline = () if ref is None else (ref,)
            if len(rollups) > self.max_rollups:
                merged = self._write_rollup([b for r in rollups for b in self._rollup_entries(r)])
                written.append(merged.key(self.shard_id))
                replaced = [r.key(self.shard_id) for r in rollups]
                rollups = (merged,)
        new = attrs.evolve(state, batches=inline, rollups=rollups, upper=new_upper)
        return new, written, replaced

    def _packed(
        self, state: ShardState, batches: Sequence[BatchRef]
    ) -> tuple[ShardState, list[str]]:
        """``state`` listing exactly ``batches``, the older ones rolled up if there are many."""
        if len(batches) <= self.rollup_threshold:
            return attrs.evolve(state, batches=tuple(batches), rollups=()), []
        cut = ((len(batches) - 1) // self.rollup_threshold) * self.rollup_threshold
        rollup = self._write_rollup(batches[:cut])
        new = attrs.evolve(state, batches=tuple(batches[cut:]), rollups=(rollup,))
        return new, [rollup.key(self.shard_id)]

    def advance_since(self, since: int, *, fence: Fence | None = None) -> ShardState:
        """Move ``since`` forward to ``since`` (never back; at most the upper)."""

        def change(state: ShardState) -> ShardState | None:
            if state.finalized:
                raise _finalized(state)
            if since <= state.since:
                return None
            if since > state.upper:
                raise _shard_error(
                    f"since {since} would pass the upper {state.upper}",
                    self.shard_id,
                    "since-beyond-upper",
                    since=since,
                    upper=state.upper,
                )
            return attrs.evolve(state, since=since)

        return self._update(change, fence)

    downgrade_since = advance_since

    def seal(self, *, fence: Fence | None = None) -> ShardState:
        """Refuse every further append (idempotent). Readers may still read."""

        def change(state: ShardState) -> ShardState | None:
            return None if state.sealed else attrs.evolve(state, sealed=True)

        state = self._update(change, fence)
        self._log.info("shard_sealed", upper=state.upper)
        return state

    def finalize(self, *, fence: Fence | None = None, wait: float | None = 60.0) -> ShardState:
        """Seal, refuse new leases, wait for existing leases to end, delete blobs, tombstone.

        Waiting uses a ZooKeeper child watch; ``wait`` bounds it (None: forever) and ShardError
        (reason ``leased``, with the holders) is raised on timeout, leaving the shard mid-way:
        calling finalize again completes it. Finalizing a tombstone is a no-op.
        """
        state = self.state()
        if state.is_tombstone:
            return state
        if not state.finalized:

            def mark(current: ShardState) -> ShardState | None:
                if current.finalized:
                    return None
                return attrs.evolve(current, sealed=True, finalized=True)

            self._update(mark, fence)
        self._wait_for_no_leases(wait)
        self.blob.delete_prefix(blob_prefix(self.shard_id))

        def tombstone(current: ShardState) -> ShardState | None:
            if current.is_tombstone:
                return None
            return attrs.evolve(current, batches=(), rollups=())

        state = self._update(tombstone, fence)
        self._log.info("shard_finalized", upper=state.upper)
        return state

    def discard(self, *, fence: Fence | None = None) -> None:
        """Delete a shard that never received a batch (an orphan of a lost race) entirely."""
        try:
            state = self.state()
        except ShardError:
            return
        if state.batch_count:
            raise _shard_error(
                f"shard {self.shard_id} holds {state.batch_count} batches: finalize it instead",
                self.shard_id,
                "not-empty",
            )
        self.consensus.commit([Delete(self.key, state.version)], fence=fence)
        self.blob.delete_prefix(blob_prefix(self.shard_id))
        self._log.info("shard_discarded")

    # -- watches ----------------------------------------------------------------------------

    def _wait_for_no_leases(self, wait: float | None) -> None:
        changed = threading.Event()
        deadline = None if wait is None else time.monotonic() + wait
        path = self.consensus.path(self.key)
        while True:
            changed.clear()  # before reading, so a change after the read is never missed
            try:
                children = self.consensus.client.get_children(
                    path, watch=lambda _event: changed.set()
                )
            except NoNodeError:
                return
            except CONNECTION_ERRORS as exc:
                raise ConnectionLostError(
                    f"ZooKeeper did not answer listing leases of {self.shard_id}"
                ) from exc
            leases = sorted(c for c in children if c.startswith(LEASE_PREFIX))
            if not leases:
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise _shard_error(
                    f"shard {self.shard_id} is still leased by {len(leases)} readers",
                    self.shard_id,
                    "leased",
                    leases=leases,
                )
            self._log.info("finalize_waiting_for_leases", leases=len(leases))
            changed.wait(remaining)

    def _wait_for_upper(self, as_of: int, timeout: float) -> ShardState:
        changed = threading.Event()
        deadline = time.monotonic() + timeout
        path = self.consensus.path(self.key)
        while True:
            changed.clear()
            try:
                data, stat = self.consensus.client.get(path, watch=lambda _event: changed.set())
            except NoNodeError as exc:
                raise _shard_error(
                    f"shard {self.shard_id} does not exist", self.shard_id, "not-found"
                ) from exc
            except CONNECTION_ERRORS as exc:
                raise ConnectionLostError(f"ZooKeeper did not answer for {self.shard_id}") from exc
            state = ShardState.decode(data, stat.version)
            if state.upper > as_of or state.finalized:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return state
            changed.wait(remaining)

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
        ShardError (reason ``compacted``). A finalized shard raises ShardFinalizedError.
        Batches replaced under the read (compaction) make it re-read the state; hold a
        :meth:`lease` to keep finalization away during long reads.
        """
        state = self.state()
        for _ in range(_READ_ATTEMPTS):
            if as_of is not None and as_of >= state.upper and timeout:
                state = self._wait_for_upper(as_of, timeout)
            try:
                return self._snapshot(state, as_of, reader_schema)
            except CorruptBlobError as exc:
                if exc.details.get("reason") != "missing":
                    raise
                current = self.state()
                if current.finalized:
                    raise _finalized(current) from exc
                if current.version == state.version:
                    raise
                self._log.info("snapshot_state_moved", version=current.version)
                state = current
        return self._snapshot(state, as_of, reader_schema)

    def snapshot_of(
        self,
        state: ShardState,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
    ) -> pa.Table:
        """:meth:`snapshot` of a state already read (no re-read, no wait, no retry).

        For read-then-CAS loops: the result is exactly the contents as of ``as_of`` (default
        ``state.upper - 1``) that a compare-and-append expecting ``state.upper`` builds on.
        """
        return self._snapshot(state, as_of, reader_schema)

    def _snapshot(
        self, state: ShardState, as_of: int | None, reader_schema: pa.Schema | None
    ) -> pa.Table:
        if state.finalized:
            raise _finalized(state)
        if reader_schema is None:
            reader = state.live_schema
        else:
            check_reader(state.schema, reader_schema)
            reader = reader_schema
        result_schema = update_schema(reader)
        if as_of is None:
            if state.upper == 0:
                return result_schema.empty_table()
            as_of = state.upper - 1
        if as_of >= state.upper:
            raise _shard_error(
                f"as_of {as_of} not yet complete: upper is {state.upper}",
                self.shard_id,
                "not-complete",
                as_of=as_of,
                upper=state.upper,
            )
        if as_of < state.since:
            raise _shard_error(
                f"as_of {as_of} is below since {state.since}: those times were compacted",
                self.shard_id,
                "compacted",
                as_of=as_of,
                since=state.since,
            )
        refs = [b for b in self.batches(state) if b.lower <= as_of]
        tables = self._load(state, refs, reader, as_of=as_of, times=False)
        if not tables:
            return result_schema.empty_table()
        merged = pa.concat_tables(tables)
        if len(refs) == 1 and _already_consolidated(state, refs[0], reader):
            consolidated = merged
        else:
            consolidated = consolidate(merged)
        times = pa.repeat(pa.scalar(as_of, pa.uint64()), consolidated.num_rows)
        columns = [*consolidated.columns[:-1], times, consolidated.column(DIFF)]
        return pa.Table.from_arrays(columns, schema=result_schema)

    def _load(
        self,
        state: ShardState,
        refs: Sequence[BatchRef],
        target: pa.Schema,
        *,
        as_of: int | None = None,
        times: bool = True,
    ) -> list[pa.Table]:
        """The batches ``refs``, read one schema id at a time and migrated to ``target``.

        Only the columns ``target`` keeps are read (a projection's dropped columns and deleted
        fields never leave the file); without ``times`` the tables have no ``_ts`` column.
        """
        by_schema: dict[int, list[BatchRef]] = {}
        for ref in refs:
            by_schema.setdefault(ref.schema_id, []).append(ref)
        out: list[pa.Table] = []
        for schema_id, group in sorted(by_schema.items()):
            source = state.live(schema_id)
            cut = as_of is not None and any(r.upper - 1 > as_of for r in group)
            carried = (TS, DIFF) if times or cut else (DIFF,)
            columns = [n for n in source.names if target.get_field_index(n) >= 0]
            table = self.blob.get_batches(
                [r.key(self.shard_id) for r in group],
                columns=[*columns, *carried],
                expected_rows=[r.rows for r in group],
            )
            if cut:
                table = table.filter(pc.less_equal(table.column(TS), pa.scalar(as_of, pa.uint64())))
                if not times:
                    table, carried = table.drop_columns([TS]), (DIFF,)
            migrated = migrate_batch(table, source, target, passthrough=carried, projection=True)
            assert isinstance(migrated, pa.Table)
            out.append(migrated)
        return out

    @contextlib.contextmanager
    def lease(self, holder: str = "") -> Iterator[Lease]:
        """Hold a reader lease while the block runs: finalization waits until it is released.

        Raises ShardFinalizedError when the shard is finalized (or being finalized). The lease
        is an ephemeral znode, so a reader that dies releases it with its session.
        """
        state = self.state()
        if state.finalized:
            raise _finalized(state)
        body = encode_json({"holder": holder, "created": time.time()})
        (path,) = self.consensus.commit(
            [Create(f"{self.key}/{LEASE_PREFIX}", body, ephemeral=True, sequence=True)]
        )
        key = self.consensus.key_of(path)
        try:
            # A finalizer that marked the shard before our create may have listed the leases
            # already: re-read (after a sync) and back off, so it never deletes under us.
            self.consensus.client.sync(self.consensus.path(self.key))
            current = self.state()
            if current.finalized:
                raise _finalized(current)
            yield Lease(shard_id=self.shard_id, key=key, holder=holder)
        finally:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                self.consensus.client.delete(self.consensus.path(key))

    def leases(self) -> list[str]:
        """Keys of the current reader leases."""
        return [
            f"{self.key}/{child}"
            for child in self.consensus.children(self.key)
            if child.startswith(LEASE_PREFIX)
        ]

    # -- maintenance ------------------------------------------------------------------------

    def compact(self, *, fence: Fence | None = None) -> CompactionResult:
        """Merge every batch into one, in the latest schema, times below since advanced.

        The output is consolidated; it is sorted and marked ``ordered`` when every column is
        sortable. The blob is written, then the state CAS replaces exactly the input batches;
        appends that landed meanwhile are kept. When the inputs were replaced by another
        compaction first, the output is deleted and ``applied`` is False.
        """
        state = self.state()
        if state.finalized:
            raise _finalized(state)
        inputs = self.batches(state)
        if not inputs:
            return CompactionResult(True, 0, None, state)
        target = state.live_schema
        tables = self._load(state, inputs, target)
        merged = advance_times(pa.concat_tables(tables), state.since)
        if all(is_sortable(f.type) for f in merged.schema if f.name != DIFF):
            merged, ordered = consolidate_sorted(merged), True
        else:
            merged, ordered = _sort(consolidate_hashed(merged))
        output: BatchRef | None = None
        if merged.num_rows:
            lower, upper = _time_bounds(merged)
            output = BatchRef(
                uuid.uuid4().hex,
                state.schema_id,
                merged.num_rows,
                lower,
                upper,
                ordered=ordered,
                consolidated=True,
            )
            self.blob.put_batch(output.key(self.shard_id), merged)
        result = self.commit_compaction(state, inputs, [output] if output else [], fence=fence)
        if result.applied:
            self._log.info("compacted", inputs=len(inputs), rows=merged.num_rows, ordered=ordered)
        return result

    def commit_compaction(
        self,
        state: ShardState,
        inputs: Sequence[BatchRef],
        outputs: Sequence[BatchRef],
        *,
        fence: Fence | None = None,
    ) -> CompactionResult:
        """Replace exactly ``inputs`` (batches of ``state``) by ``outputs``, already written.

        The second half of :meth:`compact`, public for compactions computed elsewhere (the
        Spark engine of ``catalog.pipeline``): ``outputs`` hold the inputs' consolidated
        contents in the latest schema of ``state``. Appends that landed meanwhile are kept;
        when the inputs were replaced first, the outputs are deleted and ``applied`` is False.
        """
        input_names = {b.name for b in inputs}
        output_names = {b.name for b in outputs}
        output_keys = [b.key(self.shard_id) for b in outputs]
        pending = [state]
        written: list[str] = []

        def attempt() -> ShardState | None:
            current = pending.pop() if pending else self.state()
            if current.finalized:
                raise _finalized(current)
            batches = self.batches(current)
            names = {b.name for b in batches}
            if output_names and output_names <= names:
                return current  # an earlier attempt landed although its answer was lost
            if not input_names <= names:
                return None
            kept = [b for b in batches if b.name not in input_names]
            new, rollup_keys = self._packed(current, [*outputs, *kept])
            try:
                result = self._cas(current, new, fence)
            except VersionMismatchError:
                self.blob.delete_many(rollup_keys)
                raise
            written[:] = [r.key(self.shard_id) for r in current.rollups]
            return result

        try:
            result = self.retry()(attempt)
        except ConnectionLostError:
            raise  # the outcome is unknown: the output may be referenced, gc_orphans decides
        except BaseException:
            self.blob.delete_many(output_keys)
            raise
        if result is None:
            self.blob.delete_many(output_keys)
            self._log.info("compaction_lost_race", inputs=len(inputs))
            return CompactionResult(False, len(inputs), None, self.state())
        self.blob.delete_many([b.key(self.shard_id) for b in inputs] + written)
        only = outputs[0] if len(outputs) == 1 else None
        return CompactionResult(True, len(inputs), only, result, tuple(outputs))

    def referenced_keys(self, state: ShardState | None = None) -> set[str]:
        """Every blob key ``state`` references: batches, rollups."""
        state = self.state() if state is None else state
        keys = {b.key(self.shard_id) for b in self.batches(state)}
        keys.update(r.key(self.shard_id) for r in state.rollups)
        return keys

    def gc_orphans(self, *, grace_seconds: float = GC_GRACE_SECONDS) -> list[str]:
        """Delete blobs below the shard's prefix that its state does not reference.

        Only blobs older than ``grace_seconds`` (a writer may be between blob write and CAS),
        temporary files of crashed writes included. Returns the deleted keys.
        """
        prefix = blob_prefix(self.shard_id)
        # List before reading the state: a blob committed after the read is younger than the
        # listing, so the grace period protects it.
        found = self.blob.list_info(prefix) + self.blob.list_temp(prefix)
        try:
            state: ShardState | None = self.state()
        except ShardError:
            state = None
        referenced = set() if state is None or state.finalized else self.referenced_keys(state)
        cutoff = time.time() - grace_seconds
        orphans = [i.key for i in found if i.key not in referenced and i.mtime <= cutoff]
        self.blob.delete_many(orphans)
        if orphans:
            self._log.info("orphans_deleted", count=len(orphans))
        return orphans
