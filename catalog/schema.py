"""Arrow schema evolution: the rules of DESIGN.md section 6, migration types and data migration.

Everything here is one walk over nested Arrow types (struct, list, large_list, map; every other
type is atomic) with visitors, the way pyiceberg's ``visit``/``visit_with_partner`` work:

* :func:`visit` walks one type bottom-up (fingerprint, tombstone stripping).
* :func:`visit_with_partner` walks a *target* type together with a *partner* (the older type, a
  migration type, or an array of the older type), matching struct fields by name, and stops
  descending where the two disagree in kind. Evolution checks, reader fencing, diffs and data
  migration are visitors over it.

A *migration type* is an Arrow schema whose deleted fields stay in place as tombstones (nullable,
field metadata ``catalog.deleted = true``); fields added later are appended after them. It is the
whole history of a shard's schemas in one value: checking a new schema against it is the same as
checking it against every earlier schema, because compatibility is transitive and the tombstones
reserve every name ever used.

Paths are dotted: ``s`` (top-level), ``s.x`` (struct child), ``s.items.x`` (list or large_list
element), ``m.key`` / ``m.value`` (map key and value); the root of a bare DataType is ``""``.
List element and map entry field *names* are not significant (Parquet renames ``item`` to
``element`` on a round trip, and Arrow's own type equality ignores them): they are ignored by the
rules and by :func:`fingerprint`, and migrated data takes the names of the target type.

This module imports neither kazoo nor pyspark.
"""

from __future__ import annotations

import enum
import hashlib
import json
import types
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import BadInputError, ReaderFencedError, SchemaIncompatibleError

__all__ = [
    "RULE_DATA_MISMATCH",
    "RULE_FIELD_ADDED_NOT_AT_END",
    "RULE_FIELD_ADDED_NOT_NULLABLE",
    "RULE_FIELD_NAME_DUPLICATED",
    "RULE_FIELD_READDED",
    "RULE_FIELD_REORDERED",
    "RULE_MAP_KEY_CHANGED",
    "RULE_NULLABILITY_TIGHTENED",
    "RULE_READER_NEEDS_DELETED_FIELD",
    "RULE_READER_NEEDS_NON_NULL",
    "RULE_READER_TYPE_MISMATCH",
    "RULE_READER_UNKNOWN_FIELD",
    "RULE_TYPE_CHANGED",
    "TOMBSTONE_KEY",
    "PartnerVisitor",
    "TypeVisitor",
    "check_backward_compatible",
    "check_reader",
    "evolve",
    "fingerprint",
    "is_backward_compatible",
    "is_tombstone",
    "live_schema",
    "migrate",
    "migrate_batch",
    "migration_preserves_order",
    "migration_type",
    "schema_diff",
    "schema_from_bytes",
    "schema_to_bytes",
    "visit",
    "visit_with_partner",
]

TOMBSTONE_KEY = b"catalog.deleted"
_TOMBSTONE_VALUE = b"true"

RULE_TYPE_CHANGED = "type-changed"
RULE_NULLABILITY_TIGHTENED = "nullability-tightened"
RULE_FIELD_REORDERED = "field-reordered"
RULE_FIELD_ADDED_NOT_NULLABLE = "field-added-not-nullable"
RULE_FIELD_ADDED_NOT_AT_END = "field-added-not-at-end"
RULE_FIELD_READDED = "field-readded"
RULE_MAP_KEY_CHANGED = "map-key-changed"
RULE_FIELD_NAME_DUPLICATED = "field-name-duplicated"
RULE_DATA_MISMATCH = "data-mismatch"
RULE_READER_NEEDS_DELETED_FIELD = "reader-needs-deleted-field"
RULE_READER_NEEDS_NON_NULL = "reader-needs-non-null"
RULE_READER_UNKNOWN_FIELD = "reader-unknown-field"
RULE_READER_TYPE_MISMATCH = "reader-type-mismatch"

_OTHER = "or use Mechanism.REPLACEMENT or REWRITE"
_AT_END = "add it as a nullable field at the end under a new name"
_SUGGESTIONS = types.MappingProxyType(
    {
        RULE_TYPE_CHANGED: f"keep the old type; for the new one {_AT_END}, {_OTHER}",
        RULE_NULLABILITY_TIGHTENED: f"keep the field nullable, {_OTHER}",
        RULE_FIELD_REORDERED: f"keep the existing order (new fields go at the end), {_OTHER}",
        RULE_FIELD_ADDED_NOT_NULLABLE: f"add it as a nullable field, {_OTHER}",
        RULE_FIELD_ADDED_NOT_AT_END: f"add it after every existing field, {_OTHER}",
        RULE_FIELD_READDED: f"deleted names stay reserved: {_AT_END}, {_OTHER}",
        RULE_MAP_KEY_CHANGED: f"keep the map key; for a new map {_AT_END}, {_OTHER}",
        RULE_FIELD_NAME_DUPLICATED: "give every field of a struct a distinct name",
        RULE_DATA_MISMATCH: "pass the schema the data was written with",
        RULE_READER_NEEDS_DELETED_FIELD: "drop the field from the reader schema, or upgrade the "
        "reader to the shard's current schema",
        RULE_READER_NEEDS_NON_NULL: "declare the reader field nullable, or upgrade the reader",
        RULE_READER_UNKNOWN_FIELD: "drop the field from the reader schema, or register the "
        "schema that adds it first",
        RULE_READER_TYPE_MISMATCH: "read with the shard's current type for this field",
    }
)

