"""Widening: a release's schema plus the fields a newer release registered that it does not know.

When a newer release's leader registered fields on a shard and crashed before its catalog
switch, the shard's latest schema holds fields, at any depth, that neither the catalog's schema
(``old``) nor an older release's schema (``new``) knows. :func:`widen` keeps them: the result
has the latest schema's field order, ``new``'s types for the fields ``new`` has, the unknown
fields as registered, and ``new``'s added fields after them; ``new`` reads it as a projection.
A field that ``old`` has and ``new`` does not is a deletion of ``new``'s and stays deleted.

A visitor over :func:`~catalog.schema.walk.visit_with_partner`: the walk follows ``new``, and
each node's partner is the pair (latest, old) at the same path; structs, list elements and map
values widen alike.
"""

from __future__ import annotations

import attrs
import pyarrow as pa

from catalog.schema.walk import PartnerVisitor, child_fields, visit_with_partner

__all__ = ["widen"]


@attrs.frozen
class _Pair:
    """The latest registered type and the catalog's type (None: it had none) at one path."""

    latest: pa.DataType
    old: pa.DataType | None


def _child(dtype: pa.DataType | None, name: str) -> pa.Field | None:
    if dtype is None or not pa.types.is_struct(dtype):
        return None
    index = dtype.get_field_index(name)
    return dtype.field(index) if index >= 0 else None


def _same_kind(dtype: pa.DataType | None, test: object) -> bool:
    return dtype is not None and bool(test(dtype))  # type: ignore[operator]


class _Widen(PartnerVisitor[_Pair, pa.DataType, pa.Field]):
    def partner_type(self, partner: _Pair) -> pa.DataType:
        return partner.latest

    def field_partner(self, partner: _Pair, field: pa.Field, path: str) -> _Pair | None:
        latest = _child(partner.latest, field.name)
        if latest is None:
            return None
        old = _child(partner.old, field.name)
        return _Pair(latest.type, None if old is None else old.type)

    def element_partner(self, partner: _Pair, path: str) -> _Pair:
        old = partner.old
        if old is not None and (pa.types.is_list(old) or pa.types.is_large_list(old)):
            return _Pair(partner.latest.value_field.type, old.value_field.type)
        return _Pair(partner.latest.value_field.type, None)

    def key_partner(self, partner: _Pair, path: str) -> _Pair:
        old = partner.old if _same_kind(partner.old, pa.types.is_map) else None
        return _Pair(partner.latest.key_type, None if old is None else old.key_type)

    def value_partner(self, partner: _Pair, path: str) -> _Pair:
        old = partner.old if _same_kind(partner.old, pa.types.is_map) else None
        return _Pair(partner.latest.item_type, None if old is None else old.item_type)

    def kind_changed(self, dtype: pa.DataType, partner: _Pair, path: str) -> pa.DataType:
        return dtype

    def added(self, field: pa.Field, path: str) -> pa.Field:
        return field

    def struct(
        self, dtype: pa.StructType, partner: _Pair, path: str, fields: list[pa.Field]
    ) -> pa.DataType:
        mine = {f.name: f for f in fields}
        olds = (
            {f.name for f in child_fields(partner.old)}
            if _same_kind(partner.old, pa.types.is_struct)
            else set()
        )
        latest = child_fields(partner.latest)
        out = []
        for field in latest:
            if field.name in mine:
                out.append(mine[field.name])
            elif field.name not in olds:
                out.append(field)  # added by someone else since the catalog's schema
        known = {f.name for f in latest}
        out += [f for f in fields if f.name not in known]
        return pa.struct(out)

    def field(
        self, field: pa.Field, partner: _Pair, path: str, type_result: pa.DataType
    ) -> pa.Field:
        return field.with_type(type_result)

    def list_(
        self, dtype: pa.DataType, partner: _Pair, path: str, element: pa.Field
    ) -> pa.DataType:
        return pa.large_list(element) if pa.types.is_large_list(dtype) else pa.list_(element)

    def map_(
        self, dtype: pa.MapType, partner: _Pair, path: str, key: pa.Field, value: pa.Field
    ) -> pa.DataType:
        return pa.map_(key, value, keys_sorted=dtype.keys_sorted)

    def primitive(self, dtype: pa.DataType, partner: _Pair, path: str) -> pa.DataType:
        return dtype


def widen(latest: pa.Schema, old: pa.Schema, new: pa.Schema) -> pa.Schema:
    """``new`` widened by the fields of ``latest`` that neither ``old`` nor ``new`` has."""
    partner = _Pair(pa.struct(list(latest)), pa.struct(list(old)))
    wider = visit_with_partner(new, partner, _Widen())
    return pa.schema(list(wider), metadata=new.metadata)
