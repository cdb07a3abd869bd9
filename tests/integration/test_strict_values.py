"""Strict values through a real sidecar: what an append stores is exactly what was sent, or it
is refused (400, naming line, field path and rule) and nothing is stored; every stored value
reads back identical in JSON lines and in Arrow; no group member fails for another's data."""

from __future__ import annotations

import io
import json
import os
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from catalog.errors import BadInputError
from catalog_client.media import ARROW_STREAM_TYPE
from orchestrator.wire.ndjson import json_lines, rows_to_table
from support.sidecars import Launch, SidecarProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "mz_catalog.mz_values"
POINT = pa.struct([pa.field("x", pa.int64(), nullable=False), pa.field("label", pa.string())])
FIELDS = {
    "i8": "pa.int8()", "i32": "pa.int32()", "u32": "pa.uint32()", "u64": "pa.uint64()",
    "f32": "pa.float32()", "f64": "pa.float64()", "b": "pa.bool_()", "s": "pa.string()",
    "dec": "pa.decimal128(10, 2)", "ts": "pa.timestamp('us')",
    "tz": "pa.timestamp('ms', tz='UTC')", "day": "pa.date32()", "bin": "pa.binary()",
    "nums": "pa.list_(pa.int64())", "pt": "POINT", "m": "pa.map_(pa.string(), pa.int64())",
    "pts": "pa.list_(POINT)",
}  # fmt: skip
RELEASE = f'''
import pyarrow as pa
from catalog.release import Builtin, Release

POINT = pa.struct([pa.field("x", pa.int64(), nullable=False), pa.field("label", pa.string())])
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False)]
    + [{", ".join(f"pa.field({name!r}, {kind})" for name, kind in FIELDS.items())}]
)
RELEASE = Release("0.1.0", [Builtin("mz_catalog", "mz_values", "table", "s1", SCHEMA)])
'''
APPEND = f"/append?collection={NAME}"


@pytest.fixture
def leader(launch: Launch, tmp_path: Path) -> SidecarProcess:
    path = tmp_path / "values.py"
    path.write_text(RELEASE)
    process: SidecarProcess = launch("0.1.0", 1, "values", release=str(path), auto_promote=True)
    process.wait_state("serving")
    return process


def schema_of(leader: SidecarProcess) -> pa.Schema:
    namespace: dict[str, Any] = {}
    exec(compile(RELEASE, "values.py", "exec"), namespace)  # the release the sidecar runs
    return namespace["SCHEMA"]


def read_lines(leader: SidecarProcess) -> list[bytes]:
    answer = leader.sidecar.request("GET", f"/read?collection={NAME}", timeout=30)
    assert answer.status == 200, answer.summary()
    return sorted(answer.body.splitlines())  # a snapshot's order is no promise


def read_arrow(leader: SidecarProcess) -> pa.Table:
    answer = leader.sidecar.request(
        "GET", f"/read?collection={NAME}", headers={"Accept": ARROW_STREAM_TYPE}, timeout=30
    )
    assert answer.status == 200, answer.summary()
    return pa.ipc.open_stream(answer.body).read_all().drop_columns(["_ts", "_diff"])


class Raw(str):
    """A JSON fragment sent as is (numbers exactly as written)."""


