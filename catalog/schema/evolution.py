"""Backward compatibility: the evolution rules checked against a whole schema history."""

from __future__ import annotations

import pyarrow as pa

from catalog.errors import SchemaIncompatibleError
from catalog.schema.history import (
    FieldPartnerVisitor,
    describe_field,
    describe_type,
    is_tombstone,
    rebuild_list,
    reject_tombstones,
    tombstone_field,
)
from catalog.schema.lossless import widens
from catalog.schema.rules import (
    RULE_FIELD_ADDED_NOT_AT_END,
    RULE_FIELD_ADDED_NOT_NULLABLE,
    RULE_FIELD_NAME_DUPLICATED,
    RULE_FIELD_READDED,
    RULE_FIELD_REORDERED,
    RULE_MAP_KEY_CHANGED,
    RULE_NULLABILITY_TIGHTENED,
    RULE_TYPE_CHANGED,
    refusal,
)
from catalog.schema.walk import (
    ITEMS,
    KEY,
    VALUE,
    Kind,
    as_data_type,
    child_fields,
    join_path,
    kind_of,
    root_field,
    visit_with_partner,
)


def _check_unique_names(dtype: pa.DataType, path: str) -> None:
    seen: set[str] = set()
    for field in child_fields(dtype):
        if field.name in seen:
            raise refusal(
                RULE_FIELD_NAME_DUPLICATED,
                join_path(path, field.name),
                "a struct has two fields of this name",
                None,
                describe_type(dtype),
            )
        seen.add(field.name)


def migration_type(schema: pa.Schema) -> pa.Schema:
    """The migration type of a shard's first schema: the schema itself, with no tombstones."""
    reject_tombstones(schema, "the first schema")
    check_evolution(as_data_type(schema), as_data_type(schema), Evolve())
    return schema


