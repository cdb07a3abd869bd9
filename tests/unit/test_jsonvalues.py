"""Strict JSON values: each value stored exactly as sent or refused naming line, path and rule;
the two parsers (pyarrow's reader for many lines, the Python rule) give the same answer."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import BadInputError
from orchestrator.wire.jsonvalues import writable
from orchestrator.wire.ndjson import ARROW_JSON_MIN_ROWS, json_lines, rows_to_table

POINT = pa.struct([pa.field("x", pa.int64(), nullable=False), pa.field("label", pa.string())])
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i32", pa.int32()),
        pa.field("u32", pa.uint32()),
        pa.field("f64", pa.float64()),
        pa.field("f32", pa.float32()),
        pa.field("b", pa.bool_()),
        pa.field("s", pa.string()),
        pa.field("dec", pa.decimal128(6, 2)),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tz", pa.timestamp("ms", tz="UTC")),
        pa.field("sec", pa.timestamp("s")),
        pa.field("day", pa.date32()),
        pa.field("nums", pa.list_(pa.int64())),
        pa.field("pt", POINT),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field("ikeys", pa.map_(pa.int32(), pa.string())),
    ]
)


def parse(*rows: str) -> pa.Table:
    return rows_to_table(("\n".join(rows) + "\n").encode(), SCHEMA)


def refusal(row: str) -> BadInputError:
    with pytest.raises(BadInputError) as refused:
        parse('{"id": 0}', row)
    assert refused.value.details["line"] == 2
    return refused.value


@pytest.mark.parametrize(
    ("row", "path", "rule"),
    [
        ('{"id": 1, "i32": 1.5}', "i32", "integer"),
        ('{"id": 1.5}', "id", "integer"),
        ('{"id": 1, "u32": -1}', "u32", "out-of-range"),
        ('{"id": 1, "u32": 4294967296}', "u32", "out-of-range"),
        ('{"id": 9223372036854775808}', "id", "out-of-range"),
        ('{"id": 1, "nums": [1, 2.5]}', "nums[1]", "integer"),
        ('{"id": 1, "pt": {"x": 1.5}}', "pt.x", "integer"),
        ('{"id": 1, "m": {"a": 1.5}}', 'm["a"]', "integer"),
        ('{"id": 1, "ikeys": [[-2.7, "a"]]}', "ikeys key", "integer"),
        ('{"id": 1, "f64": true}', "f64", "type"),
        ('{"id": 1, "f64": 1e400}', "f64", "out-of-range"),
        ('{"id": 1, "f32": 3.5e38}', "f32", "out-of-range"),
        ('{"id": 1, "f64": "one"}', "f64", "type"),
        ('{"id": 1, "b": 1}', "b", "type"),
        ('{"id": 1, "s": 5}', "s", "type"),
        ('{"id": 1, "pt": {"label": "a"}}', "pt.x", "required"),
        ('{"id": 1, "pt": {"x": null}}', "pt.x", "required"),
        ('{"id": 1, "pt": {"x": 1, "z": 2}}', "pt.z", "unknown-field"),
        ('{"id": 1, "dec": 12.345}', "dec", "decimal-scale"),
        ('{"id": 1, "dec": "12345.6"}', "dec", "decimal-precision"),
        ('{"id": 1, "dec": "NaN"}', "dec", "out-of-range"),
        # A decimal's magnitude from its exponent, before any arithmetic context sees it.
        ('{"id": 1, "dec": "1e20"}', "dec", "decimal-precision"),
        ('{"id": 1, "dec": 1e20}', "dec", "decimal-precision"),
        ('{"id": 1, "dec": 1E+999999999}', "dec", "decimal-precision"),
        ('{"id": 1, "dec": "-1e4"}', "dec", "decimal-precision"),
        ('{"id": 1, "dec": "1e-999999999"}', "dec", "decimal-scale"),
        # Strings that are not Unicode text: an unpaired surrogate, at any depth.
        ('{"id": 1, "s": "\\ud800"}', "s", "unpaired-surrogate"),
        ('{"id": 1, "s": "a\\udfffb"}', "s", "unpaired-surrogate"),
        ('{"id": 1, "pt": {"x": 1, "label": "\\udc00"}}', "pt.label", "unpaired-surrogate"),
        ('{"id": 1, "ikeys": [[1, "\\ud83d"]]}', "ikeys[1]", "unpaired-surrogate"),
        ('{"id": 1, "ts": 9223372036854775807}', "ts", "out-of-range"),
        ('{"id": 1, "tz": "9999-12-31T23:00:00+00:00"}', "tz", "out-of-range"),
        ('{"id": 1, "sec": "2026-01-01T00:00:00.5"}', "sec", "time-precision"),
        ('{"id": 1, "ts": "yesterday"}', "ts", "time"),
        ('{"id": 1, "day": 3000000}', "day", "out-of-range"),
        ('{"id": 1, "m": [["a", 1], ["a", 2]]}', 'm["a"]', "duplicate-key"),
    ],
)
def test_a_value_that_would_change_is_refused_naming_its_path_and_rule(
    row: str, path: str, rule: str
) -> None:
    refused = refusal(row)
    assert (refused.details["field"], refused.details["rule"]) == (path, rule), str(refused)
    assert str(refused).startswith(f"line 2: field {path}: ")


@pytest.mark.parametrize(
    "row",
    [
        '{"id": 1, "f64": NaN}',
        '{"id": 1, "f64": Infinity}',
        '{"id": 1, "f64": -Infinity}',
        '{"id": 1, "id": 2}',
        '{"id": 1, "pt": {"x": 1, "x": 2}}',
    ],
)
def test_what_is_not_json_is_refused(row: str) -> None:
    """The literals NaN and Infinity, and a key twice in an object (at any depth)."""
    assert "is not JSON" in str(refusal(row))


def test_values_are_stored_exactly_as_sent() -> None:
    """Integral numbers in any notation, decimals from their text, the proto3 float strings,
    times in the unit or ISO 8601, empty maps, integer map keys from object keys."""
    table = parse(
        '{"id": 2.0, "i32": 1e2, "f64": "NaN", "f32": "-Infinity", "dec": 12.34, "ts": 0,'
        ' "tz": "2026-01-02T03:04:05.678+01:00", "m": {}, "ikeys": {"7": "seven"},'
        ' "pt": {"x": 5}, "nums": [], "day": "2026-02-03"}',
        '{"id": 9223372036854775807, "dec": "-9999.99", "ts": "0001-01-01T00:00:00",'
        ' "f64": 1.7976931348623157e308, "u32": 4294967295}',
    )
    first, second = table.to_pylist()
    assert (first["id"], first["i32"]) == (2, 100)
    assert math.isnan(first["f64"]) and first["f32"] == -math.inf
    assert first["dec"] == decimal.Decimal("12.34")
    assert first["ts"] == dt.datetime(1970, 1, 1)
    assert first["tz"] == dt.datetime(2026, 1, 2, 2, 4, 5, 678000, tzinfo=dt.UTC)
    assert (first["m"], first["ikeys"]) == ([], [(7, "seven")])
    assert first["pt"] == {"x": 5, "label": None}
    assert second["id"] == 2**63 - 1 and second["dec"] == decimal.Decimal("-9999.99")
    assert second["ts"] == dt.datetime(1, 1, 1) and second["u32"] == 2**32 - 1


def test_a_read_is_strict_json_that_appends_back_to_the_same_rows() -> None:
    """NaN and the infinities as their strings, an empty map as {}: json.loads in strict
    mode reads every line, and appending what a read wrote stores the same rows."""
    table = parse(
        '{"id": 1, "f64": "NaN", "f32": "Infinity", "m": {}, "ikeys": {"-3": "x"},'
        ' "tz": "2026-01-02T03:04:05Z", "dec": "0.10"}',
        '{"id": 2, "pt": {"x": 1, "label": "é"}, "nums": [1, null]}',
    )
    text = b"".join(json_lines(table))

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    lines = [json.loads(line, parse_constant=refuse) for line in text.splitlines()]
    assert lines[0]["f64"] == "NaN" and lines[0]["m"] == {} and lines[0]["ikeys"] == {"-3": "x"}
    again = rows_to_table(text, SCHEMA)
    assert _same(again, table)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN."""
    dumped = [[json.dumps(writable(v, f.type)) for f, v in zip(a.schema, r.values(), strict=True)]
              for r in (*a.to_pylist(), *b.to_pylist())]  # fmt: skip
    return dumped[: a.num_rows] == dumped[a.num_rows :]


