"""Writes to a shard: compare-and-append, the read frontier, sealing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import pyarrow as pa
import structlog

from catalog.consensus import (
    Check,
    Fence,
)
from catalog.errors import (
    ConnectionLostError,
    VersionMismatchError,
    WriteOutcomeUnknownError,
)
from catalog.shard.append import (
    prepare_append,
    time_bounds,
)
from catalog.shard.ledger import Carry, WriteLedger, WriteMark
from catalog.shard.listing import BatchListing
from catalog.shard.ops import finalized_error
from catalog.shard.state import (
    AppendResult,
    BatchRef,
    ShardState,
    shard_error,
)

if TYPE_CHECKING:
    from catalog.shard.handle import Shard

log = structlog.get_logger(__name__)


def compare_and_append(
    shard: Shard,
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
    recheck: bool = False,
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

    Exactly once: the append records ``write_id`` (default: a fresh one) in the shard's
    write ledger in the same transaction. A call whose id the ledger holds returns that
    append (``replayed``) and writes nothing; an attempt whose answer was lost is resolved
    by looking its id up, whatever moved the batch meanwhile. When the ledger no longer
    covers ``expected_upper`` the outcome cannot be known: WriteOutcomeUnknownError.
    ``carry``: a copy source's ledger, recorded along (its marks keep their meaning in a
    copy, which keeps the source's times). ``group``: the appends a group commit joins in
    this batch, ``(write id, rows)`` each, in its order: each gets its own mark, all land
    together or none (``write_id`` is then the first's). ``state``: the state the caller just
    read, if it did (the compare-and-set checks it is still current); with ``recheck``, a
    ``state`` that moved is refused with VersionMismatchError instead of retried on a re-read
    one, for a caller whose batch depends on it (a group commit's members, checked against
    its ledger).
    """
    _check_frontiers(shard, expected_upper, new_upper)
    refs: list[BatchRef] = []
    initial = shard.state() if state is None else state
    schema_id = initial.schema_id if schema_id is None else schema_id
    write_id = group[0][0] if group else uuid.uuid4().hex if write_id is None else write_id
    appendable = not (initial.sealed or initial.finalized or initial.writes.find(write_id))
    if appendable and initial.upper == expected_upper:
        stored = prepare_append(
            batch, initial.live(schema_id), expected_upper, new_upper, shard.shard_id
        )
        if stored.num_rows:
            lower, upper = time_bounds(stored)
            ref = BatchRef(uuid.uuid4().hex, schema_id, stored.num_rows, lower, upper)
            shard.blob.put_batch(ref.key(shard.shard_id), stored)
            refs.append(ref)
    return _append_refs(shard,
        refs, expected_upper, new_upper, fence=fence, guards=guards, write_id=write_id,
        carry=carry, initial=initial, group=group, recheck=recheck and state is not None,
    )  # fmt: skip


def compare_and_append_batches(
    shard: Shard,
    refs: Sequence[BatchRef],
    expected_upper: int,
    new_upper: int,
    *,
    fence: Fence | None = None,
    write_id: str | None = None,
    carry: Carry | None = None,
) -> AppendResult:
    """Append batches whose blobs are already written under this shard (by Spark
    executors), in one compare-and-set, like :meth:`compare_and_append`.

    Every ref must name a live schema id and lie in ``[expected_upper, new_upper)``; the
    blobs are this call's to delete when the append does not land (a lost race, an error),
    so a failed job leaves no unreferenced file behind for long.
    """
    _check_frontiers(shard, expected_upper, new_upper)
    initial = shard.state()
    for ref in refs:
        initial.live(ref.schema_id)  # ShardError for an unknown schema id
        if ref.lower < expected_upper or ref.upper > new_upper or ref.rows <= 0:
            shard.blob.delete_many([r.key(shard.shard_id) for r in refs])
            raise shard_error(
                f"batch {ref.name} at times [{ref.lower}, {ref.upper - 1}] falls outside "
                f"[{expected_upper}, {new_upper})",
                shard.shard_id,
                "ts-out-of-range",
                expected_upper=expected_upper,
                new_upper=new_upper,
            )
    return _append_refs(shard,
        list(refs), expected_upper, new_upper, fence=fence, guards=(),
        write_id=uuid.uuid4().hex if write_id is None else write_id, carry=carry,
        initial=initial,
    )  # fmt: skip


def _check_frontiers(shard: Shard, expected_upper: int, new_upper: int) -> None:
    if new_upper < expected_upper:
        raise shard_error(
            f"new upper {new_upper} is below the expected upper {expected_upper}",
            shard.shard_id,
            "upper-regression",
            expected_upper=expected_upper,
            new_upper=new_upper,
        )


