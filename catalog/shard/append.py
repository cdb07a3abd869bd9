"""Appending to a shard, exactly once: from the rows a writer holds to the compare-and-set.

An append, followed down this module:

1. :func:`append_rows` is a writer's entry (the sidecar's group commit, the migration shard).
   It takes :class:`Rows`, a function that derives them from the state read, or the writer's
   :class:`Attempts`: the rows for each state read (a group commit leaves out the members the
   state already holds) and what the writer does around each attempt.
2. Each attempt reads the state, or takes the one the caller holds (``known``). It first looks
   the write's identity up in the write ledger: a write that landed is answered as it landed and
   nothing is written.
3. The rows are derived for that state: fitted to the schema they are written under
   (:func:`catalog.shard.expansion.written_as`), given the update columns at the upper,
   checked against the schema and the frontiers (:func:`~catalog.shard.updates.checked_batch`),
   and written as one Parquet
   blob (:class:`_Batches`).
4. The new state lists the blob (rolling entries up as needed) and records the write's marks in
   the ledger, one per member of a group (:func:`_recorded`). One compare-and-set writes it,
   with the caller's fence and guards.
5. One retry loop runs the attempts (:class:`_Append`). A lost race re-reads and derives again,
   deleting what the refused attempt wrote. A lost connection leaves the outcome unknown: the
   next attempt resolves it by the identity, and reports WriteOutcomeUnknownError when the
   ledger no longer covers the upper the lost attempt expected.

:func:`compare_and_append` and :func:`compare_and_append_batches` are the same loop for a batch
at fixed frontiers (a copy, a carry): an upper that moved is a result (``ok=False``), like
persist, not a retry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import pyarrow as pa

from catalog.consensus import Check, Fence
from catalog.consolidate import DIFF, TS, repeated
from catalog.errors import (
    ConnectionLostError,
    VersionMismatchError,
    WriteOutcomeUnknownError,
)
from catalog.retry import CasRetry
from catalog.shard.expansion import written_as
from catalog.shard.ledger import Carry, WriteMark, record
from catalog.shard.listing import BatchListing
from catalog.shard.ops import finalized_error
from catalog.shard.shard_access import ShardAccess
from catalog.shard.state import AppendResult, BatchRef, ShardState, shard_error
from catalog.shard.updates import checked_batch, time_bounds
from catalog.shard.writeid import fresh as fresh_write_id

__all__ = [
    "Attempts",
    "Rows",
    "append_rows",
    "compare_and_append",
    "compare_and_append_batches",
    "listed",
    "with_updates",
]


@attrs.frozen
class Rows:
    """What one attempt appends: ``table`` (the data columns, in ``schema``'s order; None:
    the latest live schema's), each with ``diff``, and ``guards`` checked in the same
    transaction. ``group``: a group commit's appends, ``(write id, rows)`` each, whose rows
    ``table`` holds in that order; each is recorded with its own mark, all in one commit (the
    caller, who builds the group per attempt, recognises members that landed already).
    ``schema_id``: the table is already as written under that registered schema (see
    :func:`~catalog.shard.expansion.written_as`, which a group commit applies member by
    member)."""

    table: pa.Table
    schema: pa.Schema | None = None
    schema_id: int | None = None
    diff: int = 1
    guards: Sequence[Check] = ()
    group: Sequence[tuple[str, int]] = ()


@runtime_checkable
class Attempts(Protocol):
    """A writer's part in each attempt of :func:`append_rows`, as one value: the rows to write
    for the state read (None: nothing left to write), and what it does around the attempt."""

    def rows(self, state: ShardState) -> Rows | None:
        """What to write on ``state`` (the members it does not hold yet)."""

    def before_read(self) -> None:
        """Before the attempt reads the state (a leader checks its lease)."""

    def before_send(self) -> None:
        """Before the attempt sends its compare-and-set (a leader checks its lease again)."""

    def on_unknown(self) -> None:
        """The attempt's answer was lost: what a later attempt finds may be its own write."""


def with_updates(table: pa.Table, ts: int, diff: int) -> pa.Table:
    """``table`` with the update columns: every row at time ``ts`` with ``diff``."""
    rows = table.num_rows
    times = repeated(ts, pa.uint64(), rows)
    diffs = repeated(diff, pa.int64(), rows)
    return table.append_column(pa.field(TS, pa.uint64(), nullable=False), times).append_column(
        pa.field(DIFF, pa.int64(), nullable=False), diffs
    )


# -- the entries ---------------------------------------------------------------------------


def append_rows(
    shard: ShardAccess,
    rows: Rows | Callable[[ShardState], Rows | None] | Attempts,
    *,
    fence: Fence | None = None,
    write_id: str | None = None,
    retry: Callable[[], Callable[..., AppendResult]] = CasRetry,
    known: ShardState | None = None,
) -> AppendResult:
    """Append ``rows`` (or what ``rows(state)``, or the writer's :meth:`Attempts.rows`,
    returns for the state read) at the upper.

    None from them means nothing to write: the result is ok, at the current upper, with no
    mark. The writer's :class:`Attempts` also hears each attempt: before it reads the state,
    before it sends the compare-and-set (a leader's lease check), and when its answer was lost
    (what a later attempt finds may then be that attempt's own write). ``retry`` runs the
    attempts (its retryable errors: a lost race, a lost connection). A result's ``replayed``
    says that ``write_id`` had landed before this call (a retry of a request answered
    earlier); an attempt of this call whose answer was lost and that a later attempt finds is
    this call's own write, not a replay. ``known``: a state the caller holds (the one its own
    last commit left, when it is the shard's only writer); the first attempt uses it instead of
    reading, and a stale one costs a refused compare-and-set and a re-read.
    """
    # What each attempt writes, settled once (not asked again at every attempt).
    attempts: Attempts | None = None
    derive: Callable[[ShardState], Rows | None]
    if isinstance(rows, Attempts):
        attempts, derive = rows, rows.rows
    elif callable(rows):
        derive = rows
    else:
        fixed = rows
        derive = lambda _state: fixed  # noqa: E731 - the same rows whatever the state

    return _Append(
        shard, _Derived(shard, derive, write_id or fresh_write_id()), fence=fence, carry=None,
        lookup=write_id, own_is_replay=False, attempts=attempts, known=known,
    ).run(retry())  # fmt: skip


def compare_and_append(
    shard: ShardAccess,
    batch: pa.Table | pa.RecordBatch,
    expected_upper: int,
    new_upper: int,
    *,
    schema_id: int | None = None,
    fence: Fence | None = None,
    guards: Sequence[Check] = (),
    write_id: str | None = None,
    carry: Carry | None = None,
    group: Sequence[tuple[str, int]] = (),
    state: ShardState | None = None,
) -> AppendResult:
    """Append ``batch`` and move the upper from ``expected_upper`` to ``new_upper``.

    ``batch`` has the columns of the live schema ``schema_id`` (default: latest), in that
    order, plus ``_ts`` (uint64) and ``_diff`` (int64) anywhere; every ``_ts`` must lie in
    ``[expected_upper, new_upper)``. Invalid input raises ShardError (``reason`` says which
    rule) before anything is written; a sealed or finalized shard raises
    ShardFinalizedError. An upper mismatch is a result (``ok=False`` with the current
    upper), not an exception, like persist. The Parquet blob is written before the CAS;
    empty batches write no blob. Races that leave the upper unchanged (a schema evolution,
    a compaction) are retried. ``guards`` are version checks of other keys made in the same
    transaction: when one of them moved, ShardError (reason ``guard-moved``, with the
    ``keys``) is raised and nothing is appended.

    Exactly once: the append records ``write_id`` (default: a fresh one) in the shard's
    write ledger in the same transaction. A call whose id the ledger holds returns that
    append (``replayed``) and writes nothing; an attempt whose answer was lost is resolved
    by looking its id up, whatever moved the batch meanwhile. When the ledger no longer
    covers ``expected_upper`` the outcome cannot be known: WriteOutcomeUnknownError.
    ``carry``: a copy source's ledger, recorded along (its marks keep their meaning in a
    copy, which keeps the source's times). ``group``: the appends a group commit joins in
    this batch, ``(write id, rows)`` each, in its order: each gets its own mark, all land
    together or none (``write_id`` is then the first's). ``state``: the state the caller just
    read, if it did (the first attempt uses it).
    """
    _check_frontiers(shard, expected_upper, new_upper)
    write_id = group[0][0] if group else write_id or fresh_write_id()
    fixed = _Fixed(
        shard, expected_upper, new_upper, write_id, batch=batch, schema_id=schema_id,
        guards=guards, group=group,
    )  # fmt: skip
    return _Append(
        shard, fixed, fence=fence, carry=carry, lookup=write_id, own_is_replay=True,
        known=state,
    ).run(shard.retry())  # fmt: skip


def compare_and_append_batches(
    shard: ShardAccess,
    refs: Sequence[BatchRef],
    expected_upper: int,
    new_upper: int,
    *,
    fence: Fence | None = None,
    write_id: str | None = None,
    carry: Carry | None = None,
) -> AppendResult:
    """Append batches whose blobs are already written under this shard (by Spark
    executors), in one compare-and-set, like :func:`compare_and_append`.

    Every ref must name a live schema id and lie in ``[expected_upper, new_upper)``; the
    blobs are this call's to delete when the append does not land (a lost race, an error),
    so a failed job leaves no unreferenced file behind for long.
    """
    _check_frontiers(shard, expected_upper, new_upper)
    written = _Fixed(
        shard, expected_upper, new_upper, write_id or fresh_write_id(), refs=list(refs)
    )
    try:
        state = shard.state()
        for ref in refs:
            state.live(ref.schema_id)  # ShardError for an unknown schema id
            if ref.lower < expected_upper or ref.upper > new_upper or ref.rows <= 0:
                raise shard_error(
                    f"batch {ref.name} at times [{ref.lower}, {ref.upper - 1}] falls outside "
                    f"[{expected_upper}, {new_upper})",
                    shard.shard_id,
                    "ts-out-of-range",
                    expected_upper=expected_upper,
                    new_upper=new_upper,
                )
    except BaseException:
        written.release()
        raise
    return _Append(
        shard, written, fence=fence, carry=carry, lookup=written.write_id, own_is_replay=True,
        known=state,
    ).run(shard.retry())  # fmt: skip


# -- what an attempt writes ------------------------------------------------------------------


@attrs.frozen
class _Batches:
    """What one attempt lands: the batches (their blobs written), the frontiers, the marks."""

    refs: Sequence[BatchRef]
    expected_upper: int
    new_upper: int
    marks: Sequence[WriteMark]
    guards: Sequence[Check] = ()

    @property
    def mark(self) -> WriteMark:
        """The mark the result names: the write's own, or a group's first member's."""
        return self.marks[0]


class _Derived:
    """The batches of :func:`append_rows`: derived from each state read, at its upper."""

    def __init__(
        self, shard: ShardAccess, rows: Callable[[ShardState], Rows | None], write_id: str
    ) -> None:
        self._shard = shard
        self._rows = rows
        self._write_id = write_id
        self._refs: list[BatchRef] = []

    def plan(self, state: ShardState) -> _Batches | AppendResult:
        self.release()  # an earlier attempt's blob: that attempt surely did not land
        wanted = self._rows(state)
        if wanted is None:
            return AppendResult(True, state.upper, state)
        table, schema_id = wanted.table, wanted.schema_id
        if schema_id is None and wanted.schema is not None:
            table, schema_id = written_as(self._shard.shard_id, table, wanted.schema, state)
        upper = state.upper
        schema_id = state.schema_id if schema_id is None else schema_id
        batch = with_updates(table, upper, wanted.diff)
        self._refs = _stored(self._shard, state, batch, upper, upper + 1, schema_id)
        rows = table.num_rows
        ids = wanted.group or [(self._write_id, rows)]
        marks = [WriteMark(i, upper, upper + 1, n) for i, n in ids]
        return _Batches(self._refs, upper, upper + 1, marks, wanted.guards)

    def release(self) -> None:
        if self._refs:
            self._shard.blob.delete_many([r.key(self._shard.shard_id) for r in self._refs])
            self._refs = []


class _Fixed:
    """The batches of :func:`compare_and_append` and :func:`compare_and_append_batches`: at
    fixed frontiers, a ``batch`` whose blob is written once and kept across attempts while the
    upper is the one it expects, or ``refs`` an engine wrote."""

    def __init__(
        self,
        shard: ShardAccess,
        expected_upper: int,
        new_upper: int,
        write_id: str,
        *,
        batch: pa.Table | pa.RecordBatch | None = None,
        refs: list[BatchRef] | None = None,
        schema_id: int | None = None,
        guards: Sequence[Check] = (),
        group: Sequence[tuple[str, int]] = (),
    ) -> None:
        self._shard = shard
        self._batch = batch
        self._expected, self._new = expected_upper, new_upper
        self._schema_id = schema_id
        self._guards = guards
        self.write_id = write_id
        self._group = group
        self._refs = refs

    def plan(self, state: ShardState) -> _Batches | AppendResult:
        if state.upper != self._expected:
            return AppendResult(False, state.upper, state)
        if self._refs is None:
            assert self._batch is not None, "a batch, or the refs of one"
            schema_id = state.schema_id if self._schema_id is None else self._schema_id
            self._refs = _stored(
                self._shard, state, self._batch, self._expected, self._new, schema_id
            )
        rows = sum(r.rows for r in self._refs)
        ids = self._group or [(self.write_id, rows)]
        marks = [WriteMark(i, self._expected, self._new, n) for i, n in ids]
        return _Batches(self._refs, self._expected, self._new, marks, self._guards)

    def release(self) -> None:
        if self._refs:
            self._shard.blob.delete_many([r.key(self._shard.shard_id) for r in self._refs])
        self._refs = None


_Plan = _Derived | _Fixed


# -- the one loop --------------------------------------------------------------------------


class _Append:
    """The attempts of one append, run by one retry loop; see the module's story."""

    def __init__(
        self,
        shard: ShardAccess,
        batches: _Plan,
        *,
        fence: Fence | None,
        carry: Carry | None,
        lookup: str | None,
        own_is_replay: bool,
        attempts: Attempts | None = None,
        known: ShardState | None = None,
    ) -> None:
        self._shard = shard
        self._batches = batches
        self._fence = fence
        self._carry = carry
        self._lookup = lookup  # the identity looked up before anything is derived
        self._own_is_replay = own_is_replay
        self._attempts = attempts
        self._held = [known] if known is not None else []
        self._lost: _Batches | None = None  # the attempt whose answer was lost

    def run(self, retry: Callable[..., AppendResult]) -> AppendResult:
        try:
            result = retry(self._attempt)
        except BaseException:
            if self._lost is None:  # nothing of ours may have landed
                self._batches.release()
            raise
        if not result.ok or (result.replayed and self._lost is None and result.mark is not None):
            self._batches.release()
        if result.ok and result.mark is not None:
            self._shard.log.debug("appended", upper=result.upper, replayed=result.replayed)
        return result

    def _attempt(self) -> AppendResult:
        if self._attempts is not None:
            self._attempts.before_read()
        state = self._held.pop() if self._held else self._shard.state()
        found = self._landed(state)
        if found is not None:
            return found
        if state.sealed or state.finalized:
            raise finalized_error(state)
        planned = self._batches.plan(state)
        if isinstance(planned, AppendResult):
            return planned
        new = listed(self._shard, state, planned.refs, planned.new_upper)
        writes, added = record(
            new.writes, planned.marks, self._carry, self._shard.keys, self._shard.write_memory
        )
        segments = [segment.key(self._shard.shard_id) for segment in added]
        new = attrs.evolve(new, writes=writes)
        if self._attempts is not None:
            self._attempts.before_send()
        try:
            result = self._shard.cas(state, new, self._fence, planned.guards)
        except VersionMismatchError:
            self._shard.blob.delete_many(segments + _new_rollups(self._shard, state, new))
            self._shard.check_guards(planned.guards)
            raise
        except ConnectionLostError:
            self._lost = planned
            if self._attempts is not None:
                self._attempts.on_unknown()
            raise
        return AppendResult(True, planned.new_upper, result, planned.mark)

    def _landed(self, state: ShardState) -> AppendResult | None:
        """The answer when the write is in ``state`` already: before this call (a replay) or by
        an attempt of this call whose answer was lost. Raises WriteOutcomeUnknownError when a
        lost attempt can no longer be told apart."""
        lost = self._lost
        identity = lost.mark.id if lost is not None else self._lookup
        if identity is None:
            return None
        found = self._shard.find_write(state.writes, identity)
        if found is not None:
            replayed = lost is None or self._own_is_replay
            return AppendResult(True, found.upper, state, found, replayed=replayed)
        if lost is not None:
            expected = lost.expected_upper
            if state.upper != expected and not state.writes.covers(expected):
                raise _unknown_outcome(self._shard.shard_id, identity, expected, state)
            self._lost = None  # the ledger proves it did not land
        return None


def _check_frontiers(shard: ShardAccess, expected_upper: int, new_upper: int) -> None:
    if new_upper < expected_upper:
        raise shard_error(
            f"new upper {new_upper} is below the expected upper {expected_upper}",
            shard.shard_id,
            "upper-regression",
            expected_upper=expected_upper,
            new_upper=new_upper,
        )


def _stored(
    shard: ShardAccess,
    state: ShardState,
    batch: pa.Table | pa.RecordBatch,
    expected_upper: int,
    new_upper: int,
    schema_id: int,
) -> list[BatchRef]:
    """``batch`` checked and written as one blob (none for an empty batch): its reference."""
    stored = checked_batch(batch, state.live(schema_id), expected_upper, new_upper, shard.shard_id)
    if not stored.num_rows:
        return []
    lower, upper = time_bounds(stored)
    ref = BatchRef(uuid.uuid4().hex, schema_id, stored.num_rows, lower, upper)
    shard.blob.put_batch(ref.key(shard.shard_id), stored)
    return [ref]


def listed(
    shard: ShardAccess, state: ShardState, refs: Sequence[BatchRef], new_upper: int
) -> ShardState:
    """``state`` with ``refs`` listed at ``new_upper``, rolling entries up as needed (the roll-up
    blobs are written here; one merged away is left to the garbage collection, after its grace:
    a reader of the previous state may still be reading it)."""
    inline: Sequence[BatchRef] = BatchListing.extended(state.batches, refs)
    rollups = state.rollups
    if len(inline) > shard.rollup_threshold:
        rollup = shard.rollups.write(state.batches)
        rollups = (*rollups, rollup)
        inline = tuple(refs)
        if len(rollups) > shard.max_rollups:
            rollups = (shard.rollups.write([b for r in rollups for b in shard.rollups.entries(r)]),)
    return attrs.evolve(state, batches=inline, rollups=rollups, upper=new_upper)


def _new_rollups(shard: ShardAccess, old: ShardState, new: ShardState) -> list[str]:
    """The roll-up blobs ``new`` lists that ``old`` does not (written by a refused attempt)."""
    before = {r.key(shard.shard_id) for r in old.rollups}
    return [k for r in new.rollups if (k := r.key(shard.shard_id)) not in before]


def _unknown_outcome(
    shard_id: str, write_id: str, expected_upper: int, state: ShardState
) -> WriteOutcomeUnknownError:
    return WriteOutcomeUnknownError(
        f"append {write_id} to shard {shard_id} lost its answer and the write ledger no longer "
        f"covers its upper {expected_upper} (it remembers appends past {state.writes.horizon}): "
        "whether it landed cannot be known",
        shard_id=shard_id,
        write_id=write_id,
        expected_upper=expected_upper,
        horizon=state.writes.horizon,
        upper=state.upper,
    )