class Evolve(FieldPartnerVisitor[pa.DataType, pa.Field]):
    """Checks a new live type against a migration type and builds the next migration type.

    The partner is the migration-type field; ``before`` enforces the field rules top-down, the
    bottom-up callbacks rebuild the type with tombstones kept and added fields appended.
    """

    live_only = False  # a tombstone is the partner that refuses re-adding its name

    def before(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        kind = kind_of(dtype)
        if kind is Kind.STRUCT:
            self._check_struct(dtype, partner.type, path)
        elif kind in (Kind.LIST, Kind.LARGE_LIST):
            if kind is Kind.LIST and kind_of(partner.type) is Kind.LARGE_LIST:
                raise refusal(
                    RULE_TYPE_CHANGED, path, "cannot change a type", describe_type(partner.type),
                    describe_type(dtype),
                )  # fmt: skip
            _check_relaxed(partner.type.value_field, dtype.value_field, join_path(path, ITEMS))
        elif kind is Kind.MAP:
            old = partner.type
            if old.key_type != dtype.key_type or old.keys_sorted != dtype.keys_sorted:
                raise refusal(
                    RULE_MAP_KEY_CHANGED,
                    join_path(path, KEY),
                    "cannot change a map's key",
                    describe_type(old),
                    describe_type(dtype),
                )
            _check_relaxed(old.item_field, dtype.item_field, join_path(path, VALUE))

    @staticmethod
    def _check_struct(new: pa.DataType, old: pa.DataType, path: str) -> None:
        _check_unique_names(new, path)
        old_fields = child_fields(old)
        positions = {f.name: i for i, f in enumerate(old_fields) if not is_tombstone(f)}
        deleted = {f.name for f in old_fields if is_tombstone(f)}
        last = -1
        first_added: tuple[str, pa.Field] | None = None
        for field in child_fields(new):
            field_path = join_path(path, field.name)
            if field.name in deleted and field.name not in positions:
                raise refusal(
                    RULE_FIELD_READDED,
                    field_path,
                    "cannot re-add a deleted field",
                    f"{field.name} (deleted)",
                    describe_field(field),
                )
            position = positions.get(field.name)
            if position is None:
                if not field.nullable:
                    raise refusal(
                        RULE_FIELD_ADDED_NOT_NULLABLE,
                        field_path,
                        "cannot add a non-nullable field",
                        None,
                        describe_field(field),
                    )
                first_added = first_added or (field_path, field)
                continue
            if first_added is not None:
                added_path, added = first_added
                raise refusal(
                    RULE_FIELD_ADDED_NOT_AT_END,
                    added_path,
                    f"cannot add a field before the existing field {field.name}",
                    None,
                    describe_field(added),
                )
            if position < last:
                raise refusal(
                    RULE_FIELD_REORDERED,
                    field_path,
                    "cannot reorder fields",
                    ", ".join(f.name for f in old_fields if not is_tombstone(f)),
                    ", ".join(f.name for f in child_fields(new)),
                )
            last = position
            _check_relaxed(old_fields[position], field, field_path)

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> pa.DataType:
        raise refusal(
            RULE_TYPE_CHANGED, path, "cannot change a type", describe_type(partner.type), str(dtype)
        )

    def added(self, field: pa.Field, path: str) -> pa.Field:
        return field

    def struct(
        self, dtype: pa.StructType, partner: pa.Field, path: str, fields: list[pa.Field]
    ) -> pa.DataType:
        results = {f.name: f for f in fields}
        merged: list[pa.Field] = []
        for old in child_fields(partner.type):
            if is_tombstone(old):
                merged.append(old)
            elif old.name in results:
                merged.append(results.pop(old.name))
            else:
                merged.append(tombstone_field(old))
        merged.extend(results.values())  # what is left was added; the rules put it at the end
        return pa.struct(merged)

    def field(
        self, field: pa.Field, partner: pa.Field, path: str, type_result: pa.DataType
    ) -> pa.Field:
        return pa.field(field.name, type_result, field.nullable, field.metadata)

    def list_(
        self, dtype: pa.DataType, partner: pa.Field, path: str, element: pa.Field
    ) -> pa.DataType:
        return rebuild_list(dtype, element)

    def map_(
        self, dtype: pa.MapType, partner: pa.Field, path: str, key: pa.Field, value: pa.Field
    ) -> pa.DataType:
        return pa.map_(key, value, keys_sorted=dtype.keys_sorted)

    def primitive(self, dtype: pa.DataType, partner: pa.Field, path: str) -> pa.DataType:
        if not widens(partner.type, dtype):  # the same type, or a lossless widening of it
            raise refusal(
                RULE_TYPE_CHANGED, path, "cannot change a type", str(partner.type), str(dtype)
            )
        return dtype


def _check_relaxed(old: pa.Field, new: pa.Field, path: str) -> None:
    if old.nullable and not new.nullable:
        raise refusal(
            RULE_NULLABILITY_TIGHTENED,
            path,
            "cannot make a nullable field non-nullable",
            describe_field(old),
            describe_field(new),
        )


def check_evolution(old: pa.DataType, new: pa.DataType, visitor: Evolve) -> pa.DataType:
    return visit_with_partner(new, root_field(old), visitor)


def check_backward_compatible(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> None:
    """Raise :class:`SchemaIncompatibleError` unless data of ``old`` can be migrated to ``new``.

    A Schema is the struct of its fields. ``old`` may also be a migration type: its tombstones
    then reserve the deleted names, which checks ``new`` against the whole history.
    """
    check_evolution(as_data_type(old), as_data_type(new), Evolve())


def is_backward_compatible(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> bool:
    """True when ``new`` follows the evolution rules of docs/design.md section 6 from ``old``."""
    try:
        check_backward_compatible(old, new)
    except SchemaIncompatibleError:
        return False
    return True


def evolve(history: pa.Schema, new: pa.Schema) -> pa.Schema:
    """The migration type after registering the live schema ``new`` on top of ``history``.

    Deleted fields become tombstones in place, added fields are appended after everything
    (tombstones included). Raises :class:`SchemaIncompatibleError` naming the rule and the path.
    Returns ``history`` itself when nothing changes.
    """
    reject_tombstones(new, "the new schema")
    evolved = check_evolution(as_data_type(history), as_data_type(new), Evolve())
    result = pa.schema(child_fields(evolved), metadata=new.metadata)
    if result.equals(history, check_metadata=True):
        return history
    return result