def _append_refs(
    shard: Shard,
    refs: list[BatchRef],
    expected_upper: int,
    new_upper: int,
    *,
    fence: Fence | None,
    guards: Sequence[Check],
    write_id: str,
    carry: Carry | None,
    initial: ShardState,
    group: Sequence[tuple[str, int]] = (),
    recheck: bool = False,
) -> AppendResult:
    """The CAS loop of an append whose blobs (``refs``) are written: exactly once by
    ``write_id``; the blobs are deleted when the append surely did not land. ``recheck``: a
    refused compare-and-set on ``initial`` ends the loop with VersionMismatchError (the
    caller re-derives the append from a re-read state)."""
    owned = [r.key(shard.shard_id) for r in refs]
    landed = shard.find_write(initial.writes, write_id)
    if landed is not None:
        shard.blob.delete_many(owned)
        return AppendResult(True, landed.upper, initial, landed, replayed=True)
    if initial.sealed or initial.finalized:
        shard.blob.delete_many(owned)
        raise finalized_error(initial)
    if initial.upper != expected_upper:
        shard.blob.delete_many(owned)
        return AppendResult(False, initial.upper, initial)
    rows = sum(r.rows for r in refs)
    mark = WriteMark(write_id, expected_upper, new_upper, group[0][1] if group else rows)
    marks = [WriteMark(i, expected_upper, new_upper, n) for i, n in group] or [mark]
    uncertain = False
    pending = [initial]
    replaced: list[str] = []

    def attempt() -> AppendResult:
        nonlocal uncertain
        current = pending.pop() if pending else shard.state()
        if uncertain:
            found = shard.find_write(current.writes, write_id)
            if found is not None:  # our lost answer did land
                return AppendResult(True, found.upper, current, found, replayed=True)
            if current.upper != expected_upper and not current.writes.covers(expected_upper):
                raise _unknown_outcome(shard.shard_id, write_id, expected_upper, current)
            uncertain = False  # the ledger proves it did not land
        if current.sealed or current.finalized:
            raise finalized_error(current)
        if current.upper != expected_upper:
            return AppendResult(False, current.upper, current)
        new, written, old_rollups = appended(shard, current, refs, new_upper)
        writes, segment_keys = _record(shard, new.writes, marks, carry)
        new = attrs.evolve(new, writes=writes)
        try:
            result = shard.cas(current, new, fence, guards)
        except VersionMismatchError as exc:
            shard.blob.delete_many([*written, *segment_keys])
            shard.check_guards(guards)
            if recheck and current is initial:
                raise _Moved(exc) from exc
            raise
        except ConnectionLostError:
            uncertain = True
            raise
        replaced[:] = old_rollups
        return AppendResult(True, new_upper, result, mark)

    try:
        result = shard.retry()(attempt)
    except _Moved as moved:
        shard.blob.delete_many(owned)
        raise moved.refusal from None
    except BaseException:
        if not uncertain:
            shard.blob.delete_many(owned)
        raise
    if not result.ok:
        shard.blob.delete_many(owned)
    if result.ok:
        # Rollups merged away are left to the garbage collection (after its grace, never
        # under a lease): a reader of the previous state may still be reading them.
        shard.log.debug("appended", upper=result.upper, rows=rows, replayed=result.replayed,
                        rollups_left_to_gc=len(replaced))  # fmt: skip
    return result


class _Moved(Exception):
    """The caller's state moved before the compare-and-set (``recheck``): not retried here."""

    def __init__(self, refusal: VersionMismatchError) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def _record(
    shard: Shard, writes: WriteLedger, new: Sequence[WriteMark], carry: Carry | None
) -> tuple[WriteLedger, list[str]]:
    """``writes`` with the ``new`` marks recorded (and a copy source's ledger carried): keyed
    marks the ledger evicts go into the key log's segments; the keys of the segments this
    wrote."""
    before = {s.name for s in writes.segments}
    marks = [*new]
    if carry is not None:
        marks = [*carry.ledger.marks, *new]
        segments = writes.segments
        if carry.keys is not None and carry.ledger.segments:
            segments += shard.keys.carried(carry.keys, carry.ledger.segments)
        horizon = max(writes.horizon, carry.ledger.horizon)
        writes = attrs.evolve(writes, segments=segments, horizon=horizon)
    writes, evicted = writes.evicting(marks, shard.write_memory)
    if evicted or writes.segments:
        segments, expired = shard.keys.fold(writes.segments, evicted)
        writes = attrs.evolve(writes, segments=segments, horizon=max(writes.horizon, expired))
    return writes, [s.key(shard.shard_id) for s in writes.segments if s.name not in before]


def appended(
    shard: Shard, state: ShardState, refs: Sequence[BatchRef], new_upper: int
) -> tuple[ShardState, list[str], list[str]]:
    """``state`` with ``refs`` appended (rolling entries up as needed).

    Returns the new state, the blobs written for it, and the blobs it no longer references.
    """
    inline: Sequence[BatchRef] = BatchListing.extended(state.batches, refs)
    rollups = state.rollups
    written: list[str] = []
    replaced: list[str] = []
    if len(inline) > shard.rollup_threshold:
        rollup = shard.rollups.write(state.batches)
        written.append(rollup.key(shard.shard_id))
        rollups = (*rollups, rollup)
        inline = tuple(refs)
        if len(rollups) > shard.max_rollups:
            merged = shard.rollups.write([b for r in rollups for b in shard.rollups.entries(r)])
            written.append(merged.key(shard.shard_id))
            replaced = [r.key(shard.shard_id) for r in rollups]
            rollups = (merged,)
    new = attrs.evolve(state, batches=inline, rollups=rollups, upper=new_upper)
    return new, written, replaced


def advance_since(shard: Shard, since: int, *, fence: Fence | None = None) -> ShardState:
    """Move ``since`` forward to ``since`` (never back; at most the upper)."""

    def change(state: ShardState) -> ShardState | None:
        if state.finalized:
            raise finalized_error(state)
        if since <= state.since:
            return None
        if since > state.upper:
            raise shard_error(
                f"since {since} would pass the upper {state.upper}",
                shard.shard_id,
                "since-beyond-upper",
                since=since,
                upper=state.upper,
            )
        return attrs.evolve(state, since=since)

    return shard.update(change, fence)


def seal(shard: Shard, *, fence: Fence | None = None) -> ShardState:
    """Refuse every further append (idempotent). Readers may still read."""

    def change(state: ShardState) -> ShardState | None:
        return None if state.sealed else attrs.evolve(state, sealed=True)

    state = shard.update(change, fence)
    shard.log.info("shard_sealed", upper=state.upper)
    return state


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
