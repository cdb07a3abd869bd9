"""Field ids and renames: a field's identity that survives its name.

A release renames a field by declaring it: the new field carries its former names
(:func:`renamed`, metadata ``catalog.renamed_from``, a JSON list, newest first). A shard whose
history meets its first rename gets *field ids*: every field of every struct, at every depth,
numbered once in walk order (metadata ``PARQUET:field_id``, the key Parquet writers turn into
the column's ``field_id``, so every batch written afterwards records them), the highest id kept
in the schema's metadata ``catalog.last_field_id``. An id is never reused: a deleted field's
tombstone keeps its id, and a field added later, even under a deleted name, gets the next one.
A renamed field keeps its id and its slot and accumulates its former names, so data of any
schema the shard registered reads under the newest name (:func:`partner_child`).

Shards whose history never met a rename have no ids and match fields by name, exactly as
before ids existed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from catalog.errors import BadInputError
from catalog.schema.walk import Kind, as_data_type, child_fields, kind_of

__all__ = [
    "FIELD_ID_KEY",
    "LAST_ID_KEY",
    "RENAMED_FROM_KEY",
    "Counter",
    "declared_renames",
    "field_id",
    "field_paths",
    "former_names",
    "has_ids",
    "ids_like",
    "last_id",
    "needs_ids",
    "number",
    "number_type",
    "renamed",
    "with_field_metadata",
]

FIELD_ID_KEY = b"PARQUET:field_id"
RENAMED_FROM_KEY = b"catalog.renamed_from"
LAST_ID_KEY = b"catalog.last_field_id"


def field_id(field: pa.Field) -> int | None:
    """The field's id, if its shard numbered it."""
    metadata = field.metadata
    raw = metadata.get(FIELD_ID_KEY) if metadata else None
    return None if raw is None else int(raw)


def former_names(field: pa.Field) -> tuple[str, ...]:
    """The names ``field`` had before, newest first (empty: never renamed)."""
    metadata = field.metadata
    raw = metadata.get(RENAMED_FROM_KEY) if metadata else None
    if raw is None:
        return ()
    names = json.loads(raw)
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise BadInputError(
            f"field {field.name}: {RENAMED_FROM_KEY.decode()} must be a JSON list of names, "
            f"not {raw!r}",
            field=field.name,
        )
    return tuple(names)


def renamed(field: pa.Field, *former: str) -> pa.Field:
    """``field`` declared as the rename of the field it was called ``former`` (newest first:
    ``renamed(pa.field("c", ...), "b", "a")`` for a field renamed a -> b -> c, so releases that
    skip the middle one still find it)."""
    if not former or not all(isinstance(n, str) and n for n in former):
        raise BadInputError(f"renamed({field.name!r}) needs the former names", field=field.name)
    if field.name in former:
        raise BadInputError(
            f"field {field.name} cannot be renamed from its own name", field=field.name
        )
    return with_field_metadata(field, {RENAMED_FROM_KEY: json.dumps(list(former)).encode()})


def with_field_metadata(field: pa.Field, changes: dict[bytes, bytes | None]) -> pa.Field:
    """``field`` with metadata keys set (a None value removes the key)."""
    metadata = dict(field.metadata or {})
    for key, value in changes.items():
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    return pa.field(field.name, field.type, field.nullable, metadata or None)


def _struct_fields(dtype: pa.DataType) -> Iterator[pa.Field]:
    """Every struct child below ``dtype`` (not ``dtype``'s own fields), through lists and maps."""
    kind = kind_of(dtype)
    if kind is Kind.STRUCT:
        for field in child_fields(dtype):
            yield field
            yield from _struct_fields(field.type)
    elif kind in (Kind.LIST, Kind.LARGE_LIST):
        yield from _struct_fields(dtype.value_type)
    elif kind is Kind.MAP:
        yield from _struct_fields(dtype.key_type)
        yield from _struct_fields(dtype.item_type)


