"""Data migration: Arrow arrays and batches of an older schema migrated to a newer one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa

from catalog.errors import SchemaIncompatibleError
from catalog.schema.evolution import Evolve, check_evolution
from catalog.schema.history import partner_child
from catalog.schema.lossless import widens
from catalog.schema.nested import list_bounds, list_offsets, null_mask
from catalog.schema.reader import PROJECTION_RULES, TargetCheck
from catalog.schema.rules import RULE_DATA_MISMATCH, RULE_TYPE_CHANGED, refusal
from catalog.schema.walk import (
    Kind,
    PartnerVisitor,
    as_data_type,
    as_schema,
    child_fields,
    kind_of,
    root_field,
    visit_with_partner,
)


@attrs.frozen
class _Column:
    """The data at one node of the source type: its values and the field it was declared as."""

    values: pa.Array
    field: pa.Field


def _data_mismatch(path: str, what: str, declared: Any, actual: Any) -> SchemaIncompatibleError:
    return refusal(RULE_DATA_MISMATCH, path, what, str(declared), str(actual))


class _Migrate(PartnerVisitor[_Column, pa.Array, "pa.Array | None"]):
    """Rebuilds arrays of a source type as the target type, zero-copy wherever data is kept.

    Added fields become typed nulls, deleted fields are not carried over, nullability comes from
    the target. Parent validity and slice offsets are kept; list and map children are sliced to
    the parent's range so a slice never migrates more rows than it holds.
    """

    def __init__(self, newer: bool = False) -> None:
        self.newer = newer  # the source is a newer type than the target (catalog.schema.ids)

    def partner_type(self, partner: _Column) -> pa.DataType:
        return partner.field.type

    def field_partner(self, partner: _Column, field: pa.Field, path: str) -> _Column | None:
        declared = partner_child(partner.field.type, field, newer=self.newer)
        if declared is None:
            return None
        index = partner.values.type.get_field_index(declared.name)
        if index < 0:
            raise _data_mismatch(
                path, "the data has no such field", partner.field.type, partner.values.type
            )
        return _Column(partner.values.field(index), declared)

    def element_partner(self, partner: _Column, path: str) -> _Column:
        start, end = list_bounds(partner.values)
        child = partner.values.values.slice(start, end - start)
        return _Column(child, partner.field.type.value_field)

    def _entries(self, partner: _Column) -> pa.Array:
        start, end = list_bounds(partner.values)
        return partner.values.values.slice(start, end - start)

    def key_partner(self, partner: _Column, path: str) -> _Column:
        return _Column(self._entries(partner).field(0), partner.field.type.key_field)

    def value_partner(self, partner: _Column, path: str) -> _Column:
        return _Column(self._entries(partner).field(1), partner.field.type.item_field)

    def before(self, dtype: pa.DataType, partner: _Column, path: str) -> None:
        if kind_of(partner.values.type) is not kind_of(partner.field.type):
            raise _data_mismatch(
                path,
                "the data is not of its declared type",
                partner.field.type,
                partner.values.type,
            )

    def kind_changed(self, dtype: pa.DataType, partner: _Column, path: str) -> pa.Array:
        raise refusal(
            RULE_TYPE_CHANGED, path, "cannot change a type", str(partner.field.type), str(dtype)
        )

    def added(self, field: pa.Field, path: str) -> pa.Array | None:
        return None  # the parent struct knows the length to fill

    def struct(
        self, dtype: pa.StructType, partner: _Column, path: str, fields: list[pa.Array | None]
    ) -> pa.Array:
        values = partner.values
        targets = child_fields(dtype)
        children = [
            pa.nulls(len(values), f.type) if child is None else child
            for f, child in zip(targets, fields, strict=True)
        ]
        # A struct without children takes its length from the mask alone.
        mask = values.is_null() if values.null_count or not children else None
        return pa.StructArray.from_arrays(children, fields=targets, mask=mask)

    def field(
        self, field: pa.Field, partner: _Column, path: str, type_result: pa.Array
    ) -> pa.Array | None:
        return type_result

    def list_(
        self, dtype: pa.DataType, partner: _Column, path: str, element: pa.Array | None
    ) -> pa.Array:
        assert element is not None  # list elements are always partnered
        values = partner.values
        large = kind_of(dtype) is Kind.LARGE_LIST
        array_class = pa.LargeListArray if large else pa.ListArray
        offsets = list_offsets(values)
        if large and offsets.type != pa.int64():  # a list widened to a large list
            offsets = offsets.cast(pa.int64())
        return array_class.from_arrays(offsets, element, type=dtype, mask=null_mask(values))

    def map_(
        self,
        dtype: pa.MapType,
        partner: _Column,
        path: str,
        key: pa.Array | None,
        value: pa.Array | None,
    ) -> pa.Array:
        assert key is not None and value is not None
        values = partner.values
        return pa.MapArray.from_arrays(
            list_offsets(values), key, value, type=dtype, mask=null_mask(values)
        )

    def primitive(self, dtype: pa.DataType, partner: _Column, path: str) -> pa.Array:
        values = partner.values
        if values.type == dtype:
            return values
        if values.type == partner.field.type and widens(values.type, dtype):
            return values.cast(dtype, safe=True)  # a lossless widening: every value fits
        raise _data_mismatch(path, "the data is not of its declared type", dtype, values.type)


def _migrate_array(
    values: pa.Array, source: pa.Field, target: pa.DataType, path: str, newer: bool = False
) -> pa.Array:
    if values.type == target:
        return values
    return visit_with_partner(target, _Column(values, source), _Migrate(newer), path)


def _migrate_any_array(
    values: pa.Array | pa.ChunkedArray,
    source: pa.Field,
    target: pa.DataType,
    path: str,
    newer: bool = False,
) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.ChunkedArray):
        chunks = [_migrate_array(c, source, target, path, newer) for c in values.chunks]
        return pa.chunked_array(chunks, type=target)
    return _migrate_array(values, source, target, path, newer)


def _check_migration(
    source: pa.DataType, target: pa.DataType, projection: bool, newer: bool = False
) -> None:
    if projection:
        check = TargetCheck(PROJECTION_RULES, newer=newer)
        visit_with_partner(target, root_field(source), check)
    else:
        check_evolution(source, target, Evolve())


def _migrate_columns(
    data: pa.RecordBatch | pa.Table,
    source: pa.Schema,
    target: pa.Schema,
    passthrough: Sequence[str],
    newer: bool = False,
) -> pa.RecordBatch | pa.Table:
    names = data.schema.names
    unexpected = [n for n in names if source.get_field_index(n) < 0 and n not in passthrough]
    if unexpected:
        raise _data_mismatch(
            unexpected[0], "the data has columns outside the schema", source, data.schema
        )
    columns: list[pa.Array | pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    source_type = as_data_type(source)
    for field in target:
        declared = partner_child(source_type, field, newer=newer)
        if declared is None:
            columns.append(_nulls_like(data, field.type))
        else:
            index = data.schema.get_field_index(declared.name)
            if index < 0:
                raise _data_mismatch(
                    declared.name, "the data has no such column", source, data.schema
                )
            column = data.column(index)
            columns.append(_migrate_any_array(column, declared, field.type, field.name, newer))
        fields.append(field)
    for name in passthrough:
        index = data.schema.get_field_index(name)
        if index < 0:
            raise _data_mismatch(name, "the data lacks a passthrough column", source, data.schema)
        columns.append(data.column(index))
        fields.append(data.schema.field(index))
    schema = pa.schema(fields, metadata=target.metadata)
    if not columns:
        # from_arrays cannot know the row count of zero columns; select keeps it, and
        # Table.replace_schema_metadata would lose it (pyarrow 26), so tables go by batches.
        if isinstance(data, pa.Table):
            return pa.Table.from_batches([b.select([]) for b in data.to_batches()], schema=schema)
        return data.select([]).replace_schema_metadata(target.metadata)
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(columns, schema=schema)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _nulls_like(data: pa.RecordBatch | pa.Table, dtype: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(data, pa.Table):
        return pa.chunked_array([pa.nulls(data.num_rows, dtype)], type=dtype)
    return pa.nulls(data.num_rows, dtype)


def migrate(
    data: pa.Array | pa.ChunkedArray | pa.RecordBatch | pa.Table,
    from_type: pa.DataType | pa.Schema,
    to_type: pa.DataType | pa.Schema,
    *,
    passthrough: Sequence[str] = (),
    projection: bool = False,
    newer: bool = False,
) -> pa.Array | pa.ChunkedArray | pa.RecordBatch | pa.Table:
    """Migrate ``data`` written with the live type ``from_type`` to the live type ``to_type``.

    Added fields become typed nulls, deleted fields are dropped, nullability is relaxed, at every
    depth; the result has exactly ``to_type`` (``result.schema == to_type`` for batches and
    tables) and the same rows. Work is vectorized and zero-copy wherever data is kept.

    Arrays and chunked arrays take DataTypes (a Schema means its struct). Record batches and
    tables take Schemas, and columns are matched by name; a column of the data that is neither a
    field of ``from_type`` nor named in ``passthrough`` is refused. ``passthrough`` columns (the
    shard's ``_ts`` and ``_diff``) are carried unchanged after the ``to_type`` columns, so then
    ``result.schema`` is ``to_type`` plus those fields.

    ``from_type`` must be backward compatible with ``to_type``; with ``projection=True`` the
    target may instead be a reader's projection (fields by name in any order, at any depth,
    nullable fields the source lacks filled with nulls; see :func:`check_reader`). Raises
    :class:`SchemaIncompatibleError` otherwise, and with rule ``data-mismatch`` when the data is
    not of ``from_type``. Fields are matched by id where both types are numbered, else by name
    and declared renames (catalog.schema.ids); ``newer`` says ``from_type`` is the newer of the
    two (a release's rows moved back to the older type its shard registered), so its renames
    are followed backwards.
    """
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        source = as_schema(from_type, "from_type")
        target = as_schema(to_type, "to_type")
        _check_migration(as_data_type(source), as_data_type(target), projection, newer)
        return _migrate_columns(data, source, target, passthrough, newer)
    if passthrough:
        raise TypeError("passthrough columns need a RecordBatch or a Table")
    source_type, target_type = as_data_type(from_type), as_data_type(to_type)
    _check_migration(source_type, target_type, projection, newer)
    return _migrate_any_array(data, root_field(source_type), target_type, "", newer)


def migrate_batch(
    batch: pa.RecordBatch | pa.Table,
    from_schema: pa.Schema,
    to_schema: pa.Schema,
    passthrough: Sequence[str] = ("_ts", "_diff"),
    *,
    projection: bool = False,
    newer: bool = False,
) -> pa.RecordBatch | pa.Table:
    """:func:`migrate` for a shard batch: the ``_ts`` and ``_diff`` columns pass through."""
    return migrate(
        batch, from_schema, to_schema, passthrough=passthrough, projection=projection, newer=newer
    )
