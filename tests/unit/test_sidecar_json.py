"""NDJSON appends through pyarrow's JSON reader: the same table as the Python parser, or the
Python parser's answer."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import BadInputError
from orchestrator.wire import ndjson as rows_module
from orchestrator.wire.ipc import TooManyRowsError
from orchestrator.wire.jsonvalues import writable
from orchestrator.wire.ndjson import json_lines, rows_to_table

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("n", pa.int32()),
        pa.field("u", pa.uint16()),
        pa.field("x", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("name", pa.string()),
        pa.field("s", pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.large_string())])),
        pa.field("tags", pa.list_(pa.string())),
    ]
)

ROW = st.fixed_dictionaries(
    {"id": st.integers(-(2**63), 2**63 - 1)},
    optional={
        "n": st.none() | st.integers(-(2**31), 2**31 - 1),
        "u": st.none() | st.integers(0, 2**16 - 1),
        "x": st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-99, 99),
        "ok": st.none() | st.booleans(),
        "name": st.none() | st.text(max_size=8),
        "s": st.none() | st.fixed_dictionaries({}, optional={"a": st.integers(0, 9),
                                                           "b": st.text(max_size=4)}),
        "tags": st.none() | st.lists(st.none() | st.text(max_size=3), max_size=3),
    },
)  # fmt: skip


def slow(body: bytes, schema: pa.Schema, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patched:
        patched.setattr(rows_module, "parse_with_arrow", lambda *_: None)
        try:
            return rows_to_table(body, schema)
        except BadInputError as exc:
            return exc.message


@settings(max_examples=150, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]))
def test_the_json_reader_builds_the_python_parsers_table(
    values: list[dict[str, Any]], end: str
) -> None:
    lines = "".join(json.dumps(v, ensure_ascii=False) + end for v in values).encode()
    body = lines * -(-rows_module.ARROW_JSON_MIN_ROWS // len(values))  # enough for the reader
    fast = rows_module.parse_with_arrow(body, SCHEMA, None)
    assert fast is not None, body
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = slow(body, SCHEMA, monkeypatch)
    assert fast.equals(expected), (fast.to_pylist(), expected.to_pylist())


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": 1} {"id": 2}\n',  # two objects on a line
        b'{"id": 1, "name": "\\ud800"}\n',  # a lone surrogate
        b'{"id": 1, "name": "\xff"}\n',  # not UTF-8
        b'{"id": 1, "zz": 2}\n',  # unknown field
        b'{"name": "a"}\n',  # required field absent
        b'{"id": null}\n',
        b'{"id": 1.5}\n',
        b'{"id": "1"}\n',
        b"[1, 2]\n",
        b'{"id": 1, "n": 3000000000}\n',
        b'{"id": 1, "name": ' + b"[" * 100 + b"]" * 100 + b"}\n",
        b"\n\n",
    ],
)
def test_what_the_json_reader_cannot_take_gets_the_python_parsers_answer(
    body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = b'{"id": 0}\n' * rows_module.ARROW_JSON_MIN_ROWS + body  # past the few-rows path
    expected = slow(body, SCHEMA, monkeypatch)
    try:
        got: Any = rows_to_table(body, SCHEMA)
    except BadInputError as exc:
        got = exc.message
    assert got.equals(expected) if isinstance(got, pa.Table) else got == expected


def test_binary_and_times_stay_with_the_python_parser() -> None:
    schema = pa.schema([pa.field("b", pa.binary()), pa.field("t", pa.timestamp("us"))])
    assert rows_module.parse_with_arrow(b'{"b": "YQ=="}\n', schema, None) is None


@pytest.mark.parametrize("count", [5, 40])
def test_more_rows_than_the_limit_are_refused_either_way(count: int) -> None:
    body = b'{"id": 1}\n' * count
    with pytest.raises(TooManyRowsError):
        rows_to_table(body, SCHEMA, count - 1)
    assert rows_to_table(body, SCHEMA, count).num_rows == count


def test_few_rows_go_through_python_and_many_through_the_reader() -> None:
    few = b'{"id": 1}\n' * (rows_module.ARROW_JSON_MIN_ROWS - 1)
    assert rows_module.parse_with_arrow(few, SCHEMA, None) is None
    many = few + b'{"id": 2}'  # the last line without its newline
    assert rows_module.parse_with_arrow(many, SCHEMA, None) is not None


def _python_lines(table: pa.Table) -> list[Any]:
    types = {f.name: f.type for f in table.schema}
    return [json.loads(json.dumps({k: writable(v, types[k]) for k, v in row.items()}))
            for row in table.to_pylist()]  # fmt: skip


def _strict(line: str) -> Any:
    """``line`` parsed as strict JSON: a bare NaN or Infinity fails."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(line, parse_constant=refuse)


