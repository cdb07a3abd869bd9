"""Expansion: the first half of an evolution (expand, then contract).

Before its catalog switch a leader registers only the *expansion* of a shard's latest schema by
its release's schema: every field the shard has, at any depth, exactly as registered (type and
nullability), plus the fields the release adds, where it adds them (after the existing fields of
their struct). A crash before the switch then leaves every older release its fields, its values
and its nullability: it reads the expansion as a projection and writes its own registered
schema. The *contraction* (the release's schema with its deletions, relaxed nullability and
widened types) is registered only once the switch is durable.

A visitor over :func:`~catalog.schema.walk.visit_with_partner`: the walk follows the latest
schema, and each node's partner is the release's type at the same path.
"""

from __future__ import annotations

import pyarrow as pa

from catalog.schema.history import partner_child, partner_index
from catalog.schema.walk import PartnerVisitor, child_fields, visit_with_partner

__all__ = ["expansion"]


class _Expand(PartnerVisitor[pa.DataType, pa.DataType, pa.Field]):
    def partner_type(self, partner: pa.DataType) -> pa.DataType:
        return partner

    def field_partner(self, partner: pa.DataType, field: pa.Field, path: str) -> pa.DataType | None:
        # The release's field of this one: by name, else the one renamed from it (the
        # expansion keeps the old name until the contraction).
        child = partner_child(partner, field, newer=True)
        return None if child is None else child.type

    def element_partner(self, partner: pa.DataType, path: str) -> pa.DataType:
        return partner.value_field.type

    def key_partner(self, partner: pa.DataType, path: str) -> pa.DataType:
        return partner.key_type

    def value_partner(self, partner: pa.DataType, path: str) -> pa.DataType:
        return partner.item_type

    def kind_changed(self, dtype: pa.DataType, partner: pa.DataType, path: str) -> pa.DataType:
        return dtype  # the contraction changes kinds, if the rules allow it at all

    def added(self, field: pa.Field, path: str) -> pa.Field:
        return field  # a field the release deletes: kept until the contraction

    def struct(
        self, dtype: pa.StructType, partner: pa.DataType, path: str, fields: list[pa.Field]
    ) -> pa.DataType:
        added = [f for f in child_fields(partner) if partner_index(fields, f) is None]
        return pa.struct([*fields, *added])

    def field(
        self, field: pa.Field, partner: pa.DataType, path: str, type_result: pa.DataType
    ) -> pa.Field:
        return field.with_type(type_result)

    def list_(
        self, dtype: pa.DataType, partner: pa.DataType, path: str, element: pa.Field
    ) -> pa.DataType:
        return pa.large_list(element) if pa.types.is_large_list(dtype) else pa.list_(element)

    def map_(
        self, dtype: pa.MapType, partner: pa.DataType, path: str, key: pa.Field, value: pa.Field
    ) -> pa.DataType:
        return pa.map_(key, value, keys_sorted=dtype.keys_sorted)

    def primitive(self, dtype: pa.DataType, partner: pa.DataType, path: str) -> pa.DataType:
        return dtype


def expansion(latest: pa.Schema, release: pa.Schema) -> pa.Schema:
    """``latest`` (a shard's latest live schema) plus the fields ``release`` adds to it."""
    expanded = visit_with_partner(latest, pa.struct(list(release)), _Expand())
    return pa.schema(list(expanded), metadata=latest.metadata)