_ITEMS = "items"
_KEY = "key"
_VALUE = "value"

P = TypeVar("P")
T = TypeVar("T")
F = TypeVar("F")


# --- the walk ---------------------------------------------------------------------------------


class _Kind(enum.Enum):
    STRUCT = "struct"
    LIST = "list"
    LARGE_LIST = "large_list"
    MAP = "map"
    ATOMIC = "atomic"


def _kind(dtype: pa.DataType) -> _Kind:
    if pa.types.is_struct(dtype):
        return _Kind.STRUCT
    if pa.types.is_map(dtype):
        return _Kind.MAP
    if pa.types.is_large_list(dtype):
        return _Kind.LARGE_LIST
    if pa.types.is_list(dtype):
        return _Kind.LIST
    return _Kind.ATOMIC


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _fields(dtype: pa.DataType) -> list[pa.Field]:
    return [dtype.field(i) for i in range(dtype.num_fields)]


class TypeVisitor(Generic[T, F], ABC):
    """Bottom-up visitor over one Arrow type; ``T`` is a type's result, ``F`` a field's."""

    @abstractmethod
    def struct(self, dtype: pa.StructType, path: str, fields: list[F]) -> T: ...

    @abstractmethod
    def field(self, field: pa.Field, path: str, type_result: T) -> F: ...

    @abstractmethod
    def list_(self, dtype: pa.DataType, path: str, element: F) -> T: ...

    @abstractmethod
    def map_(self, dtype: pa.MapType, path: str, key: F, value: F) -> T: ...

    @abstractmethod
    def primitive(self, dtype: pa.DataType, path: str) -> T: ...


def visit(dtype: pa.DataType | pa.Schema, visitor: TypeVisitor[T, F], path: str = "") -> T:
    """Walk ``dtype`` (a Schema is the struct of its fields) bottom-up with ``visitor``."""
    dtype = _as_type(dtype)
    kind = _kind(dtype)
    if kind is _Kind.STRUCT:
        results = [_visit_field(f, visitor, _join(path, f.name)) for f in _fields(dtype)]
        return visitor.struct(dtype, path, results)
    if kind in (_Kind.LIST, _Kind.LARGE_LIST):
        element = _visit_field(dtype.value_field, visitor, _join(path, _ITEMS))
        return visitor.list_(dtype, path, element)
    if kind is _Kind.MAP:
        key = _visit_field(dtype.key_field, visitor, _join(path, _KEY))
        value = _visit_field(dtype.item_field, visitor, _join(path, _VALUE))
        return visitor.map_(dtype, path, key, value)
    return visitor.primitive(dtype, path)


def _visit_field(field: pa.Field, visitor: TypeVisitor[T, F], path: str) -> F:
    return visitor.field(field, path, visit(field.type, visitor, path))


class PartnerVisitor(Generic[P, T, F], ABC):
    """Visitor over a target type walked together with a partner (pyiceberg's visit_with_partner).

    The walk follows the target; the accessors find each node's partner. A target struct field
    without a partner is *added* (:meth:`added`, no descent); a node whose kind differs from its
    partner's goes to :meth:`kind_changed` (no descent). :meth:`before` runs top-down on every
    matched node before its children, so refusals name the outermost offending path first.
    """

    @abstractmethod
    def partner_type(self, partner: P) -> pa.DataType: ...

    @abstractmethod
    def field_partner(self, partner: P, field: pa.Field, path: str) -> P | None: ...

    @abstractmethod
    def element_partner(self, partner: P, path: str) -> P: ...

    @abstractmethod
    def key_partner(self, partner: P, path: str) -> P: ...

    @abstractmethod
    def value_partner(self, partner: P, path: str) -> P: ...

    def before(self, dtype: pa.DataType, partner: P, path: str) -> None:
        """Top-down hook on a node whose kind matches its partner's; no-op by default."""

    @abstractmethod
    def kind_changed(self, dtype: pa.DataType, partner: P, path: str) -> T: ...

    @abstractmethod
    def added(self, field: pa.Field, path: str) -> F: ...

    @abstractmethod
    def struct(self, dtype: pa.StructType, partner: P, path: str, fields: list[F]) -> T: ...

    @abstractmethod
    def field(self, field: pa.Field, partner: P, path: str, type_result: T) -> F: ...

    @abstractmethod
    def list_(self, dtype: pa.DataType, partner: P, path: str, element: F) -> T: ...

    @abstractmethod
    def map_(self, dtype: pa.MapType, partner: P, path: str, key: F, value: F) -> T: ...

    @abstractmethod
    def primitive(self, dtype: pa.DataType, partner: P, path: str) -> T: ...


