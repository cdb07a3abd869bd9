"""Rows of a release whose upgrade is pending, as the shard takes them.

A writer names the schema its rows have. The id under which that schema is registered is used
(not the latest: a newer release that registered a schema and crashed before its switch must not
stop an older writer). A schema registered only inside a wider one (see
``orchestrator.migrate.registration_schema``) is written as that wider schema, the fields the
writer does not know as nulls, each value checked to fit what the previous release reads.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from catalog.errors import MigrationRefusedError, SchemaIncompatibleError
from catalog.schema import migrate_batch
from catalog.schema.conform import Mismatch, conform
from catalog.schema.lossless import narrowed_to
from catalog.schema.restore import relaxed, restore_table
from catalog.shard.state import ShardState, find_schema_id

__all__ = ["written_as"]


def written_as(
    shard_id: str, table: pa.Table, schema: pa.Schema, state: ShardState
) -> tuple[pa.Table, int]:
    """``table`` (data columns in ``schema``) as it is written to shard ``shard_id`` in
    ``state``, with the id of the registered schema it is written under.

    ``schema`` registered: the table as it is. Otherwise (a release writing while its upgrade is
    pending: only the expansion is registered) the rows move to the latest schema, checked value
    by value; MigrationRefusedError ``requires-finalization`` naming the field path of the first
    value that must wait, and none of the values themselves. A group commit checks each member
    through this on its own, so one member's refusal never refuses another's rows."""
    schema_id = find_schema_id(state, schema)
    if schema_id is not None:
        return table, schema_id
    return _as_latest(shard_id, table, schema, state), state.schema_id


def _as_latest(shard_id: str, table: pa.Table, schema: pa.Schema, state: ShardState) -> pa.Table:
    """``table`` (in ``schema``, not registered on the shard) in the shard's latest schema. The
    rows are moved to the latest schema with every field nullable, then checked value by value:
    a row that needs the contraction (a null where the expansion requires a value, a value a
    narrower type cannot hold) must wait."""
    latest = state.live_schema
    narrow = narrowed_to(schema, latest)  # a type the release widened: each value must fit
    if not narrow.equals(schema):
        table = pa.Table.from_arrays(
            [_fitted(shard_id, table.column(i), f, narrow.field(i)) for i, f in enumerate(schema)],
            schema=narrow,
        )
        schema = narrow
    loose = pa.schema([pa.field(f.name, relaxed(f.type)) for f in latest])
    try:
        moved = migrate_batch(table, schema, loose, (), projection=True, newer=True)
    except SchemaIncompatibleError as exc:
        raise _needs_finalization(shard_id, exc.message, exc.details.get("path")) from exc
    try:
        data = restore_table(moved, latest)  # nested nullability back, nulls there refused
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _needs_finalization(shard_id, str(exc), None) from exc
    found = conform(data.column_names, data.columns, latest)
    if isinstance(found, Mismatch):
        raise _needs_finalization(shard_id, found.text, found.details.get("column"))
    return data


def _fitted(
    shard_id: str, column: pa.ChunkedArray, field: pa.Field, narrow: pa.Field
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
            shard_id,
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


def _needs_finalization(shard_id: str, why: str, path: Any) -> MigrationRefusedError:
    return MigrationRefusedError(
        f"shard {shard_id} cannot take these rows until the upgrade is final (its schema "
        f"registers only the expansion, which the previous release can read): {why}",
        rule="requires-finalization",
        shard_id=shard_id,
        path=path,
        suggestion="finalize the upgrade (catalog-upgrade finalize), or write a value there",
    )
