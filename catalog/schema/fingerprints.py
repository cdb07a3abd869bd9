"""Fingerprints: a stable hash of a schema's canonical form (never formatting or metadata order)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow as pa

from catalog.schema.walk import TypeVisitor, as_data_type, kind_of, visit

_FINGERPRINT_VERSION = 1


# Types named by their Arrow type id alone (one dict lookup, not nineteen predicate calls).
_FIXED_WIDTH: dict[int, str] = {
    dtype.id: name
    for dtype, name in (
        (pa.null(), "null"),
        (pa.bool_(), "bool"),
        (pa.int8(), "int8"),
        (pa.int16(), "int16"),
        (pa.int32(), "int32"),
        (pa.int64(), "int64"),
        (pa.uint8(), "uint8"),
        (pa.uint16(), "uint16"),
        (pa.uint32(), "uint32"),
        (pa.uint64(), "uint64"),
        (pa.float16(), "float16"),
        (pa.float32(), "float32"),
        (pa.float64(), "float64"),
        (pa.string(), "string"),
        (pa.large_string(), "large_string"),
        (pa.binary(), "binary"),
        (pa.large_binary(), "large_binary"),
        (pa.date32(), "date32"),
        (pa.date64(), "date64"),
    )
}


def _fixed_width_name(dtype: pa.DataType) -> str | None:
    return _FIXED_WIDTH.get(dtype.id)


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
        return {"type": kind_of(dtype).value, "element": _unnamed(element)}

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


def schema_json(schema: pa.Schema) -> list[dict[str, Any]]:
    """The schema's fields in the canonical JSON form the fingerprint hashes: each field's
    name, nullability and type with its parameters, nested children included (what
    ``GET /collections`` tells an integrator)."""
    fields: list[dict[str, Any]] = visit(as_data_type(schema), _Canonical())["fields"]
    return fields


def fingerprint(schema: pa.Schema) -> str:
    """A stable hex SHA-256 of the canonical schema.

    Covers field order, names, types (with their parameters: units, timezones, precision and
    scale, nested children) and nullability; ignores all metadata and the names of list element
    and map entry fields. The canonical form is built here as sorted, compact JSON, so it is the
    same across processes, platforms and Python versions.
    """
    canonical = {
        "fingerprint_version": _FINGERPRINT_VERSION,
        "fields": schema_json(schema),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