def visit_with_partner(
    dtype: pa.DataType | pa.Schema, partner: P, visitor: PartnerVisitor[P, T, F], path: str = ""
) -> T:
    """Walk ``dtype`` together with ``partner``; see :class:`PartnerVisitor`."""
    dtype = _as_type(dtype)
    kind = _kind(dtype)
    if kind is not _kind(visitor.partner_type(partner)):
        return visitor.kind_changed(dtype, partner, path)
    visitor.before(dtype, partner, path)
    if kind is _Kind.STRUCT:
        results: list[F] = []
        for field in _fields(dtype):
            child_path = _join(path, field.name)
            child = visitor.field_partner(partner, field, child_path)
            if child is None:
                results.append(visitor.added(field, child_path))
            else:
                results.append(_visit_partnered_field(field, child, visitor, child_path))
        return visitor.struct(dtype, partner, path, results)
    if kind in (_Kind.LIST, _Kind.LARGE_LIST):
        element_path = _join(path, _ITEMS)
        element_partner = visitor.element_partner(partner, element_path)
        element = _visit_partnered_field(dtype.value_field, element_partner, visitor, element_path)
        return visitor.list_(dtype, partner, path, element)
    if kind is _Kind.MAP:
        key_path, value_path = _join(path, _KEY), _join(path, _VALUE)
        key_partner = visitor.key_partner(partner, key_path)
        key = _visit_partnered_field(dtype.key_field, key_partner, visitor, key_path)
        value_partner = visitor.value_partner(partner, value_path)
        value = _visit_partnered_field(dtype.item_field, value_partner, visitor, value_path)
        return visitor.map_(dtype, partner, path, key, value)
    return visitor.primitive(dtype, partner, path)


def _visit_partnered_field(
    field: pa.Field, partner: P, visitor: PartnerVisitor[P, T, F], path: str
) -> F:
    return visitor.field(
        field, partner, path, visit_with_partner(field.type, partner, visitor, path)
    )


# --- helpers over types -----------------------------------------------------------------------


def _as_type(value: pa.DataType | pa.Schema) -> pa.DataType:
    if isinstance(value, pa.Schema):
        return pa.struct(list(value))
    if isinstance(value, pa.DataType):
        return value
    raise TypeError(f"expected a pyarrow Schema or DataType, got {type(value).__name__}")


def _as_schema(value: pa.DataType | pa.Schema, what: str) -> pa.Schema:
    if isinstance(value, pa.Schema):
        return value
    if isinstance(value, pa.DataType) and pa.types.is_struct(value):
        return pa.schema(_fields(value))
    raise TypeError(f"{what} must be a pyarrow Schema or struct type, got {value!r}")


def _root(dtype: pa.DataType) -> pa.Field:
    return pa.field("", dtype)


def is_tombstone(field: pa.Field) -> bool:
    """True when ``field`` is a deleted field kept in a migration type."""
    metadata = field.metadata
    return bool(metadata) and metadata.get(TOMBSTONE_KEY) == _TOMBSTONE_VALUE


def _tombstone(field: pa.Field) -> pa.Field:
    metadata = dict(field.metadata or {})
    metadata[TOMBSTONE_KEY] = _TOMBSTONE_VALUE
    return pa.field(field.name, field.type, nullable=True, metadata=metadata)


def _child(dtype: pa.DataType, name: str) -> pa.Field | None:
    """The live child ``name`` of struct ``dtype``, else its tombstone, else None."""
    found = None
    for field in _fields(dtype):
        if field.name == name:
            if not is_tombstone(field):
                return field
            found = field
    return found


def _describe(dtype: pa.DataType) -> str:
    return str(_live_type(dtype))


def _describe_field(field: pa.Field) -> str:
    return f"{field.name}: {_describe(field.type)}{'' if field.nullable else ' not null'}"


def _refuse(
    rule: str,
    path: str,
    what: str,
    old: str | None,
    new: str | None,
    error: type[SchemaIncompatibleError] = SchemaIncompatibleError,
) -> SchemaIncompatibleError:
    suggestion = _SUGGESTIONS[rule]
    shown = [x for x in (old, new) if x is not None]
    change = f" ({' -> '.join(shown)})" if shown else ""
    message = f"{path or '<root>'}: {what}{change}; rule {rule}; fix: {suggestion}"
    return error(message, rule=rule, path=path, old=old, new=new, suggestion=suggestion)


def _check_unique_names(dtype: pa.DataType, path: str) -> None:
    seen: set[str] = set()
    for field in _fields(dtype):
        if field.name in seen:
            raise _refuse(
                RULE_FIELD_NAME_DUPLICATED,
                _join(path, field.name),
                "a struct has two fields of this name",
                None,
                _describe(dtype),
            )
        seen.add(field.name)


# --- live types and tombstones ----------------------------------------------------------------


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
        return _rebuild_list(dtype, element)

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


def _rebuild_list(dtype: pa.DataType, element: pa.Field) -> pa.DataType:
    return pa.large_list(element) if _kind(dtype) is _Kind.LARGE_LIST else pa.list_(element)


def _live_type(dtype: pa.DataType) -> pa.DataType:
    return visit(dtype, _StripTombstones())


def live_schema(mtype: pa.Schema) -> pa.Schema:
    """The live Arrow schema of a migration type: every tombstone removed, at every depth."""
    return pa.schema(_fields(_live_type(_as_type(mtype))), metadata=mtype.metadata)


