"""Strict JSON values: what each Arrow type takes from a JSON line, exactly, or refuses.

One rule per type (the table in ``docs/data-plane.md``), anchored on PostgreSQL's input
functions and the proto3 JSON mapping: a value is stored exactly as sent or refused naming its
line, its field path (``pt.x``, ``nums[1]``) and the rule. Nothing is rounded, truncated,
clamped or defaulted:

* JSON is read with numbers as exact decimals (never through a float), the literals ``NaN``
  and ``Infinity`` refused, and a key twice in one object refused at any depth;
* an integer field takes integral numbers (``2``, also ``2.0`` and ``2e0``, which are 2) in its
  type's range; a float field numbers in its type's range and the strings ``"NaN"``,
  ``"Infinity"`` and ``"-Infinity"``; a decimal field a number or a string, within its precision
  and scale; booleans only ``true`` and ``false``;
* times take ISO 8601 strings or integers in the field's unit, within years 1 to 9999 (a
  timezone-aware instant a day inside them, so it reads in any zone), never rounded to the unit;
* structs refuse unknown keys and missing or null required fields, at any depth; maps take an
  object (keys read as the key type) or a list of ``[key, value]`` pairs, each key once.

:func:`writable` writes the same forms back (non-finite floats as those strings, maps as
objects, times ISO 8601), so a read appends back to the same rows.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa

from catalog_client.jsonforms import NON_FINITE, scalar_form

#: The float strings of the proto3 JSON mapping: JSON has no literal for them.
_FLOAT_MAX: Final = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}
#: Per second, by unit.
_UNITS: Final = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_EPOCH: Final = dt.datetime(1970, 1, 1)
#: The instants every reader and writer of the product handles, in microseconds from the
#: epoch: years 1 to 9999, and a day inside them for a timezone-aware field.
_NAIVE_RANGE: Final = (
    (dt.datetime(1, 1, 1) - _EPOCH) // dt.timedelta(microseconds=1),
    (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - _EPOCH) // dt.timedelta(microseconds=1),
)
_DAY_US: Final = 86_400_000_000
_ZONED_RANGE: Final = (_NAIVE_RANGE[0] + _DAY_US, _NAIVE_RANGE[1] - _DAY_US)
_INT64: Final = (-(2**63), 2**63 - 1)
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


class Refused(Exception):
    """A value refused: the field ``path`` it is at, the ``rule`` it breaks, and why."""

    def __init__(self, path: str, rule: str, message: str) -> None:
        super().__init__(message)
        self.path, self.rule, self.message = path, rule, message


def loads(line: str) -> Any:
    """``line`` as JSON: numbers exact (``decimal.Decimal`` for any with a fraction or an
    exponent), ``NaN`` and ``Infinity`` refused, every object's keys unique (ValueError)."""
    return json.loads(
        line, parse_float=decimal.Decimal, parse_constant=_no_constant, object_pairs_hook=_unique
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON (send the string "{name}" for a float)')


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


#: Converts one JSON value at a field path to what ``pyarrow.array`` takes for its type.
Convert = Callable[[Any, str], Any]


@functools.lru_cache(maxsize=1024)
def converter(dtype: pa.DataType, nullable: bool = True) -> Convert:
    """The strict conversion of a JSON value to a value of ``dtype`` (None stays None where
    ``nullable``)."""
    convert = _of_type(dtype)

    def checked(value: Any, path: str) -> Any:
        if value is None:
            if not nullable:
                raise Refused(path, "required", "is required (not nullable)")
            return None
        return convert(value, path)

    return checked


def _of_type(dtype: pa.DataType) -> Convert:
    if pa.types.is_dictionary(dtype):
        return _of_type(dtype.value_type)
    if pa.types.is_boolean(dtype):
        return _boolean
    if pa.types.is_integer(dtype):
        width = dtype.bit_width
        low, high = (-(2 ** (width - 1)), 2 ** (width - 1) - 1)
        if pa.types.is_unsigned_integer(dtype):
            low, high = 0, 2**width - 1
        return functools.partial(_integer, low, high, str(dtype))
    if pa.types.is_floating(dtype):
        return functools.partial(_float, _FLOAT_MAX[dtype.bit_width], str(dtype))
    if pa.types.is_decimal(dtype):
        return functools.partial(_decimal, dtype.precision, dtype.scale)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return _string
    if pa.types.is_fixed_size_binary(dtype):
        return functools.partial(_binary, dtype.byte_width)
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return functools.partial(_binary, None)
    if pa.types.is_timestamp(dtype):
        return functools.partial(_timestamp, _UNITS[dtype.unit], dtype.tz is not None)
    if pa.types.is_date(dtype):
        return functools.partial(_date, pa.types.is_date64(dtype))
    if pa.types.is_time(dtype):
        return functools.partial(_time, _UNITS[dtype.unit])
    if pa.types.is_duration(dtype):
        return functools.partial(_duration, _UNITS[dtype.unit])
    if pa.types.is_struct(dtype):
        fields = tuple((f.name, converter(f.type, f.nullable)) for f in dtype)
        return functools.partial(_struct, fields)
    if pa.types.is_map(dtype):
        keys = converter(dtype.key_type, False)
        items = converter(dtype.item_type, dtype.item_field.nullable)
        return functools.partial(_map, keys, items, _key_from_text(dtype.key_type))
    if (
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    ):
        size = dtype.list_size if pa.types.is_fixed_size_list(dtype) else None
        item = converter(dtype.value_type, dtype.value_field.nullable)
        return functools.partial(_list, item, size)
    if pa.types.is_null(dtype):
        return _nothing
    return functools.partial(_unsupported, str(dtype))


def _kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, decimal.Decimal)):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise Refused(path, "type", f"takes true or false, not {_kind(value)}")
    return value


