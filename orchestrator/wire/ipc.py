"""Rows over HTTP as Arrow IPC streams (``application/vnd.apache.arrow.stream``), both ways.

An append's body is exactly one stream of one or more record batches whose schema is the
release's write schema or a projection of it: the same fields by name, in any order, each of
exactly the schema's type; a nullable field may be left out (its rows are null). Everything else
is refused before anything is written, naming what is wrong
(:class:`~catalog.errors.BadInputError`, 400): bytes that are no stream, a stream cut short,
bytes after the stream's end (a second stream included), one without rows, an unknown field,
another type (a dictionary or an extension type the schema does not have included), a null in a
non-nullable field at any depth, and more rows than the configured maximum
(:class:`TooManyRowsError`, 413, counted batch by batch while reading).

A read answers the migrated snapshot as one stream, written batch by batch.
"""

from __future__ import annotations

import functools
import io
import threading
import weakref
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import BadInputError

__all__ = [
    "READ_BATCH_ROWS",
    "EncodedStreams",
    "TooManyRowsError",
    "check_nulls",
    "stream_chunks",
    "stream_to_table",
]


class TooManyRowsError(BadInputError):
    """An append of more rows than the sidecar takes in one request (``--http-max-append-rows``)."""

    code = "too-many-rows"

    @classmethod
    def over(cls, limit: int) -> TooManyRowsError:
        return cls(
            f"more than {limit} rows in one append (--http-max-append-rows): split it into several",
            limit=limit,
        )


#: Rows per record batch of a read's stream (a batch is what the sidecar holds serialized).
READ_BATCH_ROWS = 64 * 1024


def stream_to_table(body: bytes, schema: pa.Schema, max_rows: int) -> pa.Table:
    """The record batches of the Arrow IPC stream ``body`` as a table of ``schema``."""
    if not body:
        raise BadInputError("empty body: send an Arrow IPC stream of record batches")
    source = pa.BufferReader(body)
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInputError(f"not an Arrow IPC stream: {exc}", problem="not-arrow") from exc
    sent = reader.schema
    columns = _projection(sent, schema)
    batches: list[pa.RecordBatch] = []
    rows = 0
    try:
        for batch in reader:
            rows += batch.num_rows
            if rows > max_rows:
                raise TooManyRowsError.over(max_rows)
            batches.append(batch)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInputError(
            f"Arrow IPC stream cut short or corrupt after {len(batches)} batch(es): {exc}",
            problem="truncated",
            batches=len(batches),
        ) from exc
    if source.tell() != len(body):  # a second stream, or anything after the end marker
        raise BadInputError(
            f"{len(body) - source.tell()} byte(s) after the end of the Arrow IPC stream: send "
            "exactly one stream (its record batches hold every row)",
            problem="trailing-bytes",
            offset=source.tell(),
        )
    if rows == 0:
        raise BadInputError("no rows: the Arrow IPC stream holds no record batch with rows")
    table = pa.Table.from_batches(batches, schema=sent)
    try:
        table.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise BadInputError(f"invalid Arrow data: {exc}", problem="invalid") from exc
    # A left-out nullable field is null in every row; built from Python's None so that the
    # required fields of a null struct hold (hidden) values, as Parquet wants.
    arrays = [
        table.column(name) if name is not None else pa.array([None] * rows, field.type)
        for field, name in zip(schema, columns, strict=True)
    ]
    out = pa.Table.from_arrays(arrays, schema=schema)
    for field in schema:
        check_nulls(out.column(field.name), field, field.name)
    return out


def _projection(sent: pa.Schema, schema: pa.Schema) -> list[str | None]:
    """For each field of ``schema``, the name of the sent column that holds it (None: left out,
    nullable); BadInputError naming the first field that is not the schema's."""
    names = sent.names
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise BadInputError(f"field {duplicated[0]} is sent twice", field=duplicated[0])
    for field in sent:
        expected = schema.field(field.name) if field.name in schema.names else None
        if expected is None:
            raise BadInputError(
                f"unknown field {field.name} (the schema has {schema.names})", field=field.name
            )
        if not field.type.equals(expected.type):
            kind = (
                "dictionary-encoded "
                if pa.types.is_dictionary(field.type)
                else "extension "
                if isinstance(field.type, pa.ExtensionType)
                else ""
            )
            raise BadInputError(
                f"field {field.name}: {kind}type {field.type}, the schema has {expected.type}",
                field=field.name,
                type=str(field.type),
                expected=str(expected.type),
            )
    columns: list[str | None] = []
    for field in schema:
        if field.name in names:
            columns.append(field.name)
        elif field.nullable:
            columns.append(None)
        else:
            raise BadInputError(
                f"field {field.name} is required (not nullable) and the stream leaves it out",
                field=field.name,
            )
    return columns