def declared_renames(schema: pa.Schema) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every rename ``schema`` declares, as ``(dotted path, former names)``, in walk order."""
    return tuple(_declared(as_data_type(schema), ""))


def _declared(dtype: pa.DataType, path: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    kind = kind_of(dtype)
    if kind is Kind.STRUCT:
        for field in child_fields(dtype):
            here = f"{path}.{field.name}" if path else field.name
            formers = former_names(field)
            if formers:
                yield here, formers
            yield from _declared(field.type, here)
    elif kind in (Kind.LIST, Kind.LARGE_LIST):
        yield from _declared(dtype.value_type, f"{path}.items" if path else "items")
    elif kind is Kind.MAP:
        yield from _declared(dtype.item_type, f"{path}.value" if path else "value")


def field_paths(schema: pa.Schema) -> frozenset[str]:
    """The dotted path of every struct field of ``schema``, at any depth."""
    return frozenset(_paths(as_data_type(schema), ""))


def _paths(dtype: pa.DataType, path: str) -> Iterator[str]:
    kind = kind_of(dtype)
    if kind is Kind.STRUCT:
        for field in child_fields(dtype):
            here = f"{path}.{field.name}" if path else field.name
            yield here
            yield from _paths(field.type, here)
    elif kind in (Kind.LIST, Kind.LARGE_LIST):
        yield from _paths(dtype.value_type, f"{path}.items" if path else "items")
    elif kind is Kind.MAP:
        yield from _paths(dtype.item_type, f"{path}.value" if path else "value")


def has_ids(schema: pa.Schema | pa.DataType) -> bool:
    """Whether the shard that holds ``schema`` numbers its fields."""
    return any(field_id(f) is not None for f in child_fields(as_data_type(schema)))


def needs_ids(schema: pa.Schema) -> bool:
    """Whether ``schema`` declares a rename anywhere (its shard then numbers its fields)."""
    return any(former_names(f) for f in _struct_fields(as_data_type(schema)))


def last_id(schema: pa.Schema) -> int:
    """The highest field id a numbered migration type has given (0: none yet)."""
    raw = (schema.metadata or {}).get(LAST_ID_KEY)
    return 0 if raw is None else int(raw)


class Counter:
    """The ids given so far; ``next()`` gives the next one."""

    def __init__(self, start: int) -> None:
        self.last = start

    def next(self) -> int:
        self.last += 1
        return self.last


def number_type(dtype: pa.DataType, counter: Counter) -> pa.DataType:
    """``dtype`` with an id on every struct child that has none, at every depth, in walk order
    (a field before its children)."""
    kind = kind_of(dtype)
    if kind is Kind.STRUCT:
        fields = []
        for field in child_fields(dtype):
            if field_id(field) is None:
                field = with_field_metadata(field, {FIELD_ID_KEY: str(counter.next()).encode()})
            fields.append(field.with_type(number_type(field.type, counter)))
        return pa.struct(fields)
    if kind in (Kind.LIST, Kind.LARGE_LIST):
        element = dtype.value_field
        element = element.with_type(number_type(element.type, counter))
        return pa.large_list(element) if kind is Kind.LARGE_LIST else pa.list_(element)
    if kind is Kind.MAP:
        key, item = dtype.key_field, dtype.item_field
        return pa.map_(
            key.with_type(number_type(key.type, counter)),
            item.with_type(number_type(item.type, counter)),
            keys_sorted=dtype.keys_sorted,
        )
    return dtype


def number(schema: pa.Schema, start: int | None = None) -> pa.Schema:
    """``schema`` (a migration type) with every field numbered, ids continuing after
    ``start`` (default: its own ``catalog.last_field_id``), the new highest id recorded."""
    counter = Counter(last_id(schema) if start is None else start)
    numbered = number_type(as_data_type(schema), counter)
    metadata = dict(schema.metadata or {})
    metadata[LAST_ID_KEY] = str(counter.last).encode()
    return pa.schema(child_fields(numbered), metadata=metadata)


def ids_like(schema: pa.Schema, numbered: pa.Schema) -> pa.Schema:
    """``schema`` (a migration type registered before its shard numbered fields) with the ids
    of the ``numbered`` history's fields of the same name at the same path: before the first
    rename a name was a field's identity, tombstones included."""
    return pa.schema(
        child_fields(_ids_like(as_data_type(schema), as_data_type(numbered))),
        metadata=schema.metadata,
    )


def _ids_like(dtype: pa.DataType, numbered: pa.DataType) -> pa.DataType:
    kind = kind_of(dtype)
    if kind is Kind.STRUCT and kind_of(numbered) is Kind.STRUCT:
        fields = []
        for field in child_fields(dtype):
            index = numbered.get_field_index(field.name)
            if index < 0:
                fields.append(field)
                continue
            twin = numbered.field(index)
            fields.append(
                with_field_metadata(field, {FIELD_ID_KEY: str(field_id(twin)).encode()})
                .with_type(_ids_like(field.type, twin.type))
            )  # fmt: skip
        return pa.struct(fields)
    if kind in (Kind.LIST, Kind.LARGE_LIST) and kind_of(numbered) in (Kind.LIST, Kind.LARGE_LIST):
        element = dtype.value_field
        element = element.with_type(_ids_like(element.type, numbered.value_type))
        return pa.large_list(element) if kind is Kind.LARGE_LIST else pa.list_(element)
    if kind is Kind.MAP and kind_of(numbered) is Kind.MAP:
        key, item = dtype.key_field, dtype.item_field
        return pa.map_(
            key.with_type(_ids_like(key.type, numbered.key_type)),
            item.with_type(_ids_like(item.type, numbered.item_type)),
            keys_sorted=dtype.keys_sorted,
        )
    return dtype
