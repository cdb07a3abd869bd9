"""The round trip of JSON values through a real sidecar, against an oracle of its own.

Hypothesis writes each field's JSON text, and the oracle computes from that text alone what
the documented table (docs/data-plane.md, "Values") says is stored, or which rule refuses it,
with Python's ``decimal``, ``datetime``, ``base64`` and a UTF-16 decode: none of the product's
parsers, so a rule the product implements differently from the table fails here. Exponents,
unpaired surrogates and every type's edges are drawn on purpose. An accepted row must read back
in Arrow exactly as predicted; a refused one must answer 400 naming a field the oracle refuses,
with the oracle's rule for it, and store nothing.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_client.media import ARROW_STREAM_TYPE
from support.sidecars import Launch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "mz_catalog.mz_oracle"
RELEASE = """
import pyarrow as pa
from catalog.release import Builtin, Release

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("i32", pa.int32()), pa.field("u64", pa.uint64()),
    pa.field("dec", pa.decimal128(12, 2)), pa.field("f64", pa.float64()),
    pa.field("s", pa.string()), pa.field("ts", pa.timestamp("us")),
    pa.field("day", pa.date32()), pa.field("bin", pa.binary()),
])
RELEASE = Release("0.1.0", [Builtin("mz_catalog", "mz_oracle", "table", "s1", SCHEMA)])
"""
#: Examples of the property (each one append): TEST_ORACLE_EXAMPLES for more.
EXAMPLES = int(os.environ.get("TEST_ORACLE_EXAMPLES", "150"))

#: What the oracle expects of one field: ("ok", the stored value) or ("refused", the rule).
Expect = tuple[str, Any]
EPOCH = dt.datetime(1970, 1, 1)


def ok(value: Any) -> Expect:
    return ("ok", value)


def refused(rule: str) -> Expect:
    return ("refused", rule)


# --- the oracle: the documented table, from the text alone ----------------------------------


def integer_oracle(text: str, low: int, high: int) -> Expect:
    number = decimal.Decimal(text)
    if number != number.to_integral_value():
        return refused("integer")
    value = int(number)
    return ok(value) if low <= value <= high else refused("out-of-range")


def decimal_oracle(text: str, precision: int, scale: int) -> Expect:
    number = decimal.Decimal(text)
    if not number.is_finite():
        return refused("out-of-range")
    if abs(number) >= decimal.Decimal(10) ** (precision - scale):
        return refused("decimal-precision")
    with decimal.localcontext() as context:
        context.prec = 200
        stepped = number.quantize(decimal.Decimal(1).scaleb(-scale))
    return ok(stepped) if stepped == number else refused("decimal-scale")


def string_oracle(units: list[int]) -> Expect:
    data = b"".join(u.to_bytes(2, "little") for u in units)
    try:
        return ok(data.decode("utf-16-le"))
    except UnicodeDecodeError:
        return refused("unpaired-surrogate")


def micros(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


LOWEST, HIGHEST = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)


# --- the texts, each with its expectation ----------------------------------------------------


@st.composite
def integer_text(draw: st.DrawFn, low: int, high: int) -> tuple[str, Expect]:
    edge = st.sampled_from([low, high, low - 1, high + 1, 0])
    n = draw(st.one_of(edge, st.integers(low - 1000, high + 1000), st.integers(-(2**70), 2**70)))
    form = draw(st.sampled_from(["plain", "point", "exponent", "fraction", "scaled"]))
    if form == "point":
        text = f"{n}.0"
    elif form == "exponent":
        text = f"{n}e0"
    elif form == "fraction":
        text = f"{n}.{draw(st.integers(1, 99))}"
    elif form == "scaled":  # 1200 as 12e2, 0.5 as 5e-1
        text = f"{n}e{draw(st.integers(-3, 3))}"
    else:
        text = str(n)
    return text, integer_oracle(text, low, high)


@st.composite
def decimal_text(draw: st.DrawFn) -> tuple[str, Expect]:
    digits = draw(st.text("0123456789", min_size=1, max_size=14)).lstrip("0") or "0"
    fraction = draw(st.text("0123456789", max_size=4))
    sign = draw(st.sampled_from(["", "-"]))
    mantissa = sign + digits + (f".{fraction}" if fraction else "")
    exponent = draw(st.one_of(st.none(), st.integers(-6, 22)))
    text = mantissa if exponent is None else f"{mantissa}e{exponent}"
    special = draw(st.sampled_from([None, None, None, None, "NaN", "Infinity", "1e20", "1E-3"]))
    if special is not None:
        text = special
    expect = decimal_oracle(text, 12, 2)
    as_string = special in ("NaN", "Infinity") or draw(st.booleans())
    return (json.dumps(text) if as_string else text), expect


@st.composite
def float_text(draw: st.DrawFn) -> tuple[str, Expect]:
    choice = draw(st.sampled_from(["number", "number", "named", "huge"]))
    if choice == "named":
        name = draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        return json.dumps(name), ok(float(name.replace("Infinity", "inf")))
    if choice == "huge":
        return draw(st.sampled_from(["1e309", "-2e400"])), refused("out-of-range")
    x = draw(st.floats(allow_nan=False, allow_infinity=False))
    return repr(x), ok(x)


SURROGATE_HIGH = st.integers(0xD800, 0xDBFF)
SURROGATE_LOW = st.integers(0xDC00, 0xDFFF)
PLAIN = st.sampled_from([0x41, 0x7A, 0x20, 0xE9, 0x4E2D, 0x22, 0x5C, 0x0A, 0xFFFD])


@st.composite
def string_text(draw: st.DrawFn) -> tuple[str, Expect]:
    units: list[int] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["plain", "plain", "pair", "lone"]))
        if kind == "pair":
            units += [draw(SURROGATE_HIGH), draw(SURROGATE_LOW)]
        elif kind == "lone":
            units.append(draw(st.one_of(SURROGATE_HIGH, SURROGATE_LOW)))
        else:
            units.append(draw(PLAIN))
    # Every unit escaped (a surrogate can only be written so), or plain where it may be.
    escaped = draw(st.booleans())
    body = "".join(
        f"\\u{u:04x}" if escaped or 0xD800 <= u <= 0xDFFF else json.dumps(chr(u))[1:-1]
        for u in units
    )
    return f'"{body}"', string_oracle(units)


@st.composite
def timestamp_text(draw: st.DrawFn) -> tuple[str, Expect]:
    moment = draw(st.datetimes(min_value=LOWEST, max_value=HIGHEST))
    form = draw(st.sampled_from(["iso", "iso", "integer", "finer", "outside"]))
    if form == "integer":
        return str(micros(moment)), ok(moment)
    if form == "outside":
        return str(draw(st.sampled_from([micros(LOWEST) - 1, micros(HIGHEST) + 1]))), refused(
            "out-of-range"
        )
    text = moment.isoformat(timespec="microseconds")
    if form == "finer":  # a nanosecond past the unit
        return json.dumps(text + "001"), refused("time-precision")
    return json.dumps(moment.isoformat()), ok(moment)


@st.composite
def date_text(draw: st.DrawFn) -> tuple[str, Expect]:
    day = draw(st.dates())
    if draw(st.booleans()):
        return str((day - dt.date(1970, 1, 1)).days), ok(day)
    return json.dumps(day.isoformat()), ok(day)


@st.composite
def binary_text(draw: st.DrawFn) -> tuple[str, Expect]:
    data = draw(st.binary(max_size=24))
    if draw(st.integers(0, 4)) == 0:
        return json.dumps(draw(st.sampled_from(["%%%%", "ab$=", "is not base64!"]))), refused(
            "base64"
        )
    text = base64.b64encode(data).decode()
    assert binascii.a2b_base64(text) == data
    return json.dumps(text), ok(data)


FIELDS = {
    "i32": integer_text(-(2**31), 2**31 - 1),
    "u64": integer_text(0, 2**64 - 1),
    "dec": decimal_text(),
    "f64": float_text(),
    "s": string_text(),
    "ts": timestamp_text(),
    "day": date_text(),
    "bin": binary_text(),
}
rows = st.dictionaries(st.sampled_from(sorted(FIELDS)), st.none(), min_size=1, max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({name: FIELDS[name] for name in chosen})
)


def same(stored: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(stored, float) and math.isnan(stored)
    if isinstance(expected, float):  # 0.0 and -0.0 too
        return stored == expected and math.copysign(1, stored) == math.copysign(1, expected)
    return bool(stored == expected)


def test_what_a_sidecar_stores_is_what_the_documented_table_computes(
    launch: Launch, tmp_path: Path
) -> None:
    path = tmp_path / "oracle.py"
    path.write_text(RELEASE)
    leader = launch("0.1.0", 1, "oracle", release=str(path), auto_promote=True)
    leader.wait_state("serving")
    accepted: dict[int, dict[str, Any]] = {}
    texts: dict[int, str] = {}
    outcomes = {"ok": 0, "refused": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(row=rows)
    def append(row: dict[str, tuple[str, Expect]]) -> None:
        identity = len(texts) + 1
        line = "{" + f'"id": {identity}' + "".join(
            f', "{name}": {text}' for name, (text, _) in row.items()) + "}\n"  # fmt: skip
        texts[identity] = line
        answer = leader.sidecar.request("POST", f"/append?collection={NAME}", line.encode())
        refusals = {name: e[1] for name, (_, e) in row.items() if e[0] == "refused"}
        if refusals:
            body = json.loads(answer.body)
            assert answer.status == 400, (line, refusals, answer.summary())
            field = str(body.get("field", "")).split(".")[0].split("[")[0]
            assert field in refusals, (line, refusals, body)
            assert body.get("rule") == refusals[field], (line, refusals, body)
            outcomes["refused"] += 1
            return
        assert answer.status == 200, (line, answer.summary())
        accepted[identity] = {name: e[1] for name, (_, e) in row.items()}
        outcomes["ok"] += 1

    append()
    read = leader.sidecar.request(
        "GET", f"/read?collection={NAME}", headers={"Accept": ARROW_STREAM_TYPE}, timeout=60
    )
    assert read.status == 200, read.summary()
    table = pa.ipc.open_stream(read.body).read_all()
    stored = {row["id"]: row for row in table.to_pylist()}
    assert sorted(stored) == sorted(accepted), "every accepted row once, no refused one"
    for identity, expected in accepted.items():
        for name, value in expected.items():
            assert same(stored[identity][name], value), (texts[identity], name, value)
        for name in FIELDS.keys() - expected.keys():
            assert stored[identity][name] is None, (texts[identity], name)
    print(f"oracle: {outcomes['ok']} rows stored as computed, {outcomes['refused']} refused")
    assert outcomes["ok"] and outcomes["refused"], outcomes