def check_nulls(column: pa.ChunkedArray | pa.Array, field: pa.Field, path: str) -> None:
    """BadInputError naming the path of a null where ``field`` (at any depth) allows none."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not field.nullable and array.null_count:
        raise BadInputError(
            f"field {path}: {array.null_count} null(s) where the schema allows none",
            field=path,
            nulls=array.null_count,
        )
    dtype = field.type
    if not len(array) or array.null_count == len(array) or not _requires_values(dtype):
        return  # no value below to check (a null slot's children are no rows' values)
    if pa.types.is_struct(dtype):
        valid = array.is_valid()
        for index in range(dtype.num_fields):
            child = dtype.field(index)
            values = array.field(index)
            if not child.nullable:
                hidden = pc.and_(values.is_null(), valid)
                if pc.any(hidden).as_py():
                    raise BadInputError(
                        f"field {path}.{child.name}: a null where the schema allows none",
                        field=f"{path}.{child.name}",
                    )
            check_nulls(values, child.with_nullable(True), f"{path}.{child.name}")
    elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        check_nulls(array.flatten(), dtype.value_field, f"{path}[]")
    elif pa.types.is_map(dtype):
        check_nulls(array.items, dtype.item_field, f"{path}{{}}")


@functools.lru_cache(maxsize=256)
def _requires_values(dtype: pa.DataType) -> bool:
    """Whether a field of ``dtype`` holds, at some depth, a field that allows no null."""
    if pa.types.is_struct(dtype):
        fields = [dtype.field(i) for i in range(dtype.num_fields)]
    elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        fields = [dtype.value_field]
    elif pa.types.is_map(dtype):
        fields = [dtype.item_field]
    else:
        return False
    return any(not f.nullable or _requires_values(f.type) for f in fields)


def stream_chunks(table: pa.Table, batch_rows: int = READ_BATCH_ROWS) -> Iterator[bytes]:
    """``table`` as an Arrow IPC stream, one serialized record batch of up to ``batch_rows``
    rows at a time: the schema goes with the first batch and the end-of-stream marker with
    the last, so a table of at most ``batch_rows`` rows is one chunk. A snapshot's table has
    a chunk per batch it consolidated: each slice is combined into one record batch first,
    so the writer makes one call per chunk (each call lets go of the GIL, and under load
    taking it back costs a thread switch)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for first in range(0, table.num_rows, batch_rows):
            if first:
                yield _drained(sink)
            writer.write_table(table.slice(first, batch_rows).combine_chunks())
    yield _drained(sink)


def _drained(sink: io.BytesIO) -> bytes:
    data = sink.getvalue()
    sink.seek(0)
    sink.truncate()
    return data


class EncodedStreams:
    """The Arrow IPC stream of each table answered whole, kept while the table lives.

    A snapshot kept in memory (a read of a shard nobody changed) is the same table object at
    every read, so its stream is encoded once, not at each answer. An entry goes with its
    table (a weak reference): what is kept is bounded by what keeps the tables.
    """

    def __init__(self) -> None:
        self._streams: dict[int, tuple[weakref.ref[pa.Table], bytes]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._streams)

    def encoded(self, table: pa.Table) -> bytes:
        """``table`` as one Arrow IPC stream (:func:`stream_chunks`, whole)."""
        key = id(table)
        with self._lock:
            found = self._streams.get(key)
        if found is not None and found[0]() is table:
            return found[1]
        data = b"".join(stream_chunks(table, max(table.num_rows, 1)))
        with self._lock:
            self._streams[key] = (weakref.ref(table, lambda _gone: self._forget(key)), data)
        return data

    def _forget(self, key: int) -> None:
        with self._lock:
            self._streams.pop(key, None)