@settings(max_examples=100, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=40))
def test_json_lines_built_in_arrow_parse_as_the_python_rows(values: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist(values, schema=SCHEMA)
    text = b"".join(json_lines(table, batch_rows=7))
    assert text.endswith(b"\n") and text.count(b"\n") == len(values)
    assert [json.loads(line) for line in text.splitlines()] == _python_lines(table)


def test_json_lines_of_every_kind_of_column() -> None:
    import datetime as dt
    import decimal

    table = pa.table(
        {
            "s": ["plain", 'q"uote', "back\\slash", "ctl\x01\n", "é ☃ \u2028", None],
            "u": pa.array([0, 2**64 - 1, None, 5, 6, 7], pa.uint64()),
            "b": [True, False, None, True, True, False],
            "f": [1.0, -0.0, float("nan"), None, 1e300, 2.5],
            "t": pa.array([dt.datetime(2026, 1, 1, 12)] * 5 + [None], pa.timestamp("us")),
            "bin": [b"\x00\xff", None, b"", b"a", b"b", b"c"],
            "dec": pa.array([decimal.Decimal("1.50")] * 6, pa.decimal128(5, 2)),
            "l": [[1, None], None, [], [2], [3], [4]],
            "m": pa.array(
                [[("k", 1)], None, [], [("a", 2)], [], []], pa.map_(pa.string(), pa.int8())
            ),
            "n": pa.nulls(6),
        }
    )
    lines = b"".join(json_lines(table)).decode().splitlines()
    # Strict JSON: NaN as the string "NaN" (the proto3 mapping), an empty map as {}.
    assert [_strict(line) for line in lines] == _python_lines(table)
    assert _strict(lines[2])["f"] == "NaN" and _strict(lines[2])["m"] == {}


TYPED = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("t", pa.timestamp("ms", tz="UTC")), pa.field("naive", pa.timestamp("us")),
    pa.field("d", pa.date32()), pa.field("tm", pa.time64("us")),
    pa.field("b", pa.binary()), pa.field("fixed", pa.binary(3)),
    pa.field("dec", pa.decimal128(10, 2)), pa.field("took", pa.duration("ms")),
    pa.field("m", pa.map_(pa.string(), pa.binary())),
    pa.field("l", pa.list_(pa.struct([
        pa.field("when", pa.timestamp("ms", tz="UTC")), pa.field("raw", pa.large_binary()),
    ]))),
])  # fmt: skip


def test_what_get_read_writes_appends_back_as_the_same_rows() -> None:
    """Times in ISO 8601, bytes in base64, decimals as strings and maps as objects, at the top
    and nested, durations in seconds: the JSON lines :func:`json_lines` writes parse back into
    the same table, in fewer rows than the JSON reader takes and in more. Integers still read
    as times (and durations) in their unit."""
    import datetime as dt
    import decimal

    utc = dt.UTC
    row = {
        "id": 1, "t": dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=utc),
        "naive": dt.datetime(2026, 1, 2, 3, 4, 5, 123456), "d": dt.date(2026, 1, 2),
        "tm": dt.time(3, 4, 5, 6), "b": b"\x00\xff\x10", "fixed": b"abc",
        "dec": decimal.Decimal("12.34"), "took": dt.timedelta(seconds=90, milliseconds=5),
        "m": [("k", b"\x01")],
        "l": [{"when": dt.datetime(2020, 5, 6, tzinfo=utc), "raw": b"\xfe"}, None],
    }  # fmt: skip
    empty = {"id": 2, **{name: None for name in TYPED.names[1:]}}
    for count in (2, 3 * rows_module.ARROW_JSON_MIN_ROWS):
        table = pa.Table.from_pylist([row, empty] * (count // 2), schema=TYPED)
        assert rows_to_table(b"".join(json_lines(table)), TYPED).equals(table)
    as_millis = rows_to_table(b'{"id": 3, "t": 1767323045678, "took": 90005}', TYPED)
    assert as_millis.column("t")[0].as_py() == row["t"]
    assert as_millis.column("took")[0].as_py() == row["took"]


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ('{"id": 1, "b": "not base64!"}', "b", "base64"),
        ('{"id": 1, "t": "yesterday"}', "t", "'yesterday' is not an ISO 8601 time"),
        ('{"id": 1, "dec": "1.2.3"}', "dec", "takes a decimal number, not '1.2.3'"),
        ('{"id": 1, "l": [{"raw": "%%%"}]}', "l[0].raw", "base64"),
    ],
)
def test_a_value_in_none_of_those_forms_is_refused_naming_line_and_field(
    line: str, field: str, says: str
) -> None:
    body = ('{"id": 0}\n' + line + "\n").encode()
    with pytest.raises(BadInputError) as refused:
        rows_to_table(body, TYPED)
    assert refused.value.details["line"] == 2 and refused.value.details["field"] == field
    assert str(refused.value).startswith(f"line 2: field {field}: ") and says in str(refused.value)