def fragment(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {fragment(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(fragment(v) for v in value) + "]"
    return json.dumps(value)


NUMBERS = ["0", "-1", "255", "4294967296", "18446744073709551616", "-9223372036854775809",
           "1.5", "2.0", "-2.7", "1e400", "3.5e38", "12.34", "1e2", "-0.0", "NaN", "Infinity"]
TEXTS = ["", "é", "NaN", "-Infinity", "2026-01-02T03:04:05Z", "0001-01-01T00:00:00",
         "9999-12-31T23:00:00+00:00", "2026-02-30", "2026-02-03", "AAE=", "12.345", "%%"]


def scalar(rng: random.Random) -> Any:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return Raw(rng.choice(NUMBERS))
    if kind == 2:
        return Raw(str(rng.randint(-(2**65), 2**65)))
    return rng.choice(TEXTS)


def value(rng: random.Random) -> Any:
    kind = rng.randrange(5)
    if kind == 0:
        return [scalar(rng) for _ in range(rng.randrange(3))]
    if kind == 1:
        return {k: scalar(rng) for k in rng.sample(["x", "label", "y"], rng.randrange(3))}
    if kind == 2:
        return [{"x": scalar(rng)}]
    return scalar(rng)


#: Rows of the property: seeded, so a failure replays; TEST_VALUE_ROWS for more.
ROWS = int(os.environ.get("TEST_VALUE_ROWS", "80"))


def test_an_append_stores_exactly_what_was_sent_or_nothing(leader: SidecarProcess) -> None:
    """The sidecar's answer is the strict rule's, for random rows of every type (nested ones
    included), at the types' bounds and beyond: a row it takes reads back, in JSON lines and
    in Arrow, as the rule made it; a row it refuses is refused with the rule's path and rule,
    and the collection is unchanged."""
    schema = schema_of(leader)
    rng = random.Random(52)
    for _ in range(ROWS):
        row = {k: value(rng) for k in rng.sample(sorted(FIELDS), rng.randint(1, 4))}
        check_one(leader, schema, row)
    # Both answers must have been exercised, or the property proved little.
    lines = read_lines(leader)
    assert 0 < len(lines) < ROWS


def check_one(leader: SidecarProcess, schema: pa.Schema, row: dict[str, Any]) -> None:
    before = read_lines(leader)
    identity = len(before) + 1  # a stored row takes it; a refused one leaves it free
    line = ("{" + f'"id": {identity}' + "".join(
        f", {json.dumps(k)}: {fragment(v)}" for k, v in row.items()) + "}\n").encode()  # fmt: skip
    try:
        expected: pa.Table | BadInputError = rows_to_table(line, schema)
    except BadInputError as exc:
        expected = exc
    answer = leader.sidecar.request("POST", APPEND, line, timeout=30)
    if isinstance(expected, BadInputError):
        body = json.loads(answer.body)
        assert answer.status == 400, (line, answer.summary())
        assert (body.get("field"), body.get("rule")) == (
            expected.details.get("field"), expected.details.get("rule")
        ), body
        assert read_lines(leader) == before, (line, body)
        return
    assert answer.status == 200, (line, answer.summary())
    stored = [
        {k: v for k, v in json.loads(x).items() if k not in ("_ts", "_diff")}
        for x in read_lines(leader)
        if json.loads(x)["id"] == identity
    ]
    assert stored == [json.loads(b"".join(json_lines(expected)))], line
    arrow = read_arrow(leader)
    mine = arrow.filter(pc.equal(arrow.column("id"), identity))
    assert b"".join(json_lines(mine)) == b"".join(json_lines(expected)), line


def test_no_group_member_fails_for_another_clients_rows(leader: SidecarProcess) -> None:
    """Clients append at once, good rows and rows of every refusal class, in JSON lines and
    in Arrow (one leaving out a nullable struct, which is allowed): each bad append alone is
    refused (400), every good one stored, once."""
    schema = schema_of(leader)
    bad = [
        b'{"id": 900, "pt": {"label": "a"}}\n',  # a required sub-field missing
        b'{"id": 901, "pt": {"x": null}}\n',
        b'{"id": 902, "i32": 1.5}\n',
        b'{"id": 903, "f64": NaN}\n',
        b'{"id": 904, "ts": 9223372036854775807}\n',
        b'{"id": 905, "i8": 1, "i8": 2}\n',
        b'{"id": 906, "pts": [{"x": 1}, {"label": "no x"}]}\n',
    ]
    sink = io.BytesIO()
    kept = pa.schema([schema.field("id"), schema.field("s")])  # every other field left out
    with pa.ipc.new_stream(sink, kept) as writer:
        writer.write_table(pa.table({"id": [800], "s": ["arrow"]}, schema=kept))
    twice = sink.getvalue() * 2  # two streams back to back: refused, not one stream's rows
    answers: dict[str, int] = {}

    def send(name: str, body: bytes, arrow: bool = False) -> None:
        headers = {"Content-Type": ARROW_STREAM_TYPE} if arrow else {}
        answers[name] = leader.sidecar.request("POST", APPEND, body, headers=headers).status

    threads = [threading.Thread(target=send, args=(f"bad{i}", body)) for i, body in
               enumerate(bad)]  # fmt: skip
    threads += [threading.Thread(target=send, args=(f"good{i}", f'{{"id": {i}}}\n'.encode()))
                for i in range(12)]  # fmt: skip
    threads.append(threading.Thread(target=send, args=("arrow", sink.getvalue(), True)))
    threads.append(threading.Thread(target=send, args=("twice", twice, True)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {k: v for k, v in answers.items() if k.startswith("bad")} == {
        f"bad{i}": 400 for i in range(len(bad))
    }
    assert answers["twice"] == 400
    assert {k: v for k, v in answers.items() if k.startswith("good")} == {
        f"good{i}": 200 for i in range(12)
    }
    assert answers["arrow"] == 200
    ids = sorted(json.loads(x)["id"] for x in read_lines(leader))
    assert ids == [*range(12), 800]
    pt = read_arrow(leader).filter(pc.equal(pc.field("id"), 800)).column("pt")
    assert pt.to_pylist() == [None]
