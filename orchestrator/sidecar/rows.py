"""Rows over HTTP: JSON lines to Arrow tables (naming the bad field and line) and back."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from catalog.errors import (
    BadInputError,
)


def rows_to_table(body: bytes, schema: pa.Schema) -> pa.Table:
    """Parse JSON lines into a table of ``schema``; BadInputError naming the line and field."""
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    names = set(schema.names)
    for number, line in enumerate(body.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"line {number} is not JSON: {exc.msg}", line=number) from exc
        if not isinstance(row, dict):
            raise BadInputError(f"line {number} is not a JSON object", line=number)
        unknown = sorted(set(row) - names)
        if unknown:
            raise BadInputError(
                f"line {number}: unknown field {unknown[0]} (the schema has {sorted(names)})",
                line=number,
                field=unknown[0],
            )
        for field in schema:
            if not field.nullable and row.get(field.name) is None:
                raise BadInputError(
                    f"line {number}: field {field.name} is required (not nullable)",
                    line=number,
                    field=field.name,
                )
        rows.append(row)
        lines.append(number)
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
