"""Backward compatibility: the evolution rules checked against a whole schema history."""

from __future__ import annotations

import json

import pyarrow as pa

from catalog.errors import SchemaIncompatibleError
from catalog.schema.history import (
    FieldPartnerVisitor,
    describe_field,
    describe_type,
    is_tombstone,
    partner_child,
    partner_index,
    rebuild_list,
    reject_tombstones,
    tombstone_field,
)
from catalog.schema.ids import (
    FIELD_ID_KEY,
    LAST_ID_KEY,
    RENAMED_FROM_KEY,
    Counter,
    field_id,
    former_names,
    has_ids,
    last_id,
    needs_ids,
    number,
    number_type,
    with_field_metadata,
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
    RULE_RENAME_CONFLICT,
    RULE_RENAME_SOURCE_MISSING,
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
    bottom-up callbacks rebuild the type with tombstones kept and added fields appended. With
    ``counter`` the history is numbered (catalog.schema.ids): added fields get the next ids, a
    deleted name may come back as a new field, and renamed fields keep their ids and slots.
    """

    live_only = False  # a tombstone is the partner that refuses re-adding its name

    def __init__(self, counter: Counter | None = None) -> None:
        self.counter = counter

    def field_partner(self, partner: pa.Field, field: pa.Field, path: str) -> pa.Field | None:
        # Numbered, a deleted name is free again: the new field is added with a new id.
        return partner_child(partner.type, field, live_only=self.counter is not None)

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

    def _check_struct(self, new: pa.DataType, old: pa.DataType, path: str) -> None:
        _check_unique_names(new, path)
        old_fields = child_fields(old)
        numbered = self.counter is not None
        last = -1
        taken: dict[int, str] = {}
        first_added: tuple[str, pa.Field] | None = None
        for field in child_fields(new):
            field_path = join_path(path, field.name)
            position = partner_index(old_fields, field, live_only=numbered)
            if position is not None and is_tombstone(old_fields[position]):
                raise refusal(
                    RULE_FIELD_READDED,
                    field_path,
                    "cannot re-add a deleted field",
                    f"{field.name} (deleted)",
                    describe_field(field),
                )
            # A release's declared rename must find its field; a registered schema's field
            # (numbered) absent from an older one was simply added after it.
            formers = former_names(field) if field_id(field) is None else ()
            if position is None and formers:
                raise refusal(
                    RULE_RENAME_SOURCE_MISSING,
                    field_path,
                    f"renamed from {' or '.join(formers)}, which the schema does not have",
                    ", ".join(f.name for f in old_fields if not is_tombstone(f)),
                    describe_field(field),
                )
            if position is not None:
                _check_rename(old_fields, position, field, field_path, taken)
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
        old_fields = child_fields(partner.type)
        placed: dict[int, pa.Field] = {}
        added: list[pa.Field] = []
        for new, result in zip(child_fields(dtype), fields, strict=True):
            position = partner_index(old_fields, new)
            if position is None:
                added.append(self._added(result))
            else:
                placed[position] = _identity_of(old_fields[position], result)
        merged = [
            old if is_tombstone(old) else placed.pop(i, None) or tombstone_field(old)
            for i, old in enumerate(old_fields)
        ]
        merged.extend(added)  # the rules put added fields at the end
        return pa.struct(merged)

    def _added(self, field: pa.Field) -> pa.Field:
        """An added field, numbered (with everything below it) when the history is."""
        if self.counter is None:
            return field
        return number_type(pa.struct([field]), self.counter).field(0)

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
    """True when ``new`` follows the evolution rules of docs/design-evolution.md from ``old``."""
    try:
        check_backward_compatible(old, new)
    except SchemaIncompatibleError:
        return False
    return True


def evolve(history: pa.Schema, new: pa.Schema) -> pa.Schema:
    """The migration type after registering the live schema ``new`` on top of ``history``.

    Deleted fields become tombstones in place, added fields are appended after everything
    (tombstones included), renamed fields keep their slot under the new name. A ``new`` that
    renames a field numbers an unnumbered history first (catalog.schema.ids). Raises
    :class:`SchemaIncompatibleError` naming the rule and the path. Returns ``history`` itself
    when nothing changes.
    """
    reject_tombstones(new, "the new schema")
    if needs_ids(new) and not has_ids(history):
        history = number(history)
    counter = Counter(last_id(history)) if has_ids(history) else None
    evolved = check_evolution(as_data_type(history), as_data_type(new), Evolve(counter))
    metadata = dict(new.metadata or {})
    if counter is not None:
        metadata[LAST_ID_KEY] = str(counter.last).encode()
    result = pa.schema(child_fields(evolved), metadata=metadata or None)
    if result.equals(history, check_metadata=True):
        return history
    return result


def _identity_of(old: pa.Field, new: pa.Field) -> pa.Field:
    """``new`` as the migration type keeps it in ``old``'s slot: ``old``'s id, and every name
    the field had before (a renamed field's former names, newest first)."""
    names = (old.name, *former_names(old)) if old.name != new.name else former_names(old)
    formers = list(dict.fromkeys(n for n in names if n != new.name))
    changes: dict[bytes, bytes | None] = {
        RENAMED_FROM_KEY: json.dumps(formers).encode() if formers else None
    }
    if field_id(old) is not None:
        changes[FIELD_ID_KEY] = str(field_id(old)).encode()
    return with_field_metadata(new, changes)


def _check_rename(
    old_fields: list[pa.Field], position: int, field: pa.Field, path: str, taken: dict[int, str]
) -> None:
    """A field may take the slot of one older field, and not the name of another live one."""
    old = old_fields[position]
    if position in taken:
        raise refusal(
            RULE_RENAME_CONFLICT,
            path,
            f"{old.name} would be both {taken[position]} and {field.name}",
            describe_field(old),
            describe_field(field),
        )
    taken[position] = field.name
    if old.name != field.name:
        clash = next((f for f in old_fields if f.name == field.name and not is_tombstone(f)), None)
        if clash is not None:
            raise refusal(
                RULE_RENAME_CONFLICT,
                path,
                f"cannot rename {old.name} to {field.name}: a field of that name exists",
                describe_field(clash),
                describe_field(field),
            )