# -- the two parsers agree -------------------------------------------------------------------

class _RawText(str):
    """A JSON fragment written as is (a number exactly as generated)."""


NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
    st.sampled_from(["1.5", "2.0", "1e2", "-2.7", "1e400", "3.5e38", "NaN", "Infinity", "-0.0"]),
).map(_RawText)
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    NUMBERS,
    st.text(max_size=5),
    st.sampled_from(["NaN", "Infinity", "1.5"]),
)


def _encode(value: Any) -> str:
    if isinstance(value, _RawText):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_encode(v) for v in value) + "]"
    return json.dumps(value)


SMALL = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i8", pa.int8()),
        pa.field("u16", pa.uint16()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("b", pa.bool_()),
        pa.field("s", pa.string()),
        pa.field("l", pa.list_(pa.int32())),
        pa.field("pt", POINT),
    ]
)
ROWS = st.fixed_dictionaries(
    {"id": NUMBERS},
    optional={
        "i8": JSON_VALUES,
        "u16": JSON_VALUES,
        "f32": JSON_VALUES,
        "f64": JSON_VALUES,
        "b": JSON_VALUES,
        "s": JSON_VALUES,
        "l": st.lists(JSON_VALUES, max_size=3),
        "pt": st.fixed_dictionaries({}, optional={"x": JSON_VALUES, "label": JSON_VALUES}),
    },
)


