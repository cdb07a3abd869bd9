"""Rows over HTTP: JSON lines to Arrow tables (naming the bad line, field path and rule) and
back.

Every value goes by one strict rule per type (:mod:`orchestrator.wire.jsonvalues`): stored
exactly as sent, or refused. Two parsers, one outcome. pyarrow's JSON reader parses a body of
many lines against the write schema in C, for schemas whose types it reads as the strict rule
does (integers, floats, booleans, strings, and structs and lists of them); whatever it refuses,
and any table it makes that the rule would not (a non-finite float, a null under a required
field at any depth, a line holding two objects, an escaped surrogate, invalid UTF-8), goes
through the Python parser, which applies the rule and names the first problem. So a body both
accept becomes the same table, and every refusal is the Python parser's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from catalog.errors import BadInputError
from orchestrator.wire.ipc import READ_BATCH_ROWS, TooManyRowsError, check_nulls
from orchestrator.wire.jsonvalues import Refused, converter, loads, writable

#: How deep a row's JSON may nest (objects and arrays); deeper is refused, never parsed on.
MAX_JSON_DEPTH = 64


def rows_to_table(body: bytes, schema: pa.Schema, max_rows: int | None = None) -> pa.Table:
    """Parse JSON lines into a table of ``schema``; BadInputError naming the line, the field
    path and the rule of the first value refused.

    The body must be UTF-8 (an invalid byte is refused naming its line and field, never
    replaced) and no row may nest deeper than :data:`MAX_JSON_DEPTH`; more than ``max_rows``
    rows is TooManyRowsError."""
    fast = parse_with_arrow(body, schema, max_rows)
    if fast is not None:
        return fast
    rows: list[dict[str, Any]] = []
    names = set(schema.names)
    fields = [(f.name, converter(f.type, f.nullable)) for f in schema]
    for number, raw in enumerate(body.splitlines(), start=1):
        line = _decoded(raw, number)
        if not line.strip():
            continue
        try:
            row = loads(line)
        except RecursionError as exc:
            raise _too_deep(number) from exc
        except ValueError as exc:  # json.JSONDecodeError is one
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise BadInputError(f"line {number} is not JSON: {problem}", line=number) from exc
        # A row nests no deeper than it has brackets: only a line with many is walked.
        if line.count("{") + line.count("[") > MAX_JSON_DEPTH and _depth(row) > MAX_JSON_DEPTH:
            raise _too_deep(number)
        if not isinstance(row, dict):
            raise BadInputError(f"line {number} is not a JSON object", line=number)
        unknown = sorted(set(row) - names)
        if unknown:
            raise BadInputError(
                f"line {number}: unknown field {unknown[0]} (the schema has {sorted(names)})",
                line=number,
                field=unknown[0],
                rule="unknown-field",
            )
        try:
            rows.append({name: convert(row.get(name), name) for name, convert in fields})
        except Refused as refused:
            raise BadInputError(
                f"line {number}: field {refused.path}: {refused.message}",
                line=number,
                field=refused.path,
                rule=refused.rule,
            ) from None
        if max_rows is not None and len(rows) > max_rows:
            raise TooManyRowsError.over(max_rows)
    if not rows:
        raise BadInputError("no rows: send JSON lines, one object per row")
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except _CONVERSION_ERRORS as exc:  # the rule let through what Arrow refuses: say so
        raise BadInputError(
            f"a value does not match the schema: {exc}", problem=str(exc)
        ) from exc


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)

#: Fewer rows than this parse faster through Python (pyarrow's reader has a fixed cost).
ARROW_JSON_MIN_ROWS = 16
#: An escaped UTF-16 surrogate: Python and pyarrow read a lone one differently.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_with_arrow(body: bytes, schema: pa.Schema, max_rows: int | None) -> pa.Table | None:
    """``body`` parsed by pyarrow's JSON reader, or None: leave it to the Python parser (a
    schema or a body the two might read differently, or anything pyarrow refuses)."""
    # Lines end with \n (\r\n too); a blank line or a lone \r makes the count differ from
    # the rows read, and the Python parser takes the body.
    lines = body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
    if lines < ARROW_JSON_MIN_ROWS or (max_rows is not None and lines > max_rows):
        return None  # few rows parse faster in Python; too many: the Python parser refuses
    if not _json_native(pa.struct(list(schema)), 0):
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _SURROGATE.search(body) is not None:
        return None
    try:
        table = pa_json.read_json(
            pa.BufferReader(body),  # native: a Python file would take the GIL for each read
            read_options=pa_json.ReadOptions(use_threads=False, block_size=len(body) + 1),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="error"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != lines:  # two objects on one line: the Python parser refuses that
        return None
    table = table.cast(schema)
    # What the reader lets through and the rule does not: the Python parser names it.
    for field in schema:
        column = table.column(field.name)
        try:
            check_nulls(column, field, field.name)
        except BadInputError:
            return None
        if not _finite(column.combine_chunks(), field.type):
            return None
    return table


def _finite(array: pa.Array, dtype: pa.DataType) -> bool:
    """Whether every float value at any depth of ``array`` is finite (the reader takes the
    literals NaN and Infinity, and rounds a float32 out of range to infinity)."""
    if pa.types.is_floating(dtype):
        return array.null_count == len(array) or bool(pc.all(pc.is_finite(array)).as_py())
    if pa.types.is_struct(dtype):
        return all(_finite(array.field(i), dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _finite(array.flatten(), dtype.value_type)
    return True


#: Atomic types that read the same through pyarrow's JSON reader and through Python.
_NATIVE = (
    pa.types.is_boolean,
    pa.types.is_signed_integer,
    pa.types.is_unsigned_integer,
    lambda t: pa.types.is_float32(t) or pa.types.is_float64(t),
    pa.types.is_string,
    pa.types.is_large_string,
)


def _json_native(dtype: pa.DataType, depth: int) -> bool:
    if depth > MAX_JSON_DEPTH:
        return False
    if pa.types.is_struct(dtype):
        return all(_json_native(dtype.field(i).type, depth + 1) for i in range(dtype.num_fields))
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _json_native(dtype.value_type, depth + 1)
    return any(check(dtype) for check in _NATIVE)


def _decoded(raw: bytes, number: int) -> str:
    """Line ``number`` as text; BadInputError naming it, and the field the bad byte is in."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        field = _field_at(raw.decode("utf-8", errors="replace"), exc.start)
        where = f"line {number}" + (f": field {field}" if field else "")
        raise BadInputError(
            f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "send UTF-8 text, or binary values base64-encoded",
            line=number,
            field=field,
            offset=exc.start,
        ) from exc