def _integral(value: Any, path: str, what: str) -> int:
    """An integral JSON number as an int (``2.0`` and ``2e0`` are 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal)):
        raise Refused(path, "type", f"takes an integer ({what}), not {_kind(value)}")
    if isinstance(value, int):
        return value
    if not value.is_finite() or value != value.to_integral_value():
        raise Refused(path, "integer", f"takes an integer ({what}), not {value}")
    return int(value)


def _integer(low: int, high: int, what: str, value: Any, path: str) -> int:
    number = _integral(value, path, what)
    if not low <= number <= high:
        raise Refused(
            path, "out-of-range", f"{number} is out of range for {what} ({low} to {high})"
        )
    return number


def _float(largest: float, what: str, value: Any, path: str) -> float:
    if isinstance(value, str):
        if value in NON_FINITE:
            return NON_FINITE[value]
        raise Refused(
            path,
            "type",
            f'takes a number (or "NaN", "Infinity", '
            f'"-Infinity") for {what}, not the string {value!r}',
        )
    if isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal)):
        raise Refused(path, "type", f"takes a number for {what}, not {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if math.isinf(number) or abs(number) > largest:
        raise Refused(
            path,
            "out-of-range",
            f"{value} is out of range for {what} (at most {largest:g} in magnitude)",
        )
    return number


def _decimal(precision: int, scale: int, value: Any, path: str) -> decimal.Decimal:
    what = f"decimal({precision}, {scale})"
    if isinstance(value, str):
        try:
            number = decimal.Decimal(value.strip()) if value.strip() == value else None
        except decimal.InvalidOperation:
            number = None
        if number is None:
            raise Refused(path, "type", f"takes a decimal number, not {value!r}")
    elif isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool):
        number = decimal.Decimal(value)
    else:
        raise Refused(path, "type", f"takes a decimal number ({what}), not {_kind(value)}")
    if not number.is_finite():
        raise Refused(path, "out-of-range", f"{value} is not a finite decimal")
    # Its magnitude first, from the exponent alone: "1e20", "1e999999999" never reach an
    # arithmetic context (whose precision they would pass).
    if number != 0 and number.adjusted() >= precision - scale:
        raise Refused(
            path, "decimal-precision", f"{value} has more than {precision} digits ({what})"
        )
    step = decimal.Decimal(1).scaleb(-scale)
    with decimal.localcontext() as context:
        context.prec = max(precision, len(number.as_tuple().digits)) + scale + 2
        context.traps[decimal.InvalidOperation] = False
        exact = number.quantize(step)
        if exact != number:
            raise Refused(
                path,
                "decimal-scale",
                f"{value} has more than {scale} digits after the point ({what})",
            )
    if len(exact.as_tuple().digits) > precision and exact != 0:
        raise Refused(
            path, "decimal-precision", f"{value} has more than {precision} digits ({what})"
        )
    return exact


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise Refused(path, "type", f"takes a string, not {_kind(value)}")
    if not value.isascii():
        _unicode_text(value, path)
    return value


def _unicode_text(value: str, path: str) -> None:
    """Refuse a string JSON escapes made that is not Unicode text: an unpaired UTF-16
    surrogate (``"\\ud800"``) has no UTF-8 form, so nothing could store it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        raise Refused(
            path,
            "unpaired-surrogate",
            f"holds an unpaired UTF-16 surrogate \\u{code:04x} at character {exc.start}: "
            "not Unicode text (escape a character outside the BMP as a pair)",
        ) from None


