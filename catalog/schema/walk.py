"""The walk over nested Arrow types: one type bottom-up, or a target type with its partner."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

import pyarrow as pa

ITEMS = "items"


KEY = "key"


VALUE = "value"


P = TypeVar("P")


T = TypeVar("T")


F = TypeVar("F")


class Kind(enum.Enum):
    STRUCT = "struct"
    LIST = "list"
    LARGE_LIST = "large_list"
    MAP = "map"
    ATOMIC = "atomic"


# By Arrow type id: one dict lookup per node (the walk visits every node of every schema of
# every collection several times per migration).
_KINDS: dict[int, Kind] = {
    pa.struct([]).id: Kind.STRUCT,
    pa.map_(pa.string(), pa.string()).id: Kind.MAP,
    pa.large_list(pa.string()).id: Kind.LARGE_LIST,
    pa.list_(pa.string()).id: Kind.LIST,
}


def kind_of(dtype: pa.DataType) -> Kind:
    return _KINDS.get(dtype.id, Kind.ATOMIC)


def _family(kind: Kind) -> Kind:
    """Lists and large lists are walked together (a list widens to a large list)."""
    return Kind.LIST if kind is Kind.LARGE_LIST else kind


def join_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def child_fields(dtype: pa.DataType) -> list[pa.Field]:
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
    dtype = as_data_type(dtype)
    kind = kind_of(dtype)
    if kind is Kind.STRUCT:
        results = [_visit_field(f, visitor, join_path(path, f.name)) for f in child_fields(dtype)]
        return visitor.struct(dtype, path, results)
    if kind in (Kind.LIST, Kind.LARGE_LIST):
        element = _visit_field(dtype.value_field, visitor, join_path(path, ITEMS))
        return visitor.list_(dtype, path, element)
    if kind is Kind.MAP:
        key = _visit_field(dtype.key_field, visitor, join_path(path, KEY))
        value = _visit_field(dtype.item_field, visitor, join_path(path, VALUE))
        return visitor.map_(dtype, path, key, value)
    return visitor.primitive(dtype, path)


def _visit_field(field: pa.Field, visitor: TypeVisitor[T, F], path: str) -> F:
    return visitor.field(field, path, visit(field.type, visitor, path))


class PartnerVisitor(Generic[P, T, F], ABC):
    """Visitor over a target type walked together with a partner (pyiceberg's visit_with_partner).

    The walk follows the target; the accessors find each node's partner. A target struct field
    without a partner is *added* (:meth:`added`, no descent); a node whose kind differs from its
    partner's goes to :meth:`kind_changed` (no descent), except a list partnered with a large
    list (either way), which is walked as a list: each visitor decides whether that change is
    allowed. :meth:`before` runs top-down on every
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
    dtype = as_data_type(dtype)
    kind = kind_of(dtype)
    if _family(kind) is not _family(kind_of(visitor.partner_type(partner))):
        return visitor.kind_changed(dtype, partner, path)
    visitor.before(dtype, partner, path)
    if kind is Kind.STRUCT:
        results: list[F] = []
        for field in child_fields(dtype):
            child_path = join_path(path, field.name)
            child = visitor.field_partner(partner, field, child_path)
            if child is None:
                results.append(visitor.added(field, child_path))
            else:
                results.append(_visit_partnered_field(field, child, visitor, child_path))
        return visitor.struct(dtype, partner, path, results)
    if kind in (Kind.LIST, Kind.LARGE_LIST):
        element_path = join_path(path, ITEMS)
        element_partner = visitor.element_partner(partner, element_path)
        element = _visit_partnered_field(dtype.value_field, element_partner, visitor, element_path)
        return visitor.list_(dtype, partner, path, element)
    if kind is Kind.MAP:
        key_path, value_path = join_path(path, KEY), join_path(path, VALUE)
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


def as_data_type(value: pa.DataType | pa.Schema) -> pa.DataType:
    if isinstance(value, pa.Schema):
        return pa.struct(list(value))
    if isinstance(value, pa.DataType):
        return value
    raise TypeError(f"expected a pyarrow Schema or DataType, got {type(value).__name__}")


def as_schema(value: pa.DataType | pa.Schema, what: str) -> pa.Schema:
    if isinstance(value, pa.Schema):
        return value
    if isinstance(value, pa.DataType) and pa.types.is_struct(value):
        return pa.schema(child_fields(value))
    raise TypeError(f"{what} must be a pyarrow Schema or struct type, got {value!r}")


def root_field(dtype: pa.DataType) -> pa.Field:
    return pa.field("", dtype)
