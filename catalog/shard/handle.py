"""The shard handle: one shard's state in ZooKeeper and its batches in blob storage.

:class:`Shard` holds what every operation on a shard needs (its stores, its id, the CAS every
change goes through) and a :class:`~catalog.shard.rollups.Rollups` collaborator; reads, appends,
compaction and the end of life are functions of :mod:`catalog.shard.read`,
:mod:`~catalog.shard.append`, :mod:`~catalog.shard.compact` and :mod:`~catalog.shard.lifecycle`
that take the handle, and its methods of the same names call them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.blob import BlobInfo, BlobStore
from catalog.consensus import Check, Consensus, Fence
from catalog.environment import SHARDS_KEY
from catalog.errors import VersionMismatchError
from catalog.retry import CasRetry
from catalog.shard import append, compact, lifecycle, merges, read
from catalog.shard.compact import Work
from catalog.shard.keylog import KEY_RETENTION_SECONDS, KeyLog
from catalog.shard.ledger import WRITE_MEMORY, Carry, WriteLedger, WriteMark
from catalog.shard.ops import create_op, evolve_op
from catalog.shard.rollups import Rollups
from catalog.shard.state import (
    GC_GRACE_SECONDS,
    MAX_ROLLUPS,
    ROLLUP_THRESHOLD,
    AppendResult,
    BatchRef,
    CompactionResult,
    EvolveResult,
    Lease,
    ShardState,
    shard_error,
    shard_key,
)
from catalog.shard.stored import change_ops, read_states
from catalog.shard.writeid import is_keyed, key_prefix

log = structlog.get_logger(__name__)


@attrs.define
class Shard:
    """A handle on one shard: its state in ``consensus`` and its batches in ``blob``.

    Handles are cheap and hold no durable state (only a cache of immutable rollups); create one
    per thread or share one. ``rollup_threshold``, ``max_rollups`` and ``write_memory`` exist for
    tests; every writer of a shard should use the same values (any values are correct, only
    sizes, and how long a lost answer stays resolvable, differ).
    """

    consensus: Consensus
    blob: BlobStore
    shard_id: str
    retry: Callable[[], CasRetry] = CasRetry
    rollup_threshold: int = ROLLUP_THRESHOLD
    max_rollups: int = MAX_ROLLUPS
    write_memory: int = WRITE_MEMORY
    # How long keyed appends stay recognised (catalog.shard.keylog).
    key_retention: float = KEY_RETENTION_SECONDS
    rollups: Rollups = attrs.field(init=False)
    keys: KeyLog = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.rollups = Rollups(self.blob, self.shard_id)
        self.keys = KeyLog(self.blob, self.shard_id, self.key_retention)

    def find_write(self, writes: WriteLedger, write_id: str) -> WriteMark | None:
        """The mark of ``write_id`` in a state's ``writes``: in the ledger, or for a keyed id
        in the key log."""
        found = writes.find(write_id)
        if found is None and writes.segments and is_keyed(write_id):
            found = self.keys.find(writes.segments, key_prefix(write_id))
            if found is not None and found.id != write_id:
                return None
        return found

    def find_key(self, writes: WriteLedger, key_prefix: str) -> WriteMark | None:
        """The newest mark in a state's ``writes`` of an append made with the key of
        ``key_prefix`` (``k`` + 16 hex digits), whatever its body: in the ledger, else in the
        key log."""
        found = writes.find_key(key_prefix)
        if found is None and writes.segments:
            found = self.keys.find(writes.segments, key_prefix)
        return found

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    @property
    def log(self) -> Any:
        """A logger bound to this shard."""
        return log.bind(shard=self.shard_id)

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
            raise shard_error(
                f"shard {self.shard_id} already exists", self.shard_id, "exists"
            ) from exc
        self.log.info("shard_created", schema_fields=schema.names)
        return state

    def state(self) -> ShardState:
        """The current state; ShardError (reason ``not-found``) when the shard does not exist."""
        found = read_states(self.consensus, [self.shard_id])[self.shard_id]
        if found is None:
            raise shard_error(f"shard {self.shard_id} does not exist", self.shard_id, "not-found")
        return found

    def exists(self) -> bool:
        return self.consensus.exists(self.key)

    def batches(self, state: ShardState | None = None) -> list[BatchRef]:
        """Every batch of ``state`` (default: current), rolled-up ones first, in append order."""
        state = self.state() if state is None else state
        out: list[BatchRef] = []
        for rollup in state.rollups:
            out.extend(self.rollups.entries(rollup))
        out.extend(state.batches)
        return out

    def cas(
        self, old: ShardState, new: ShardState, fence: Fence | None, guards: Sequence[Check] = ()
    ) -> ShardState:
        """Write the change from ``old`` to ``new`` (only the halves it changes) with
        ``guards`` in one transaction; VersionMismatchError when either moved meanwhile."""
        ops, new = change_ops(old, new)
        if ops or guards:
            self.consensus.commit([*ops, *guards], fence=fence)
        return new

    def check_guards(self, guards: Sequence[Check]) -> None:
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
            raise shard_error(
                f"append to shard {self.shard_id} refused: {', '.join(moved)} changed",
                self.shard_id,
                "guard-moved",
                keys=moved,
            )

    def update(
        self, change: Callable[[ShardState], ShardState | None], fence: Fence | None
    ) -> ShardState:
        """Read, apply ``change`` (None: nothing to do), CAS; retried on lost races."""

        def attempt() -> ShardState:
            current = self.state()
            new = change(current)
            return current if new is None else self.cas(current, new, fence)

        return self.retry()(attempt)

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
                self.log.info("schema_evolved", schema_id=new.schema_id)
            return EvolveResult(True, new.schema_id, new.live_schema, new)

        return self.retry()(attempt)

    def packed(
        self, state: ShardState, batches: Sequence[BatchRef]
    ) -> tuple[ShardState, list[str]]:
        """``state`` listing exactly ``batches``, the older ones rolled up if there are many."""
        if len(batches) <= self.rollup_threshold:
            return attrs.evolve(state, batches=tuple(batches), rollups=()), []
        cut = ((len(batches) - 1) // self.rollup_threshold) * self.rollup_threshold
        rollup = self.rollups.write(batches[:cut])
        new = attrs.evolve(state, batches=tuple(batches[cut:]), rollups=(rollup,))
        return new, [rollup.key(self.shard_id)]

    # -- reads (catalog.shard.read) -------------------------------------------------------

    def snapshot(
        self,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        timeout: float | None = None,
        state: ShardState | None = None,
    ) -> pa.Table:
        """The contents as of ``as_of``, consolidated (:func:`catalog.shard.read.snapshot`)."""
        return read.snapshot(self, as_of, reader_schema, timeout=timeout, state=state)

    def snapshot_of(
        self,
        state: ShardState,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
    ) -> pa.Table:
        """:meth:`snapshot` of a state already read (:func:`catalog.shard.read.snapshot_of`)."""
        return read.snapshot_of(self, state, as_of, reader_schema)

    # -- appends (catalog.shard.append) ---------------------------------------------------

    #: Append a batch and move the upper, exactly once by its write id or its group's
    #: (:func:`catalog.shard.append.compare_and_append`, with this shard as its first argument).
    compare_and_append = append.compare_and_append

    def compare_and_append_batches(
        self,
        refs: Sequence[BatchRef],
        expected_upper: int,
        new_upper: int,
        *,
        fence: Fence | None = None,
        write_id: str | None = None,
        carry: Carry | None = None,
    ) -> AppendResult:
        """Append batches already written under this shard
        (:func:`catalog.shard.append.compare_and_append_batches`)."""
        return append.compare_and_append_batches(
            self, refs, expected_upper, new_upper, fence=fence, write_id=write_id, carry=carry
        )

    def advance_since(self, since: int, *, fence: Fence | None = None) -> ShardState:
        """Move ``since`` forward (:func:`catalog.shard.lifecycle.advance_since`)."""
        return lifecycle.advance_since(self, since, fence=fence)

    downgrade_since = advance_since

    def seal(self, *, fence: Fence | None = None) -> ShardState:
        """Refuse every further append (:func:`catalog.shard.lifecycle.seal`)."""
        return lifecycle.seal(self, fence=fence)

    # -- compaction (catalog.shard.compact) -----------------------------------------------

    def compact(
        self, *, fence: Fence | None = None, pacer: compact.Paced | None = None
    ) -> CompactionResult:
        """Merge every batch into one (:func:`catalog.shard.compact.compact`)."""
        return compact.compact(self, fence=fence, pacer=pacer)

    def merge(
        self,
        *,
        fence: Fence | None = None,
        turn: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
        work: Work | None = None,
    ) -> CompactionResult:
        """Merge the batches the write path's policy picks
        (:func:`catalog.shard.merges.merge_plan`) into one, concatenated (reads consolidate),
        its reading and writing run by ``work``, its commit inside ``turn``; ``applied`` is
        False when none were due (or another compaction replaced them first)."""
        return compact.compact(
            self, fence=fence, select=merges.merge_plan, turn=turn, consolidate=False, work=work
        )

    def commit_compaction(
        self,
        state: ShardState,
        inputs: Sequence[BatchRef],
        outputs: Sequence[BatchRef],
        *,
        fence: Fence | None = None,
    ) -> CompactionResult:
        """Replace ``inputs`` by ``outputs`` (:func:`catalog.shard.compact.commit_compaction`)."""
        return compact.commit_compaction(self, state, inputs, outputs, fence=fence)

    # -- end of life (catalog.shard.lifecycle) --------------------------------------------

    def finalize(self, *, fence: Fence | None = None, wait: float | None = 60.0) -> ShardState:
        """Seal, wait for leases, delete blobs, tombstone
        (:func:`catalog.shard.lifecycle.finalize`)."""
        return lifecycle.finalize(self, fence=fence, wait=wait)

    def discard(self, *, fence: Fence | None = None) -> None:
        """Delete a shard that never received a batch (:func:`catalog.shard.lifecycle.discard`)."""
        lifecycle.discard(self, fence=fence)

    def lease(
        self,
        holder: str = "",
        *,
        as_of: int | None = None,
        schema_id: int | None = None,
        state: ShardState | None = None,
    ) -> contextlib.AbstractContextManager[Lease]:
        """Hold a reader lease while the block runs (:func:`catalog.shard.lifecycle.lease`)."""
        return lifecycle.lease(self, holder, as_of=as_of, schema_id=schema_id, state=state)

    def held_since(self) -> int | None:
        """The lowest time a reader lease holds (:func:`catalog.shard.lifecycle.held_since`)."""
        return lifecycle.held_since(self)

    def leases(self) -> list[str]:
        """Keys of the current reader leases."""
        return lifecycle.leases(self)

    def referenced_keys(self, state: ShardState | None = None) -> set[str]:
        """Every blob key ``state`` references: batches, rollups."""
        return lifecycle.referenced_keys(self, state)

    def unreferenced_blobs(self) -> tuple[ShardState | None, list[BlobInfo]]:
        """The state and the blobs it does not reference
        (:func:`catalog.shard.lifecycle.unreferenced_blobs`)."""
        return lifecycle.unreferenced_blobs(self)

    def gc_orphans(self, *, grace_seconds: float = GC_GRACE_SECONDS) -> list[str]:
        """Delete unreferenced blobs older than the grace
        (:func:`catalog.shard.lifecycle.gc_orphans`)."""
        return lifecycle.gc_orphans(self, grace_seconds=grace_seconds)