def _binary(width: int | None, value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise Refused(path, "type", f"takes base64 text, not {_kind(value)}")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Refused(path, "base64", f"{value[:40]!r} is not base64") from None
    if width is not None and len(data) != width:
        raise Refused(path, "length", f"takes {width} bytes, not {len(data)}")
    return data


#: The fraction of a second of an ISO 8601 time: Python's parser reads six digits and drops the
#: rest, so the digits past the microsecond are read here (:func:`_iso_fraction`).
_FRACTION = re.compile(r"(?<=\d\d:\d\d:\d\d[.,])(\d{7,})")


def _iso_fraction(value: str, path: str) -> tuple[str, int]:
    """``value`` with at most six digits of a second (what :mod:`datetime` parses exactly),
    and the nanoseconds its further digits hold. Refused (``time-precision``) when they hold
    less than a nanosecond: no unit is finer, and nothing is truncated."""
    found = _FRACTION.search(value)
    if found is None:
        return value, 0
    digits = found.group(1)
    if digits[9:].strip("0"):
        raise Refused(path, "time-precision", f"{value} is finer than a nanosecond")
    nanos = int(digits[6:9].ljust(3, "0"))
    return value[: found.start()] + digits[:6] + value[found.end() :], nanos


def _in_unit(micros: int, per_second: int, path: str, value: Any, nanos: int = 0) -> int:
    """``micros`` microseconds and ``nanos`` nanoseconds in a unit of ``per_second``; refused
    when not exact."""
    if per_second >= 1_000_000_000:
        return micros * (per_second // 1_000_000) + nanos * (per_second // 1_000_000_000)
    if nanos:
        raise Refused(path, "time-precision", f"{value} is finer than the field's unit")
    if per_second >= 1_000_000:
        return micros * (per_second // 1_000_000)
    step = 1_000_000 // per_second
    if micros % step:
        raise Refused(path, "time-precision", f"{value} is finer than the field's unit")
    return micros // step


def _timestamp(per_second: int, zoned: bool, value: Any, path: str) -> int:
    """An ISO 8601 string or an integer in the unit, as an integer in the unit (exact)."""
    low, high = _ZONED_RANGE if zoned else _NAIVE_RANGE
    if isinstance(value, str):
        text, nanos = _iso_fraction(value, path)
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise Refused(path, "time", f"{value!r} is not an ISO 8601 time") from None
        if when.tzinfo is not None:  # an instant; a naive time is one in UTC
            when = when.astimezone(dt.UTC).replace(tzinfo=None)
        micros = (when - _EPOCH) // dt.timedelta(microseconds=1)
        number = _in_unit(micros, per_second, path, value, nanos)
    else:
        number = _integral(value, path, f"time in 1/{per_second} s")
        micros = number * 1_000_000 // per_second
    if not (low <= micros <= high and _INT64[0] <= number <= _INT64[1]):
        zone = " (a day inside them: the field has a time zone)" if zoned else ""
        raise Refused(path, "out-of-range", f"{value} is outside years 1 to 9999{zone}")
    return number


def _date(milliseconds: bool, value: Any, path: str) -> dt.date:
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise Refused(path, "time", f"{value!r} is not an ISO 8601 date") from None
    number = _integral(value, path, "date")
    if milliseconds:
        if number % 86_400_000:
            raise Refused(path, "time-precision", f"{number} ms is not a whole day")
        number //= 86_400_000
    try:
        return dt.date(1970, 1, 1) + dt.timedelta(days=number)
    except OverflowError:
        raise Refused(path, "out-of-range", f"{value} is outside years 1 to 9999") from None


def _time(per_second: int, value: Any, path: str) -> int:
    if isinstance(value, str):
        text, nanos = _iso_fraction(value, path)
        try:
            when = dt.time.fromisoformat(text)
        except ValueError:
            raise Refused(path, "time", f"{value!r} is not an ISO 8601 time") from None
        if when.tzinfo is not None:
            raise Refused(path, "time", f"a time of day takes no zone ({value!r})")
        micros = ((when.hour * 60 + when.minute) * 60 + when.second) * 1_000_000
        return _in_unit(micros + when.microsecond, per_second, path, value, nanos)
    number = _integral(value, path, f"time of day in 1/{per_second} s")
    if not 0 <= number < 86_400 * per_second:
        raise Refused(path, "out-of-range", f"{number} is not a time of day")
    return number


def _duration(per_second: int, value: Any, path: str) -> int:
    """An integer in the unit, or a number of seconds with a fraction (what reads write)."""
    if isinstance(value, decimal.Decimal):
        scaled = value * per_second
        if not scaled.is_finite() or scaled != scaled.to_integral_value():
            raise Refused(path, "time-precision", f"{value} s is finer than the unit")
        number = int(scaled)
    else:
        number = _integral(value, path, f"duration in 1/{per_second} s")
    if not _INT64[0] <= number <= _INT64[1]:
        raise Refused(path, "out-of-range", f"{value} is out of range for a duration")
    return number


def _struct(fields: tuple[tuple[str, Convert], ...], value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Refused(path, "type", f"takes an object, not {_kind(value)}")
    names = {name for name, _ in fields}
    unknown = sorted(set(value) - names)
    if unknown:
        raise Refused(
            f"{path}.{unknown[0]}",
            "unknown-field",
            f"is not a field (the struct has {sorted(names)})",
        )
    return {name: convert(value.get(name), f"{path}.{name}") for name, convert in fields}


def _list(item: Convert, size: int | None, value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise Refused(path, "type", f"takes an array, not {_kind(value)}")
    if size is not None and len(value) != size:
        raise Refused(path, "length", f"takes {size} items, not {len(value)}")
    return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]


def _key_from_text(dtype: pa.DataType) -> Callable[[str], Any] | None:
    """How an object key (text) reads as a map key of ``dtype``, if it can."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return lambda text: text
    if pa.types.is_integer(dtype):
        return lambda text: int(text) if _INTEGER_TEXT.fullmatch(text) else text
    return None


def _map(
    keys: Convert,
    items: Convert,
    from_text: Callable[[str], Any] | None,
    value: Any,
    path: str,
) -> list[tuple[Any, Any]]:
    if isinstance(value, dict):
        if from_text is None:
            raise Refused(path, "type", "these keys take the [[key, value], ...] form")
        pairs = [(from_text(k), v) for k, v in value.items()]
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(k, v) for k, v in value]
    else:
        raise Refused(
            path, "type", f"takes an object or [[key, value], ...], not {_kind(value)}"
        )
    out: list[tuple[Any, Any]] = []
    seen: set[Any] = set()
    for key, item in pairs:
        where = f"{path}[{json.dumps(key, default=str)}]"
        converted = keys(key, f"{path} key")
        if converted in seen:
            raise Refused(where, "duplicate-key", "the key appears twice")
        seen.add(converted)
        out.append((converted, items(item, where)))
    return out


def _nothing(value: Any, path: str) -> None:
    raise Refused(path, "type", f"takes only null, not {_kind(value)}")


def _unsupported(what: str, value: Any, path: str) -> None:
    raise Refused(path, "type", f"values of {what} are not taken in JSON (send Arrow)")


# -- reads ---------------------------------------------------------------------------------------


def writable(value: Any, dtype: pa.DataType) -> Any:
    """An Arrow value (as ``to_pylist`` gives it) of ``dtype`` as JSON that :func:`converter`
    reads back to the same value: a scalar in its :func:`~catalog_client.jsonforms.scalar_form`
    (non-finite floats as their strings, times ISO 8601, bytes base64, decimals as strings,
    durations in seconds), maps as objects (``[[k, v], ...]`` when their keys are not text or
    integers)."""
    if value is None:
        return None
    if pa.types.is_dictionary(dtype):
        return writable(value, dtype.value_type)
    if pa.types.is_struct(dtype) and isinstance(value, dict):
        return {f.name: writable(value.get(f.name), f.type) for f in dtype}
    if pa.types.is_map(dtype):
        pairs = [(k, writable(v, dtype.item_type)) for k, v in value]
        if _key_from_text(dtype.key_type) is None:
            return [[writable(k, dtype.key_type), v] for k, v in pairs]
        return {str(k): v for k, v in pairs}
    if isinstance(value, list):
        return [writable(v, dtype.value_type) for v in value]
    return scalar_form(value)