def _field_at(text: str, offset: int) -> str | None:
    """The JSON key whose value holds ``offset`` of ``text`` (approximately: the last key
    before it), if any."""
    keys = list(re.finditer(r'"((?:[^"\\]|\\.)*)"\s*:', text[:offset]))
    return keys[-1].group(1) if keys else None


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            pending.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            pending.extend((v, depth + 1) for v in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_JSON_DEPTH:
            break
    return deepest


def _too_deep(number: int) -> BadInputError:
    return BadInputError(
        f"line {number}: JSON nested deeper than {MAX_JSON_DEPTH} levels",
        line=number,
        limit=MAX_JSON_DEPTH,
    )


def json_lines(table: pa.Table, batch_rows: int = READ_BATCH_ROWS) -> Iterator[bytes]:
    """``table``'s rows as JSON lines (values in their
    :func:`~orchestrator.wire.jsonvalues.writable` forms), a chunk of about ``batch_rows``
    rows at a time.

    Built column by column in Arrow where a column's JSON text is plain to make there (integers,
    booleans, strings without control characters, columns all null); any other column goes
    value by value through Python. Every line parses to the same object either way."""
    names = [json.dumps(name) for name in table.column_names]
    pieces = [pa.scalar("{" + names[0] + ": ")] if names else []
    pieces += [pa.scalar(", " + name + ": ") for name in names[1:]]
    for batch in table.to_batches(max_chunksize=batch_rows):
        if batch.num_rows == 0:
            continue
        parts: list[Any] = []
        for piece, column in zip(pieces, batch.columns, strict=True):
            parts += [piece, _json_column(column)]
        parts.append(pa.scalar("}\n"))
        lines = pc.binary_join_element_wise(*parts, "")
        # No line is null: the text of them all is the data buffer between the first and
        # the last offset.
        _, offsets, data = lines.buffers()
        first = lines.offset
        bounds = memoryview(offsets).cast("i")
        yield memoryview(data)[bounds[first] : bounds[first + len(lines)]].tobytes()


#: Characters a JSON string must escape, besides the quote and the backslash.
_CONTROL = r"[\x00-\x1f]"


def _json_column(column: pa.Array) -> pa.Array:
    """The JSON text of each value of ``column`` (``null`` for a null)."""
    dtype = column.type
    if column.null_count == len(column):
        return pa.array(["null"] * len(column), pa.string())
    if pa.types.is_integer(dtype):
        return pc.fill_null(pc.cast(column, pa.string()), "null")
    if pa.types.is_boolean(dtype):
        return pc.fill_null(pc.if_else(column, "true", "false"), "null")
    if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)) and not pc.any(
        pc.match_substring_regex(column, _CONTROL)
    ).as_py():
        text = pc.cast(column, pa.string())
        escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
        quoted = pc.binary_join_element_wise('"', escaped, '"', "")
        return pc.fill_null(quoted, "null")
    return pa.array([_dumped(value, dtype) for value in _values(column)], pa.string())


def _dumped(value: Any, dtype: pa.DataType) -> str:
    """One value's JSON text: strict JSON (no bare NaN), in the forms appends take back."""
    return json.dumps(writable(value, dtype), allow_nan=False, separators=(", ", ": "))


def _values(column: pa.Array) -> list[Any]:
    """``column``'s values in Python; a time Python cannot hold (outside years 1 to 9999,
    stored before appends refused such values) as its integer in the field's unit."""
    try:
        return column.to_pylist()
    except (OverflowError, ValueError):
        if not pa.types.is_timestamp(column.type):
            raise
    numbers = column.cast(pa.int64()).to_pylist()
    return [_held(column[i], numbers[i]) for i in range(len(column))]


def _held(value: pa.Scalar, number: int | None) -> Any:
    """``value`` in Python, or ``number`` (its integer in the unit) when Python cannot hold it."""
    try:
        return value.as_py()
    except (OverflowError, ValueError):
        return number
