"""A collection's Arrow schema from its description in ``GET /collections``: the types an
append must carry, so an integrator builds the table the sidecar takes instead of guessing
(``pa.Table.from_pylist`` infers ``int64`` where the release stores ``uint32``).

    schema = client.schema("mz_catalog.mz_tables")
    table = pa.Table.from_pylist(rows, schema=schema)   # or schema.empty_table()
    client.append("mz_catalog.mz_tables", table)

A field is ``{"name", "nullable", "type"}``; a type is ``{"type": NAME, ...its parameters}``,
nested types with their children: the canonical form the collection's fingerprint hashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_schema", "arrow_type"]

#: Fixed-width and variable-width types named as pyarrow's factory (``bool``: ``bool_``).
_NAMED = frozenset({
    "null", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "string", "large_string", "binary", "large_binary",
    "date32", "date64",
})  # fmt: skip


def arrow_schema(fields: Sequence[Mapping[str, Any]]) -> pa.Schema:
    """The Arrow schema of a collection's ``fields`` as ``GET /collections`` lists them."""
    import pyarrow as pa

    return pa.schema([_field(f["name"], f) for f in fields])


def _field(name: str, spec: Mapping[str, Any]) -> pa.Field:
    import pyarrow as pa

    return pa.field(name, arrow_type(spec["type"]), nullable=bool(spec["nullable"]))


def arrow_type(spec: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type a ``{"type": NAME, ...}`` description names; ValueError for a name
    this client does not know (a newer sidecar's)."""
    import pyarrow as pa

    kind = spec["type"]
    if kind == "bool":
        return pa.bool_()
    if kind in _NAMED:
        return getattr(pa, kind)()
    if kind == "timestamp":
        return pa.timestamp(spec["unit"], tz=spec.get("tz"))
    if kind in ("time32", "time64"):
        return getattr(pa, kind)(spec["unit"])
    if kind == "duration":
        return pa.duration(spec["unit"])
    if kind in ("decimal128", "decimal256"):
        return getattr(pa, kind)(spec["precision"], spec["scale"])
    if kind == "fixed_size_binary":
        return pa.binary(spec["byte_width"])
    if kind == "list":
        return pa.list_(_field("item", spec["element"]))
    if kind == "large_list":
        return pa.large_list(_field("item", spec["element"]))
    if kind == "fixed_size_list":
        return pa.list_(_field("item", spec["element"]), spec["size"])
    if kind == "map":
        key, value = _field("key", spec["key"]), _field("value", spec["value"])
        return pa.map_(key, value, keys_sorted=bool(spec.get("keys_sorted")))
    if kind == "struct":
        return pa.struct([_field(f["name"], f) for f in spec["fields"]])
    if kind == "dictionary":
        return pa.dictionary(
            arrow_type(spec["index"]), arrow_type(spec["value"]), ordered=bool(spec["ordered"])
        )
    if kind == "arrow":
        return pa.type_for_alias(spec["repr"])
    raise ValueError(f"GET /collections named a type this client does not know: {kind!r}")