def _reject_tombstones(schema: pa.Schema, what: str) -> None:
    paths = visit(schema, _TombstonePaths())
    if paths:
        raise BadInputError(
            f"{what} carries tombstone metadata ({TOMBSTONE_KEY.decode()}) at {', '.join(paths)}; "
            "pass a live schema",
            paths=paths,
        )


def migration_type(schema: pa.Schema) -> pa.Schema:
    """The migration type of a shard's first schema: the schema itself, with no tombstones."""
    _reject_tombstones(schema, "the first schema")
    _check(_as_type(schema), _as_type(schema), _Evolve())
    return schema


# --- evolution --------------------------------------------------------------------------------


class _Evolve(PartnerVisitor[pa.Field, pa.DataType, pa.Field]):
    """Checks a new live type against a migration type and builds the next migration type.

    The partner is the migration-type field; ``before`` enforces the field rules top-down, the
    bottom-up callbacks rebuild the type with tombstones kept and added fields appended.
    """

    def partner_type(self, partner: pa.Field) -> pa.DataType:
        return partner.type

    def field_partner(self, partner: pa.Field, field: pa.Field, path: str) -> pa.Field | None:
        return _child(partner.type, field.name)

    def element_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.value_field

    def key_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.key_field

    def value_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.item_field

    def before(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        kind = _kind(dtype)
        if kind is _Kind.STRUCT:
            self._check_struct(dtype, partner.type, path)
        elif kind in (_Kind.LIST, _Kind.LARGE_LIST):
            _check_relaxed(partner.type.value_field, dtype.value_field, _join(path, _ITEMS))
        elif kind is _Kind.MAP:
            old = partner.type
            if old.key_type != dtype.key_type or old.keys_sorted != dtype.keys_sorted:
                raise _refuse(
                    RULE_MAP_KEY_CHANGED,
                    _join(path, _KEY),
                    "cannot change a map's key",
                    _describe(old),
                    _describe(dtype),
                )
            _check_relaxed(old.item_field, dtype.item_field, _join(path, _VALUE))

    @staticmethod
    def _check_struct(new: pa.DataType, old: pa.DataType, path: str) -> None:
        _check_unique_names(new, path)
        old_fields = _fields(old)
        positions = {f.name: i for i, f in enumerate(old_fields) if not is_tombstone(f)}
        deleted = {f.name for f in old_fields if is_tombstone(f)}
        last = -1
        first_added: tuple[str, pa.Field] | None = None
        for field in _fields(new):
            field_path = _join(path, field.name)
            if field.name in deleted and field.name not in positions:
                raise _refuse(
                    RULE_FIELD_READDED,
                    field_path,
                    "cannot re-add a deleted field",
                    f"{field.name} (deleted)",
                    _describe_field(field),
                )
            position = positions.get(field.name)
            if position is None:
                if not field.nullable:
                    raise _refuse(
                        RULE_FIELD_ADDED_NOT_NULLABLE,
                        field_path,
                        "cannot add a non-nullable field",
                        None,
                        _describe_field(field),
                    )
                first_added = first_added or (field_path, field)
                continue
            if first_added is not None:
                added_path, added = first_added
                raise _refuse(
                    RULE_FIELD_ADDED_NOT_AT_END,
                    added_path,
                    f"cannot add a field before the existing field {field.name}",
                    None,
                    _describe_field(added),
                )
            if position < last:
                raise _refuse(
                    RULE_FIELD_REORDERED,
                    field_path,
                    "cannot reorder fields",
                    ", ".join(f.name for f in old_fields if not is_tombstone(f)),
                    ", ".join(f.name for f in _fields(new)),
                )
            last = position
            _check_relaxed(old_fields[position], field, field_path)

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> pa.DataType:
        raise _refuse(
            RULE_TYPE_CHANGED, path, "cannot change a type", _describe(partner.type), str(dtype)
        )

    def added(self, field: pa.Field, path: str) -> pa.Field:
        return field

    def struct(
        self, dtype: pa.StructType, partner: pa.Field, path: str, fields: list[pa.Field]
    ) -> pa.DataType:
        results = {f.name: f for f in fields}
        merged: list[pa.Field] = []
        for old in _fields(partner.type):
            if is_tombstone(old):
                merged.append(old)
            elif old.name in results:
                merged.append(results.pop(old.name))
            else:
                merged.append(_tombstone(old))
        merged.extend(results.values())  # what is left was added; the rules put it at the end
        return pa.struct(merged)

    def field(
        self, field: pa.Field, partner: pa.Field, path: str, type_result: pa.DataType
    ) -> pa.Field:
        return pa.field(field.name, type_result, field.nullable, field.metadata)

    def list_(
        self, dtype: pa.DataType, partner: pa.Field, path: str, element: pa.Field
    ) -> pa.DataType:
        return _rebuild_list(dtype, element)

    def map_(
        self, dtype: pa.MapType, partner: pa.Field, path: str, key: pa.Field, value: pa.Field
    ) -> pa.DataType:
        return pa.map_(key, value, keys_sorted=dtype.keys_sorted)

    def primitive(self, dtype: pa.DataType, partner: pa.Field, path: str) -> pa.DataType:
        if dtype != partner.type:
            raise _refuse(
                RULE_TYPE_CHANGED, path, "cannot change a type", str(partner.type), str(dtype)
            )
        return dtype


def _check_relaxed(old: pa.Field, new: pa.Field, path: str) -> None:
    if old.nullable and not new.nullable:
        raise _refuse(
            RULE_NULLABILITY_TIGHTENED,
            path,
            "cannot make a nullable field non-nullable",
            _describe_field(old),
            _describe_field(new),
        )


def _check(old: pa.DataType, new: pa.DataType, visitor: _Evolve) -> pa.DataType:
    return visit_with_partner(new, _root(old), visitor)


def check_backward_compatible(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> None:
    """Raise :class:`SchemaIncompatibleError` unless data of ``old`` can be migrated to ``new``.

    A Schema is the struct of its fields. ``old`` may also be a migration type: its tombstones
    then reserve the deleted names, which checks ``new`` against the whole history.
    """
    _check(_as_type(old), _as_type(new), _Evolve())


def is_backward_compatible(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> bool:
    """True when ``new`` follows the evolution rules of DESIGN.md section 6 from ``old``."""
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
    _reject_tombstones(new, "the new schema")
    evolved = _check(_as_type(history), _as_type(new), _Evolve())
    result = pa.schema(_fields(evolved), metadata=new.metadata)
    if result.equals(history, check_metadata=True):
        return history
    return result


# --- reader fencing ---------------------------------------------------------------------------


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


_READER_RULES = _TargetRules(
    error=ReaderFencedError,
    type_mismatch=RULE_READER_TYPE_MISMATCH,
    needs_non_null=RULE_READER_NEEDS_NON_NULL,
    needs_deleted=RULE_READER_NEEDS_DELETED_FIELD,
    unknown=RULE_READER_UNKNOWN_FIELD,
    map_key_changed=RULE_READER_TYPE_MISMATCH,
    allow_added=False,
)
_PROJECTION_RULES = _TargetRules(
    error=SchemaIncompatibleError,
    type_mismatch=RULE_TYPE_CHANGED,
    needs_non_null=RULE_NULLABILITY_TIGHTENED,
    needs_deleted=RULE_FIELD_READDED,
    unknown=RULE_FIELD_ADDED_NOT_NULLABLE,
    map_key_changed=RULE_MAP_KEY_CHANGED,
    allow_added=True,
)


@attrs.frozen
class _TargetCheck(PartnerVisitor[pa.Field, None, None]):
    """Checks that a target (a reader schema) is a projection of a source's migration target.

    Fields are matched by name at every depth, in any order; a target field may be nullable over
    a non-null source field but not the reverse. With ``allow_added`` a nullable target field the
    source lacks is accepted (it is filled with nulls).
    """

    rules: _TargetRules

    def partner_type(self, partner: pa.Field) -> pa.DataType:
        return partner.type

    def field_partner(self, partner: pa.Field, field: pa.Field, path: str) -> pa.Field | None:
        child = _child(partner.type, field.name)
        return None if child is None or is_tombstone(child) else child

    def element_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.value_field

    def key_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.key_field

    def value_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.item_field

    def _refuse(self, rule: str, path: str, what: str, old: str | None, new: str | None) -> None:
        raise _refuse(rule, path, what, old, new, self.rules.error)

    def _check_field(self, source: pa.Field, target: pa.Field, path: str) -> None:
        if source.nullable and not target.nullable:
            self._refuse(
                self.rules.needs_non_null,
                path,
                "the target needs a non-null field that is nullable",
                _describe_field(source),
                _describe_field(target),
            )

    def before(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        kind = _kind(dtype)
        if kind is _Kind.STRUCT:
            for field in _fields(dtype):
                field_path = _join(path, field.name)
                source = _child(partner.type, field.name)
                if source is not None and is_tombstone(source):
                    self._refuse(
                        self.rules.needs_deleted,
                        field_path,
                        "the target needs a deleted field",
                        f"{field.name} (deleted)",
                        _describe_field(field),
                    )
                elif source is None and not (self.rules.allow_added and field.nullable):
                    self._refuse(
                        self.rules.unknown,
                        field_path,
                        "the target needs a field the source does not have",
                        None,
                        _describe_field(field),
                    )
                elif source is not None:
                    self._check_field(source, field, field_path)
        elif kind in (_Kind.LIST, _Kind.LARGE_LIST):
            self._check_field(partner.type.value_field, dtype.value_field, _join(path, _ITEMS))
        elif kind is _Kind.MAP:
            old = partner.type
            if old.key_type != dtype.key_type or old.keys_sorted != dtype.keys_sorted:
                self._refuse(
                    self.rules.map_key_changed,
                    _join(path, _KEY),
                    "map keys differ",
                    _describe(old),
                    _describe(dtype),
                )
            self._check_field(old.item_field, dtype.item_field, _join(path, _VALUE))

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        self._refuse(
            self.rules.type_mismatch, path, "types differ", _describe(partner.type), str(dtype)
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
        if dtype != partner.type:
            self._refuse(
                self.rules.type_mismatch, path, "types differ", str(partner.type), str(dtype)
            )


def check_reader(shard_type: pa.Schema, reader_schema: pa.Schema) -> None:
    """Fence a reader whose schema is not a projection of the shard's current schema.

    ``shard_type`` is the shard's migration type. Accepted: the current live schema and any
    projection of it, by name, in any order, at any depth; a nullable reader field over a non-null
    shard field. Refused with :class:`ReaderFencedError` (rules ``reader-needs-deleted-field``,
    ``reader-needs-non-null``, ``reader-unknown-field``, ``reader-type-mismatch``) otherwise, so a
    reader is never fed data of a shape it does not expect.
    """
    visit_with_partner(
        _as_type(reader_schema), _root(_as_type(shard_type)), _TargetCheck(_READER_RULES)
    )


# --- diff -------------------------------------------------------------------------------------


@attrs.define
class _Diff(PartnerVisitor[pa.Field, None, None]):
    """Collects the dotted paths added, dropped, relaxed and otherwise changed from old to new."""

    added_paths: list[str] = attrs.Factory(list)
    dropped: list[str] = attrs.Factory(list)
    relaxed: list[str] = attrs.Factory(list)
    changed: list[str] = attrs.Factory(list)

    def partner_type(self, partner: pa.Field) -> pa.DataType:
        return partner.type

    def field_partner(self, partner: pa.Field, field: pa.Field, path: str) -> pa.Field | None:
        child = _child(partner.type, field.name)
        return None if child is None or is_tombstone(child) else child

    def element_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.value_field

    def key_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.key_field

    def value_partner(self, partner: pa.Field, path: str) -> pa.Field:
        return partner.type.item_field

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        self.changed.append(path)

    def added(self, field: pa.Field, path: str) -> None:
        self.added_paths.append(path)

    def struct(
        self, dtype: pa.StructType, partner: pa.Field, path: str, fields: list[None]
    ) -> None:
        names = {f.name for f in _fields(dtype)}
        self.dropped.extend(
            _join(path, f.name)
            for f in _fields(partner.type)
            if not is_tombstone(f) and f.name not in names
        )

    def field(self, field: pa.Field, partner: pa.Field, path: str, type_result: None) -> None:
        if field.nullable and not partner.nullable:
            self.relaxed.append(path)
        elif partner.nullable and not field.nullable:
            self.changed.append(path)

    def list_(self, dtype: pa.DataType, partner: pa.Field, path: str, element: None) -> None:
        return None

    def map_(self, dtype: pa.MapType, partner: pa.Field, path: str, key: None, value: None) -> None:
        if dtype.keys_sorted != partner.type.keys_sorted:
            self.changed.append(_join(path, _KEY))

    def primitive(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        if dtype != partner.type:
            self.changed.append(path)


def schema_diff(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> dict[str, list[str]]:
    """Dotted paths ``added``, ``dropped``, ``relaxed`` (non-null -> nullable) from old to new.

    Also ``changed``: paths whose type changed or whose nullability was tightened (never part of
    a valid evolution; :func:`check_backward_compatible` says why). Only the outermost path of an
    added or dropped subtree is listed.
    """
    diff = _Diff()
    visit_with_partner(_as_type(new), _root(_as_type(old)), diff)
    return {
        "added": diff.added_paths,
        "dropped": diff.dropped,
        "relaxed": diff.relaxed,
        "changed": list(dict.fromkeys(diff.changed)),  # a path may both tighten and retype
    }


def migration_preserves_order(
    from_type: pa.DataType | pa.Schema, to_type: pa.DataType | pa.Schema
) -> bool:
    """True when migrating sorted data from ``from_type`` to ``to_type`` keeps it sorted.

    Appending null fields and relaxing nullability keep the order; deleting any field may not
    (the sort order over the remaining fields can change), so compaction must re-sort then.
    Raises :class:`SchemaIncompatibleError` when the migration is not allowed at all.
    """
    check_backward_compatible(from_type, to_type)
    return not schema_diff(from_type, to_type)["dropped"]


# --- data migration ---------------------------------------------------------------------------


@attrs.frozen
class _Column:
    """The data at one node of the source type: its values and the field it was declared as."""

    values: pa.Array
    field: pa.Field


def _data_mismatch(path: str, what: str, declared: Any, actual: Any) -> SchemaIncompatibleError:
    return _refuse(RULE_DATA_MISMATCH, path, what, str(declared), str(actual))


def _list_bounds(values: pa.Array) -> tuple[int, int]:
    if len(values) == 0:
        return 0, 0
    offsets = values.offsets
    return int(offsets[0].as_py()), int(offsets[len(offsets) - 1].as_py())


def _list_offsets(values: pa.Array) -> pa.Array:
    """The offsets of a list array, rebased to 0 so they index the sliced child values."""
    offset_type = pa.int64() if _kind(values.type) is _Kind.LARGE_LIST else pa.int32()
    if len(values) == 0:
        return pa.array([0], offset_type)
    offsets = values.offsets
    start = offsets[0].as_py()
    if start == 0 and offsets.offset == 0:
        return offsets
    # A fresh array: from_arrays refuses a validity mask over sliced offsets.
    return pc.subtract(offsets, pa.scalar(start, offset_type))


def _null_mask(values: pa.Array) -> pa.Array | None:
    return values.is_null() if values.null_count else None


class _Migrate(PartnerVisitor[_Column, pa.Array, "pa.Array | None"]):
    """Rebuilds arrays of a source type as the target type, zero-copy wherever data is kept.

    Added fields become typed nulls, deleted fields are not carried over, nullability comes from
    the target. Parent validity and slice offsets are kept; list and map children are sliced to
    the parent's range so a slice never migrates more rows than it holds.
    """

    def partner_type(self, partner: _Column) -> pa.DataType:
        return partner.field.type

    def field_partner(self, partner: _Column, field: pa.Field, path: str) -> _Column | None:
        declared = _child(partner.field.type, field.name)
        if declared is None or is_tombstone(declared):
            return None
        index = partner.values.type.get_field_index(field.name)
        if index < 0:
            raise _data_mismatch(
                path, "the data has no such field", partner.field.type, partner.values.type
            )
        return _Column(partner.values.field(index), declared)

    def element_partner(self, partner: _Column, path: str) -> _Column:
        start, end = _list_bounds(partner.values)
        child = partner.values.values.slice(start, end - start)
        return _Column(child, partner.field.type.value_field)

    def _entries(self, partner: _Column) -> pa.Array:
        start, end = _list_bounds(partner.values)
        return partner.values.values.slice(start, end - start)

    def key_partner(self, partner: _Column, path: str) -> _Column:
        return _Column(self._entries(partner).field(0), partner.field.type.key_field)

    def value_partner(self, partner: _Column, path: str) -> _Column:
        return _Column(self._entries(partner).field(1), partner.field.type.item_field)

    def before(self, dtype: pa.DataType, partner: _Column, path: str) -> None:
        if _kind(partner.values.type) is not _kind(partner.field.type):
            raise _data_mismatch(
                path,
                "the data is not of its declared type",
                partner.field.type,
                partner.values.type,
            )

    def kind_changed(self, dtype: pa.DataType, partner: _Column, path: str) -> pa.Array:
        raise _refuse(
            RULE_TYPE_CHANGED, path, "cannot change a type", str(partner.field.type), str(dtype)
        )

    def added(self, field: pa.Field, path: str) -> pa.Array | None:
        return None  # the parent struct knows the length to fill

    def struct(
        self, dtype: pa.StructType, partner: _Column, path: str, fields: list[pa.Array | None]
    ) -> pa.Array:
        values = partner.values
        targets = _fields(dtype)
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
        array_class = pa.LargeListArray if _kind(dtype) is _Kind.LARGE_LIST else pa.ListArray
        return array_class.from_arrays(
            _list_offsets(values), element, type=dtype, mask=_null_mask(values)
        )

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
            _list_offsets(values), key, value, type=dtype, mask=_null_mask(values)
        )

    def primitive(self, dtype: pa.DataType, partner: _Column, path: str) -> pa.Array:
        if partner.values.type != dtype:
            raise _data_mismatch(
                path, "the data is not of its declared type", dtype, partner.values.type
            )
        return partner.values


def _migrate_array(values: pa.Array, source: pa.Field, target: pa.DataType, path: str) -> pa.Array:
    if values.type == target:
        return values
    return visit_with_partner(target, _Column(values, source), _Migrate(), path)


def _migrate_any_array(
    values: pa.Array | pa.ChunkedArray, source: pa.Field, target: pa.DataType, path: str
) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.ChunkedArray):
        chunks = [_migrate_array(c, source, target, path) for c in values.chunks]
        return pa.chunked_array(chunks, type=target)
    return _migrate_array(values, source, target, path)


def _check_migration(source: pa.DataType, target: pa.DataType, projection: bool) -> None:
    if projection:
        visit_with_partner(target, _root(source), _TargetCheck(_PROJECTION_RULES))
    else:
        _check(source, target, _Evolve())


def _migrate_columns(
    data: pa.RecordBatch | pa.Table,
    source: pa.Schema,
    target: pa.Schema,
    passthrough: Sequence[str],
) -> pa.RecordBatch | pa.Table:
    names = data.schema.names
    unexpected = [n for n in names if source.get_field_index(n) < 0 and n not in passthrough]
    if unexpected:
        raise _data_mismatch(
            unexpected[0], "the data has columns outside the schema", source, data.schema
        )
    columns: list[pa.Array | pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    source_type = _as_type(source)
    for field in target:
        declared = _child(source_type, field.name)
        if declared is None or is_tombstone(declared):
            columns.append(_nulls_like(data, field.type))
        else:
            index = data.schema.get_field_index(field.name)
            if index < 0:
                raise _data_mismatch(field.name, "the data has no such column", source, data.schema)
            columns.append(_migrate_any_array(data.column(index), declared, field.type, field.name))
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
    not of ``from_type``.
    """
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        source = _as_schema(from_type, "from_type")
        target = _as_schema(to_type, "to_type")
        _check_migration(_as_type(source), _as_type(target), projection)
        return _migrate_columns(data, source, target, passthrough)
    if passthrough:
        raise TypeError("passthrough columns need a RecordBatch or a Table")
    source_type, target_type = _as_type(from_type), _as_type(to_type)
    _check_migration(source_type, target_type, projection)
    return _migrate_any_array(data, _root(source_type), target_type, "")


def migrate_batch(
    batch: pa.RecordBatch | pa.Table,
    from_schema: pa.Schema,
    to_schema: pa.Schema,
    passthrough: Sequence[str] = ("_ts", "_diff"),
    *,
    projection: bool = False,
) -> pa.RecordBatch | pa.Table:
    """:func:`migrate` for a shard batch: the ``_ts`` and ``_diff`` columns pass through."""
    return migrate(batch, from_schema, to_schema, passthrough=passthrough, projection=projection)


# --- fingerprint ------------------------------------------------------------------------------

_FINGERPRINT_VERSION = 1


def _fixed_width_name(dtype: pa.DataType) -> str | None:
    checks = (
        (pa.types.is_null, "null"),
        (pa.types.is_boolean, "bool"),
        (pa.types.is_int8, "int8"),
        (pa.types.is_int16, "int16"),
        (pa.types.is_int32, "int32"),
        (pa.types.is_int64, "int64"),
        (pa.types.is_uint8, "uint8"),
        (pa.types.is_uint16, "uint16"),
        (pa.types.is_uint32, "uint32"),
        (pa.types.is_uint64, "uint64"),
        (pa.types.is_float16, "float16"),
        (pa.types.is_float32, "float32"),
        (pa.types.is_float64, "float64"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "large_string"),
        (pa.types.is_binary, "binary"),
        (pa.types.is_large_binary, "large_binary"),
        (pa.types.is_date32, "date32"),
        (pa.types.is_date64, "date64"),
    )
    for check, name in checks:
        if check(dtype):
            return name
    return None


def _canonical_atomic(dtype: pa.DataType) -> dict[str, Any]:
    name = _fixed_width_name(dtype)
    if name is not None:
        return {"type": name}
    if pa.types.is_timestamp(dtype):
        return {"type": "timestamp", "unit": dtype.unit, "tz": dtype.tz}
    if pa.types.is_time32(dtype) or pa.types.is_time64(dtype):
        return {"type": f"time{dtype.bit_width}", "unit": dtype.unit}
    if pa.types.is_duration(dtype):
        return {"type": "duration", "unit": dtype.unit}
    if pa.types.is_decimal(dtype):
        return {
            "type": f"decimal{dtype.bit_width}",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if pa.types.is_fixed_size_binary(dtype):
        return {"type": "fixed_size_binary", "byte_width": dtype.byte_width}
    if pa.types.is_fixed_size_list(dtype):
        return {
            "type": "fixed_size_list",
            "size": dtype.list_size,
            "element": _canonical_element(visit(dtype.value_field.type, _Canonical()), dtype),
        }
    if pa.types.is_dictionary(dtype):
        return {
            "type": "dictionary",
            "index": visit(dtype.index_type, _Canonical()),
            "value": visit(dtype.value_type, _Canonical()),
            "ordered": dtype.ordered,
        }
    # Types without a dedicated encoding fall back to Arrow's own spelling of them.
    return {"type": "arrow", "repr": str(dtype)}


def _canonical_element(type_result: dict[str, Any], dtype: pa.DataType) -> dict[str, Any]:
    return {"nullable": dtype.value_field.nullable, "type": type_result}


class _Canonical(TypeVisitor[dict[str, Any], dict[str, Any]]):
    """A JSON-ready canonical form of a type: names, order, types, nullability; no metadata."""

    def struct(
        self, dtype: pa.StructType, path: str, fields: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {"type": "struct", "fields": fields}

    def field(self, field: pa.Field, path: str, type_result: dict[str, Any]) -> dict[str, Any]:
        return {"name": field.name, "nullable": field.nullable, "type": type_result}

    def list_(self, dtype: pa.DataType, path: str, element: dict[str, Any]) -> dict[str, Any]:
        return {"type": _kind(dtype).value, "element": _unnamed(element)}

    def map_(
        self, dtype: pa.MapType, path: str, key: dict[str, Any], value: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "type": "map",
            "key": _unnamed(key),
            "value": _unnamed(value),
            "keys_sorted": dtype.keys_sorted,
        }

    def primitive(self, dtype: pa.DataType, path: str) -> dict[str, Any]:
        return _canonical_atomic(dtype)


def _unnamed(field: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in field.items() if k != "name"}


def fingerprint(schema: pa.Schema) -> str:
    """A stable hex SHA-256 of the canonical schema.

    Covers field order, names, types (with their parameters: units, timezones, precision and
    scale, nested children) and nullability; ignores all metadata and the names of list element
    and map entry fields. The canonical form is built here as sorted, compact JSON, so it is the
    same across processes, platforms and Python versions.
    """
    canonical = {
        "fingerprint_version": _FINGERPRINT_VERSION,
        "fields": visit(_as_type(schema), _Canonical())["fields"],
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# --- serialization ----------------------------------------------------------------------------


def schema_to_bytes(schema: pa.Schema) -> bytes:
    """The Arrow IPC encoding of ``schema``, with every field's metadata (tombstones) kept."""
    return bytes(schema.serialize().to_pybytes())


def schema_from_bytes(data: bytes) -> pa.Schema:
    """The schema :func:`schema_to_bytes` encoded."""
    return pa.ipc.read_schema(pa.py_buffer(data))
