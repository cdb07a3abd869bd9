"""Appending rows: the one compare-and-set loop that writes rows at a shard's upper.

:func:`append_rows` reads the state, asks its caller for the rows to write (they may depend on
the state: the migration shard appends only entries not yet live), adds the update columns
(``_ts`` = the upper, ``_diff``), picks the schema id the rows are written with, and
compare-and-appends from the upper to the upper + 1. A lost race (the upper moved) re-reads
and runs again; exactly once by the write id (:mod:`catalog.shard.ledger`).

The schema: a writer names the schema its rows have. The id under which that schema is
registered is used (not the latest: a newer release that registered a schema and crashed before
its switch must not stop an older writer); a schema registered only inside a wider one (see
``orchestrator.migrate.registration_schema``) is written as that wider schema, the fields the
writer does not know as nulls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa

from catalog.consensus import Check, Fence
from catalog.consolidate import DIFF, TS
from catalog.errors import MigrationRefusedError, SchemaIncompatibleError, VersionMismatchError
from catalog.retry import CasRetry
from catalog.schema import migrate_batch
from catalog.schema.conform import Mismatch, conform
from catalog.schema.lossless import narrowed_to
from catalog.schema.restore import relaxed, restore_table
from catalog.shard.state import AppendResult, ShardState, find_schema_id

if TYPE_CHECKING:
    from catalog.shard.handle import Shard

__all__ = ["Rows", "append_rows", "with_updates", "written_as"]


@attrs.frozen
class Rows:
    """What one attempt appends: ``table`` (the data columns, in ``schema``'s order; None:
    the latest live schema's), each with ``diff``, and ``guards`` checked in the same
    transaction. ``group``: a group commit's appends, ``(write id, rows)`` each, whose rows
    ``table`` holds in that order; each is recorded with its own mark, all in one commit (the
    caller, who builds the group per attempt, recognises members that landed already).
    ``schema_id``: the table is already as written under that registered schema (see
    :func:`written_as`, which a group commit applies member by member)."""

    table: pa.Table
    schema: pa.Schema | None = None
    schema_id: int | None = None
    diff: int = 1
    guards: Sequence[Check] = ()
    group: Sequence[tuple[str, int]] = ()


def with_updates(table: pa.Table, ts: int, diff: int) -> pa.Table:
    """``table`` with the update columns: every row at time ``ts`` with ``diff``."""
    rows = table.num_rows
    return table.append_column(
        pa.field(TS, pa.uint64(), nullable=False), pa.array([ts] * rows, pa.uint64())
    ).append_column(pa.field(DIFF, pa.int64(), nullable=False), pa.array([diff] * rows, pa.int64()))


def written_as(
    shard: Shard, table: pa.Table, schema: pa.Schema, state: ShardState
) -> tuple[pa.Table, int]:
    """``table`` (data columns in ``schema``) as it is written to the shard in ``state``, with
    the id of the registered schema it is written under.

    ``schema`` registered: the table as it is. Otherwise (a release writing while its upgrade is
    pending: only the expansion is registered) the rows move to the latest schema, checked value
    by value; MigrationRefusedError ``requires-finalization`` naming the field path of the first
    value that must wait, and none of the values themselves. A group commit checks each member
    through this on its own, so one member's refusal never refuses another's rows."""
    schema_id = find_schema_id(state, schema)
    if schema_id is not None:
        return table, schema_id
    return _as_latest(shard, table, schema, state), state.schema_id


def _as_latest(shard: Shard, table: pa.Table, schema: pa.Schema, state: ShardState) -> pa.Table:
    """``table`` (in ``schema``, not registered on the shard) in the shard's latest schema. The
    rows are moved to the latest schema with every field nullable, then checked value by value:
    a row that needs the contraction (a null where the expansion requires a value, a value a
    narrower type cannot hold) must wait."""
    latest = state.live_schema
    narrow = narrowed_to(schema, latest)  # a type the release widened: each value must fit
    if not narrow.equals(schema):
        table = pa.Table.from_arrays(
            [_fitted(shard, table.column(i), f, narrow.field(i)) for i, f in enumerate(schema)],
            schema=narrow,
        )
        schema = narrow
    loose = pa.schema([pa.field(f.name, relaxed(f.type)) for f in latest])
    try:
        moved = migrate_batch(table, schema, loose, (), projection=True, newer=True)
    except SchemaIncompatibleError as exc:
        raise _needs_finalization(shard, exc.message, exc.details.get("path")) from exc
    try:
        data = restore_table(moved, latest)  # nested nullability back, nulls there refused
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _needs_finalization(shard, str(exc), None) from exc
    found = conform(data.column_names, data.columns, latest)
    if isinstance(found, Mismatch):
        raise _needs_finalization(shard, found.text, found.details.get("column"))
    return data


def _fitted(
    shard: Shard, column: pa.ChunkedArray, field: pa.Field, narrow: pa.Field
) -> pa.ChunkedArray:
    """``column`` cast to the narrower type, or the refusal naming the path that does not fit."""
    if field.type.equals(narrow.type):
        return column
    try:
        return column.cast(narrow.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        path, dtype = _unfit(array, narrow.type, field.name)
        raise _needs_finalization(
            shard,
            f"field {path}: a value does not fit {dtype}, the type the previous release reads",
            path,
        ) from exc


def _unfit(array: pa.Array, target: pa.DataType, path: str) -> tuple[str, pa.DataType]:
    """The deepest path of ``array`` whose values do not cast to ``target`` (and its type)."""
    if pa.types.is_struct(array.type) and pa.types.is_struct(target):
        for index in range(target.num_fields):
            child = target.field(index)
            values = array.field(array.type.get_field_index(child.name))
            if not _casts(values, child.type):
                return _unfit(values, child.type, f"{path}.{child.name}")
    elif _is_list_type(array.type) and _is_list_type(target):
        values = array.flatten()
        if not _casts(values, target.value_type):
            return _unfit(values, target.value_type, f"{path}[]")
    elif pa.types.is_map(array.type) and pa.types.is_map(target):
        values = array.items
        if not _casts(values, target.item_type):
            return _unfit(values, target.item_type, f"{path}{{}}")
    return path, target


def _casts(array: pa.Array, target: pa.DataType) -> bool:
    try:
        array.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _is_list_type(dtype: pa.DataType) -> bool:
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype)


def _needs_finalization(shard: Shard, why: str, path: Any) -> MigrationRefusedError:
    return MigrationRefusedError(
        f"shard {shard.shard_id} cannot take these rows until the upgrade is final (its schema "
        f"registers only the expansion, which the previous release can read): {why}",
        rule="requires-finalization",
        shard_id=shard.shard_id,
        path=path,
        suggestion="finalize the upgrade (catalog-upgrade finalize), or write a value there",
    )


def append_rows(
    shard: Shard,
    rows: Rows | Callable[[ShardState], Rows | None],
    *,
    fence: Fence | None = None,
    write_id: str | None = None,
    retry: Callable[[], Callable[..., AppendResult]] = CasRetry,
    before_read: Callable[[], None] | None = None,
    before_send: Callable[[], None] | None = None,
    known: ShardState | None = None,
    on_unknown: Callable[[], None] | None = None,
) -> AppendResult:
    """Append ``rows`` (or what ``rows(state)`` returns for the state read) at the upper.

    ``rows(state)`` returning None means nothing to write: the result is ok, at the current
    upper, with no mark. ``before_read`` runs before each attempt reads the state and
    ``before_send`` before it sends the append (a leader's lease check; a send whose answer is
    lost leaves the outcome to the write id). ``retry`` runs the attempts (its retryable
    errors: a lost race, a lost connection). A result's ``replayed`` says that ``write_id`` had
    landed before this call (a retry of a request answered earlier); an attempt of this call
    whose answer was lost and that a later attempt finds is this call's own write, not a
    replay. ``known``: a state the caller holds (the one its own last commit left, when it is
    the shard's only writer); the first attempt uses it instead of reading, and a stale one
    costs a refused compare-and-set and a re-read. ``on_unknown`` runs when an attempt's
    outcome is unknown (anything but a refusal after it was sent): what a later attempt finds
    may then be that attempt's own write.
    """
    attempts = 0
    held = [known] if known is not None else []

    def attempt() -> AppendResult:
        nonlocal attempts
        attempts += 1
        if before_read is not None:
            before_read()
        recheck = bool(held)
        state = held.pop() if held else shard.state()
        wanted = rows(state) if callable(rows) else rows
        if write_id is not None:
            landed = shard.find_write(state.writes, write_id)
            if landed is not None:
                return AppendResult(True, landed.upper, state, landed, replayed=attempts == 1)
        if wanted is None:
            return AppendResult(True, state.upper, state)
        upper = state.upper
        table, schema_id = wanted.table, wanted.schema_id
        if schema_id is None and wanted.schema is not None:
            table, schema_id = written_as(shard, table, wanted.schema, state)
        batch = with_updates(table, upper, wanted.diff)
        if before_send is not None:
            before_send()
        try:
            result = shard.compare_and_append(
                batch, upper, upper + 1, schema_id=schema_id, fence=fence, guards=wanted.guards,
                write_id=write_id, group=wanted.group, state=state, recheck=recheck,
            )  # fmt: skip
        except VersionMismatchError:
            raise
        except Exception:
            if on_unknown is not None:
                on_unknown()
            raise
        if not result.ok:
            raise VersionMismatchError(
                f"upper of shard {shard.shard_id} moved from {upper} to {result.upper}",
                key=shard.key,
                upper=result.upper,
            )
        if result.replayed:  # an attempt of ours whose answer was lost, found again
            result = attrs.evolve(result, replayed=False)
        return result

    return retry()(attempt)
