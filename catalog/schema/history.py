"""Migration types: a schema history in one value, deleted fields kept as tombstones."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa

from catalog.errors import BadInputError
from catalog.schema.ids import field_id, former_names
from catalog.schema.walk import (
    F,
    Kind,
    PartnerVisitor,
    T,
    TypeVisitor,
    as_data_type,
    child_fields,
    kind_of,
    visit,
)

TOMBSTONE_KEY = b"catalog.deleted"


_TOMBSTONE_VALUE = b"true"


def is_tombstone(field: pa.Field) -> bool:
    """True when ``field`` is a deleted field kept in a migration type."""
    metadata = field.metadata
    return bool(metadata) and metadata.get(TOMBSTONE_KEY) == _TOMBSTONE_VALUE


def tombstone_field(field: pa.Field) -> pa.Field:
    metadata = dict(field.metadata or {})
    metadata[TOMBSTONE_KEY] = _TOMBSTONE_VALUE
    return pa.field(field.name, field.type, nullable=True, metadata=metadata)


def partner_child(
    parent: pa.DataType, field: pa.Field, *, live_only: bool = True, newer: bool = False
) -> pa.Field | None:
    """The child of struct ``parent`` that ``field`` is: :func:`partner_index`."""
    if kind_of(parent) is not Kind.STRUCT:
        return None
    index = partner_index(child_fields(parent), field, live_only=live_only, newer=newer)
    return None if index is None else parent.field(index)


def partner_index(
    children: list[pa.Field], field: pa.Field, *, live_only: bool = True, newer: bool = False
) -> int | None:
    """The position among ``children`` of the field ``field`` is, or None.

    By id when both sides are numbered (a tombstone too, unless ``live_only``). Otherwise by
    name and declared renames, in the direction of time: ``children`` of an older type than
    ``field``'s (``newer`` False: the shard's history against a release) match a name
    ``field`` had before (its ``renamed_from``), else its own name (the live child, else its
    tombstone unless ``live_only``); ``children`` of a newer type (``newer``: a release's rows
    moved back to the older type the shard registered) match by name, else the live child
    renamed from ``field``'s name. Name first in that direction, so a name a rename freed and a
    later field took is that field's."""
    wanted = field_id(field)
    if wanted is not None and any(field_id(c) is not None for c in children):
        found = next((i for i, c in enumerate(children) if field_id(c) == wanted), None)
        return None if found is None or (live_only and is_tombstone(children[found])) else found
    if not newer:
        for former in former_names(field):
            for i, child in enumerate(children):
                if child.name == former and not is_tombstone(child):
                    return i
    tombstone = None
    for i, child in enumerate(children):
        if child.name == field.name:
            if not is_tombstone(child):
                return i
            tombstone = i
    if tombstone is not None:
        return None if live_only else tombstone
    if newer:
        for i, child in enumerate(children):
            if not is_tombstone(child) and field.name in former_names(child):
                return i
    return None


def describe_type(dtype: pa.DataType) -> str:
    return str(_live_type(dtype))


def describe_field(field: pa.Field) -> str:
    return f"{field.name}: {describe_type(field.type)}{'' if field.nullable else ' not null'}"


class _StripTombstones(TypeVisitor[pa.DataType, "pa.Field | None"]):
    """Rebuilds a type without its tombstones (the live type of a migration type)."""

    def struct(self, dtype: pa.StructType, path: str, fields: list[pa.Field | None]) -> pa.DataType:
        return pa.struct([f for f in fields if f is not None])

    def field(self, field: pa.Field, path: str, type_result: pa.DataType) -> pa.Field | None:
        if is_tombstone(field):
            return None
        return pa.field(field.name, type_result, field.nullable, field.metadata)

    def list_(self, dtype: pa.DataType, path: str, element: pa.Field | None) -> pa.DataType:
        assert element is not None  # an element field is never a tombstone
        return rebuild_list(dtype, element)

    def map_(
        self, dtype: pa.MapType, path: str, key: pa.Field | None, value: pa.Field | None
    ) -> pa.DataType:
        assert key is not None and value is not None
        return pa.map_(key, value, keys_sorted=dtype.keys_sorted)

    def primitive(self, dtype: pa.DataType, path: str) -> pa.DataType:
        return dtype


class _TombstonePaths(TypeVisitor[list[str], list[str]]):
    """Collects the paths of every tombstone in a type."""

    def struct(self, dtype: pa.StructType, path: str, fields: list[list[str]]) -> list[str]:
        return [p for paths in fields for p in paths]

    def field(self, field: pa.Field, path: str, type_result: list[str]) -> list[str]:
        return [path] if is_tombstone(field) else type_result

    def list_(self, dtype: pa.DataType, path: str, element: list[str]) -> list[str]:
        return element

    def map_(self, dtype: pa.MapType, path: str, key: list[str], value: list[str]) -> list[str]:
        return key + value

    def primitive(self, dtype: pa.DataType, path: str) -> list[str]:
        return []


def rebuild_list(dtype: pa.DataType, element: pa.Field) -> pa.DataType:
    return pa.large_list(element) if kind_of(dtype) is Kind.LARGE_LIST else pa.list_(element)


def _live_type(dtype: pa.DataType) -> pa.DataType:
    return visit(dtype, _StripTombstones())


def live_schema(mtype: pa.Schema) -> pa.Schema:
    """The live Arrow schema of a migration type: every tombstone removed, at every depth."""
    return pa.schema(child_fields(_live_type(as_data_type(mtype))), metadata=mtype.metadata)


def reject_tombstones(schema: pa.Schema, what: str) -> None:
    paths = visit(schema, _TombstonePaths())
    if paths:
        raise BadInputError(
            f"{what} carries tombstone metadata ({TOMBSTONE_KEY.decode()}) at {', '.join(paths)}; "
            "pass a live schema",
            paths=paths,
        )


class FieldPartnerVisitor(PartnerVisitor[pa.Field, T, F]):
    """A partner visitor whose partner is the older schema's field at the same path: struct
    children are matched by :func:`partner_child` (id, former name, name), ``live_only``
    skipping tombstones (a deleted field has no partner), list elements and map keys and
    values by position."""

    live_only: ClassVar[bool] = True
    newer = False  # the partner is the newer type (a visitor may say so per instance)

    def partner_type(self, partner: pa.Field) -> pa.DataType:
        return partner.type

    def field_partner(self, partner: pa.Field, field: pa.Field, path: str) -> pa.Field | None:
        return partner_child(partner.type, field, live_only=self.live_only, newer=self.newer)

    def element_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.value_field

    def key_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.key_field

    def value_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.item_field