def _outcome(body: bytes) -> tuple[str, Any]:
    try:
        return "stored", json_lines(rows_to_table(body, SMALL)).__next__()
    except BadInputError as exc:
        return "refused", (exc.details.get("field"), exc.details.get("rule"))


@settings(max_examples=300, deadline=None)
@given(ROWS)
def test_one_line_and_many_get_the_same_answer(row: dict[str, Any]) -> None:
    """A line alone goes through the Python rule; repeated into a body of many lines, through
    pyarrow's reader first. Stored rows are the same; a refusal is the same refusal."""
    line = _encode(row)
    alone = _outcome((line + "\n").encode())
    many = _outcome(((line + "\n") * ARROW_JSON_MIN_ROWS).encode())
    assert alone[0] == many[0], (line, alone, many)
    if alone[0] == "stored":
        assert many[1].startswith(alone[1])
    else:
        assert alone[1] == many[1]


def test_a_stored_time_python_cannot_hold_still_reads() -> None:
    """A time stored before appends refused such values (int64's last microsecond, past year
    9999) reads as its integer in the unit, which is strict JSON, instead of breaking the
    read."""
    column = pa.array([2**63 - 1, 0], pa.timestamp("us", tz="UTC"))
    table = pa.table({"id": [1, 2], "tz": column})
    lines = [json.loads(line) for line in b"".join(json_lines(table)).splitlines()]
    assert lines == [{"id": 1, "tz": 2**63 - 1}, {"id": 2, "tz": "1970-01-01T00:00:00+00:00"}]


def test_a_surrogate_pair_is_one_character_and_an_exponent_a_decimal() -> None:
    table = parse('{"id": 1, "s": "\\ud83d\\ude00", "dec": "1.5e3"}')
    assert table.column("s")[0].as_py() == "\U0001f600"
    assert str(table.column("dec")[0].as_py()) == "1500.00"


@pytest.mark.parametrize(
    ("kind", "text", "stored"),
    [
        (pa.timestamp("ns"), "2000-01-01T00:00:00.123456789", 946_684_800_123_456_789),
        (pa.timestamp("ns"), "2000-01-01T00:00:00.1234567890", 946_684_800_123_456_789),
        (pa.time64("ns"), "12:00:00.000000001", 43_200_000_000_001),
        (pa.timestamp("us"), "2000-01-01T00:00:00.1234560", 946_684_800_123_456),
        (pa.timestamp("ms", tz="UTC"), "2000-01-01T01:00:00.123000+01:00", 946_684_800_123),
        (pa.timestamp("us"), "2000-01-01T00:00:00.000000001", "time-precision"),
        (pa.timestamp("ns"), "2000-01-01T00:00:00.1234567891", "time-precision"),
        (pa.time64("us"), "12:00:00.0000005", "time-precision"),
    ],
)
def test_digits_of_a_second_past_the_sixth_are_read_never_dropped(
    kind: pa.DataType, text: str, stored: int | str
) -> None:
    """Python's ISO parser keeps six digits of a second and drops the rest: a nanosecond unit
    gets them all, a coarser one refuses what it cannot hold (never truncated)."""
    schema = pa.schema([pa.field("x", kind)])
    line = f'{{"x": "{text}"}}\n'.encode()
    if isinstance(stored, str):
        with pytest.raises(BadInputError) as refused:
            rows_to_table(line, schema)
        assert refused.value.details["rule"] == stored
        return
    table = rows_to_table(line, schema)
    assert table.column("x").cast(pa.int64())[0].as_py() == stored
