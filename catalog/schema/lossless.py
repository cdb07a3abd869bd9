"""Lossless widening: the type changes an evolution may make without rewriting data.

A field's type may move to a wider one when every value of the old type has exactly one value of
the new type that equals it (so old batches are cast when read, on either engine, and the
result is the same bits). Each allowed step has a rule id, shown in refusals and in
docs/design-evolution.md; any other change of a type stays ``type-changed``. Widenings compose:
``int8 -> int64`` is allowed because each step of the ladder is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import pyarrow as pa

from catalog.schema.history import partner_child
from catalog.schema.walk import as_data_type

__all__ = ["WIDENING_RULES", "widening_rule", "widens"]

_SIGNED: Final = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_UNSIGNED: Final = (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
_FLOATS: Final = (pa.float16(), pa.float32(), pa.float64())

#: Every rule id with the steps it allows, as the design's table shows them.
WIDENING_RULES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "widen-int": "int8 -> int16 -> int32 -> int64",
        "widen-uint": "uint8 -> uint16 -> uint32 -> uint64",
        "widen-uint-to-int": "uint8/16/32 -> a wider signed integer (uint32 -> int64)",
        "widen-float": "float16 -> float32 -> float64",
        "widen-int-to-double": "int8/16/32 and uint8/16/32 -> float64",
        "widen-decimal": "decimal precision raised at the same scale; decimal128 -> decimal256",
        "widen-large": "string -> large_string, binary -> large_binary, list -> large_list",
    }
)


def _ladder(ladder: tuple[pa.DataType, ...]) -> Callable[[pa.DataType, pa.DataType], bool]:
    def up(old: pa.DataType, new: pa.DataType) -> bool:
        return old in ladder and new in ladder and ladder.index(new) > ladder.index(old)

    return up


def _uint_to_int(old: pa.DataType, new: pa.DataType) -> bool:
    return old in _UNSIGNED[:3] and new in _SIGNED and new.bit_width > old.bit_width


def _int_to_double(old: pa.DataType, new: pa.DataType) -> bool:
    return new == pa.float64() and (old in _SIGNED[:3] or old in _UNSIGNED[:3])


def _decimal(old: pa.DataType, new: pa.DataType) -> bool:
    if not (pa.types.is_decimal(old) and pa.types.is_decimal(new)):
        return False
    if old.scale != new.scale or new.precision < old.precision:
        return False
    return new.bit_width >= old.bit_width and not new.equals(old)


def _large(old: pa.DataType, new: pa.DataType) -> bool:
    return (old, new) in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary()))


_CHECKS: Final = (
    ("widen-int", _ladder(_SIGNED)),
    ("widen-uint", _ladder(_UNSIGNED)),
    ("widen-uint-to-int", _uint_to_int),
    ("widen-float", _ladder(_FLOATS)),
    ("widen-int-to-double", _int_to_double),
    ("widen-decimal", _decimal),
    ("widen-large", _large),
)


def widening_rule(old: pa.DataType, new: pa.DataType) -> str | None:
    """The rule that allows ``old -> new`` (atomic types), or None when it is not lossless."""
    for rule, allows in _CHECKS:
        if allows(old, new):
            return rule
    return None


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """``new`` is ``old`` or losslessly wider than it."""
    return old.equals(new) or widening_rule(old, new) is not None


def narrowed_to(schema: pa.Schema, latest: pa.Schema) -> pa.Schema:
    """``schema`` with each atomic type that widens one of ``latest`` (by field, at any depth)
    replaced by that narrower type: what a release's rows must be cast to (checking every
    value) to be written to a shard whose registered schema has not widened yet."""
    other = as_data_type(latest)
    return pa.schema([_narrowed_field(f, partner_child(other, f)) for f in schema])


def _narrowed_field(field: pa.Field, other: pa.Field | None) -> pa.Field:
    if other is None:
        return field
    return field.with_type(_narrowed(field.type, other.type))


def _narrowed(dtype: pa.DataType, other: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(dtype) and pa.types.is_struct(other):
        return pa.struct([_narrowed_field(f, partner_child(other, f)) for f in dtype])
    if pa.types.is_map(dtype) and pa.types.is_map(other):
        item = _narrowed_field(dtype.item_field, other.item_field)
        return pa.map_(dtype.key_field, item, keys_sorted=dtype.keys_sorted)
    if _is_list(dtype) and _is_list(other):  # a large list narrows to the other's list kind
        element = _narrowed_field(dtype.value_field, other.value_field)
        return pa.large_list(element) if pa.types.is_large_list(other) else pa.list_(element)
    if widening_rule(other, dtype) is not None:
        return other
    return dtype


def narrower_paths(schema: pa.Schema, latest: pa.Schema) -> tuple[str, ...]:
    """The dotted paths (of ``schema``'s names, at any depth) where ``schema``'s atomic type is
    narrower than ``latest``'s: what a batch stored under ``schema`` is widened at when read."""
    found: list[str] = []
    newer = as_data_type(latest)
    for field in schema:
        other = partner_child(newer, field, newer=True)  # by id, name or later rename
        if other is not None:
            _narrower(field.type, other.type, field.name, found)
    return tuple(found)


def _narrower(dtype: pa.DataType, other: pa.DataType, path: str, found: list[str]) -> None:
    if pa.types.is_struct(dtype) and pa.types.is_struct(other):
        for field in dtype:
            twin = partner_child(other, field, newer=True)
            if twin is not None:
                _narrower(field.type, twin.type, f"{path}.{field.name}", found)
    elif pa.types.is_map(dtype) and pa.types.is_map(other):
        _narrower(dtype.item_type, other.item_type, f"{path}.value", found)
    elif _is_list(dtype) and _is_list(other):
        if pa.types.is_list(dtype) and pa.types.is_large_list(other):
            found.append(path)
        _narrower(dtype.value_type, other.value_type, f"{path}.items", found)
    elif widening_rule(dtype, other) is not None:
        found.append(path)


def _is_list(dtype: pa.DataType) -> bool:
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
