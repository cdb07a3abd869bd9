"""Reader fencing: a reader schema must be a valid migration target of the stored schemas."""

from __future__ import annotations

import attrs
import pyarrow as pa

from catalog.errors import ReaderFencedError, SchemaIncompatibleError
from catalog.schema.history import (
    FieldPartnerVisitor,
    describe_field,
    describe_type,
    is_tombstone,
    partner_child,
)
from catalog.schema.lossless import widens
from catalog.schema.rules import (
    RULE_FIELD_ADDED_NOT_NULLABLE,
    RULE_FIELD_READDED,
    RULE_MAP_KEY_CHANGED,
    RULE_NULLABILITY_TIGHTENED,
    RULE_READER_NARROWER_TYPE,
    RULE_READER_NEEDS_DELETED_FIELD,
    RULE_READER_NEEDS_NON_NULL,
    RULE_READER_TYPE_MISMATCH,
    RULE_READER_UNKNOWN_FIELD,
    RULE_TYPE_CHANGED,
    RULE_TYPE_NARROWED,
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


@attrs.frozen
class _TargetRules:
    """Which rule (and error class) a target-only check reports for each kind of refusal."""

    error: type[SchemaIncompatibleError]
    type_mismatch: str
    needs_non_null: str
    needs_deleted: str
    unknown: str
    map_key_changed: str
    allow_added: bool
    narrower: str
    allow_widening: bool


_READER_RULES = _TargetRules(
    error=ReaderFencedError,
    type_mismatch=RULE_READER_TYPE_MISMATCH,
    needs_non_null=RULE_READER_NEEDS_NON_NULL,
    needs_deleted=RULE_READER_NEEDS_DELETED_FIELD,
    unknown=RULE_READER_UNKNOWN_FIELD,
    map_key_changed=RULE_READER_TYPE_MISMATCH,
    allow_added=False,
    narrower=RULE_READER_NARROWER_TYPE,
    allow_widening=False,
)


PROJECTION_RULES = _TargetRules(
    error=SchemaIncompatibleError,
    type_mismatch=RULE_TYPE_CHANGED,
    needs_non_null=RULE_NULLABILITY_TIGHTENED,
    needs_deleted=RULE_FIELD_READDED,
    unknown=RULE_FIELD_ADDED_NOT_NULLABLE,
    map_key_changed=RULE_MAP_KEY_CHANGED,
    allow_added=True,
    narrower=RULE_TYPE_NARROWED,
    allow_widening=True,
)


@attrs.frozen
class TargetCheck(FieldPartnerVisitor[None, None]):
    """Checks that a target (a reader schema) is a projection of a source's migration target.

    Fields are matched by id or name and declared renames (:func:`partner_child`) at every depth,
    in any order; a target field may be nullable over
    a non-null source field but not the reverse. With ``allow_added`` a nullable target field the
    source lacks is accepted (it is filled with nulls).
    """

    rules: _TargetRules
    newer: bool = False  # the source is the newer type (catalog.schema.ids)

    def _refuse(self, rule: str, path: str, what: str, old: str | None, new: str | None) -> None:
        raise refusal(rule, path, what, old, new, self.rules.error)

    def _check_field(self, source: pa.Field, target: pa.Field, path: str) -> None:
        if source.nullable and not target.nullable:
            self._refuse(
                self.rules.needs_non_null,
                path,
                "the target needs a non-null field that is nullable",
                describe_field(source),
                describe_field(target),
            )

    def before(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        kind = kind_of(dtype)
        if kind is Kind.STRUCT:
            for field in child_fields(dtype):
                field_path = join_path(path, field.name)
                source = partner_child(partner.type, field, live_only=False, newer=self.newer)
                if source is not None and is_tombstone(source):
                    self._refuse(
                        self.rules.needs_deleted,
                        field_path,
                        "the target needs a deleted field",
                        f"{field.name} (deleted)",
                        describe_field(field),
                    )
                elif source is None and not (self.rules.allow_added and field.nullable):
                    self._refuse(
                        self.rules.unknown,
                        field_path,
                        "the target needs a field the source does not have",
                        None,
                        describe_field(field),
                    )
                elif source is not None:
                    self._check_field(source, field, field_path)
        elif kind in (Kind.LIST, Kind.LARGE_LIST):
            stored = kind_of(partner.type)
            if stored is Kind.LARGE_LIST and kind is Kind.LIST:
                self._refuse(
                    self.rules.narrower, path, "the target type is narrower than the stored one",
                    describe_type(partner.type), describe_type(dtype),
                )  # fmt: skip
            if stored is Kind.LIST and kind is Kind.LARGE_LIST and not self.rules.allow_widening:
                self._refuse(
                    self.rules.type_mismatch, path, "types differ", describe_type(partner.type),
                    describe_type(dtype),
                )  # fmt: skip
            self._check_field(partner.type.value_field, dtype.value_field, join_path(path, ITEMS))
        elif kind is Kind.MAP:
            old = partner.type
            if old.key_type != dtype.key_type or old.keys_sorted != dtype.keys_sorted:
                self._refuse(
                    self.rules.map_key_changed,
                    join_path(path, KEY),
                    "map keys differ",
                    describe_type(old),
                    describe_type(dtype),
                )
            self._check_field(old.item_field, dtype.item_field, join_path(path, VALUE))

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        self._refuse(
            self.rules.type_mismatch, path, "types differ", describe_type(partner.type), str(dtype)
        )

    def added(self, field: pa.Field, path: str) -> None:
        return None

    def struct(
        self, dtype: pa.StructType, partner: pa.Field, path: str, fields: list[None]
    ) -> None:
        return None

    def field(self, field: pa.Field, partner: pa.Field, path: str, type_result: None) -> None:
        return None

    def list_(self, dtype: pa.DataType, partner: pa.Field, path: str, element: None) -> None:
        return None

    def map_(self, dtype: pa.MapType, partner: pa.Field, path: str, key: None, value: None) -> None:
        return None

    def primitive(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        if dtype == partner.type or (self.rules.allow_widening and widens(partner.type, dtype)):
            return
        if widens(dtype, partner.type):  # the target is narrower: never truncated
            self._refuse(
                self.rules.narrower,
                path,
                "the target type is narrower than the stored one",
                str(partner.type),
                str(dtype),
            )
        self._refuse(self.rules.type_mismatch, path, "types differ", str(partner.type), str(dtype))


def check_reader(shard_type: pa.Schema, reader_schema: pa.Schema) -> None:
    """Fence a reader whose schema is not a projection of the shard's current schema.

    ``shard_type`` is the shard's migration type. Accepted: the current live schema and any
    projection of it, by name, in any order, at any depth; a nullable reader field over a non-null
    shard field. Refused with :class:`ReaderFencedError` (rules ``reader-needs-deleted-field``,
    ``reader-needs-non-null``, ``reader-unknown-field``, ``reader-type-mismatch``) otherwise, so a
    reader is never fed data of a shape it does not expect.
    """
    target = root_field(as_data_type(shard_type))
    visit_with_partner(as_data_type(reader_schema), target, TargetCheck(_READER_RULES))
