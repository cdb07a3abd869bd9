"""Rows over HTTP: JSON lines to Arrow tables (naming the bad field and line) and back.

Two parsers, one outcome. pyarrow's JSON reader parses a body against the write schema in C,
where the schema's types read the same through it as through Python (integers, floats,
booleans, strings, and structs and lists of them); whatever it refuses, or any body it cannot
take exactly as the Python parser would (a line holding two objects, an escaped surrogate,
invalid UTF-8), goes through the Python parser, which names the line and the field of the
first problem. So errors, strict UTF-8 and the depth limit are the Python parser's, and a body
both accept becomes the same table.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from catalog.errors import BadInputError, TooManyRowsError

#: How deep a row's JSON may nest (objects and arrays); deeper is refused, never parsed on.
MAX_JSON_DEPTH = 64


def rows_to_table(body: bytes, schema: pa.Schema, max_rows: int | None = None) -> pa.Table:
    """Parse JSON lines into a table of ``schema``; BadInputError naming the line and field.

    The body must be UTF-8 (an invalid byte is refused naming its line and field, never
    replaced) and no row may nest deeper than :data:`MAX_JSON_DEPTH`; more than ``max_rows``
    rows is TooManyRowsError."""
    fast = parse_with_arrow(body, schema, max_rows)
    if fast is not None:
        return fast
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    names = set(schema.names)
    required = [field.name for field in schema if not field.nullable]
    decoders = _decoders(schema)
    for number, raw in enumerate(body.splitlines(), start=1):
        line = _decoded(raw, number)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"line {number} is not JSON: {exc.msg}", line=number) from exc
        except RecursionError as exc:
            raise _too_deep(number) from exc
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
            )
        for name in required:
            if row.get(name) is None:
                raise BadInputError(
                    f"line {number}: field {name} is required (not nullable)",
                    line=number,
                    field=name,
                )
        for name, decode in decoders.items():
            if row.get(name) is not None:
                row[name] = _decoded_value(decode, row[name], number, name)
        rows.append(row)
        lines.append(number)
        if max_rows is not None and len(rows) > max_rows:
            raise TooManyRowsError.over(max_rows)
    if not rows:
        raise BadInputError("no rows: send JSON lines, one object per row")
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except _CONVERSION_ERRORS as exc:
        at_line, at_field = _locate(rows, lines, schema)
        where = f"line {at_line}: field {at_field}: " if at_field is not None else ""
        raise BadInputError(
            f"{where}value does not match the schema: {exc}",
            problem=str(exc),
            line=at_line,
            field=at_field,
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
    if any(not f.nullable and table.column(f.name).null_count for f in schema):
        return None
    return table.cast(schema)


#: Atomic types that read the same through pyarrow's JSON reader and through Python.
_NATIVE = (
    pa.types.is_boolean,
    pa.types.is_signed_integer,
    pa.types.is_unsigned_integer,
    lambda t: pa.types.is_float32(t) or pa.types.is_float64(t),
    pa.types.is_string,
    pa.types.is_large_string,
)


#: A JSON value of one type made into what Arrow takes for it.
_Decode = Callable[[Any], Any]


@functools.lru_cache(maxsize=64)
def _decoders(schema: pa.Schema) -> dict[str, _Decode]:
    """The fields of ``schema`` whose JSON values need reading into Arrow's Python forms: the
    forms :func:`jsonable` writes (ISO 8601 times, durations in seconds, base64 bytes, decimal
    strings, maps as objects), so that the rows ``GET /read`` answers append back as they
    were."""
    found = {field.name: _decoder(field.type) for field in schema}
    return {name: decode for name, decode in found.items() if decode is not None}


def _decoder(dtype: pa.DataType) -> _Decode | None:
    if pa.types.is_timestamp(dtype):
        return _when(dt.datetime.fromisoformat)
    if pa.types.is_date(dtype):
        return _when(dt.date.fromisoformat)
    if pa.types.is_time(dtype):
        return _when(dt.time.fromisoformat)
    if pa.types.is_decimal(dtype):
        return _when(_decimal)
    if pa.types.is_duration(dtype):  # reads write seconds; an integer stays in the type's unit
        return lambda value: dt.timedelta(seconds=value) if isinstance(value, float) else value
    if (
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
    ):
        return _when(functools.partial(base64.b64decode, validate=True))
    if pa.types.is_struct(dtype):
        children = {
            dtype.field(i).name: decode
            for i in range(dtype.num_fields)
            if (decode := _decoder(dtype.field(i).type)) is not None
        }
        return functools.partial(_struct_value, children) if children else None
    if pa.types.is_map(dtype):
        keys, items = _decoder(dtype.key_type), _decoder(dtype.item_type)
        return functools.partial(_map_value, keys, items) if keys or items else None
    if (
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    ):
        item = _decoder(dtype.value_type)
        return functools.partial(_list_value, item) if item is not None else None
    return None


def _decimal(text: str) -> decimal.Decimal:
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise ValueError(f"{text!r} is not a decimal number") from None


def _when(parse: Callable[[str], Any]) -> _Decode:
    """``parse`` for a string; any other value as it is (an integer time, say)."""
    return lambda value: parse(value) if isinstance(value, str) else value


def _struct_value(children: dict[str, _Decode], value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: (children[k](v) if k in children and v is not None else v) for k, v in value.items()}


def _list_value(item: _Decode, value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [None if v is None else item(v) for v in value]


def _map_value(keys: _Decode | None, items: _Decode | None, value: Any) -> Any:
    pairs: Any = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list) or not all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in pairs
    ):
        return value  # Arrow refuses it, naming the field
    return [
        (keys(key) if keys else key, items(item) if items and item is not None else item)
        for key, item in pairs
    ]


def _decoded_value(decode: _Decode, value: Any, line: int, name: str) -> Any:
    """``value`` of field ``name`` decoded; BadInputError naming the line and field."""
    try:
        return decode(value)
    except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
        raise BadInputError(
            f"line {line}: field {name}: value does not match the schema: {exc} (times are "
            "ISO 8601, binary values base64, decimals strings or numbers)",
            line=line,
            field=name,
            problem=str(exc),
        ) from None


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


def _locate(
    rows: list[dict[str, Any]], lines: list[int], schema: pa.Schema
) -> tuple[int | None, str | None]:
    """The line and field of the first value that does not convert to its field's type."""
    for field in schema:
        try:
            pa.array([row.get(field.name) for row in rows], type=field.type)
            continue
        except _CONVERSION_ERRORS:
            pass
        for row, line in zip(rows, lines, strict=True):
            try:
                pa.array([row.get(field.name)], type=field.type)
            except _CONVERSION_ERRORS:
                return line, field.name
    return None, None


def jsonable(value: Any) -> Any:
    """An Arrow-to-Python value as JSON: times ISO 8601, bytes base64, maps as objects."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): jsonable(v) for k, v in value}  # an Arrow map
        return [jsonable(v) for v in value]
    return str(value)


def json_lines(table: pa.Table, batch_rows: int = 64 * 1024) -> Iterator[bytes]:
    """``table``'s rows as JSON lines (values as :func:`jsonable` makes them), a chunk of about
    ``batch_rows`` rows at a time.

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
    return pa.array(
        [json.dumps(jsonable(value), default=str) for value in column.to_pylist()], pa.string()
    )
