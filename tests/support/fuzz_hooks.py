"""Schemathesis hooks (``SCHEMATHESIS_HOOKS=support.fuzz_hooks``): bodies for the two append
types it cannot make from the description, and collections that exist.

- ``application/x-ndjson``: JSON lines of rows that fit ``mz_catalog.mz_tables``, rows of any
  other shape, and raw bytes;
- ``application/vnd.apache.arrow.stream``: Arrow streams of such rows (whole, or cut short), and
  raw bytes;
- a query's ``collection``: half the time a collection of the release (else the fuzzer's own
  string, which the sidecar refuses as unknown).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import schemathesis
from hypothesis import strategies as st

from catalog.release import load_release

RELEASE = load_release(Path(__file__).resolve().parents[2] / "scenarios/releases/v0_10_0.py")
COLLECTIONS = sorted(b.name for b in RELEASE.builtins)
TABLES = RELEASE.builtin("mz_catalog.mz_tables")
assert TABLES is not None
SCHEMA = TABLES.schema

_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=16),
    st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
)  # fmt: skip
_FITTING = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=12),
        "oid": st.integers(0, 2**31 - 1),
        "schema_id": st.sampled_from(["u1", "u3"]),
        "name": st.text(max_size=12),
        "owner_id": st.just("u1"),
    }
)
_ANY_SHAPE = st.dictionaries(st.sampled_from(["id", "oid", "name", "x", ""]), _VALUE, max_size=4)
_ROWS = st.lists(st.one_of(_FITTING, _ANY_SHAPE), max_size=4)


def _json_lines(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _arrow(rows: list[dict[str, Any]], cut: int) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
    data = sink.getvalue()
    return data[: len(data) - cut] if cut else data


schemathesis.openapi.media_type(
    "application/x-ndjson", st.one_of(_ROWS.map(_json_lines), st.binary(max_size=64))
)
schemathesis.openapi.media_type(
    "application/vnd.apache.arrow.stream",
    st.one_of(
        st.builds(_arrow, st.lists(_FITTING, max_size=4), st.sampled_from([0, 0, 0, 5, 40])),
        st.binary(max_size=64),
    ),
)


@schemathesis.hook
def flatmap_query(ctx: Any, query: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    if not query or "collection" not in query:
        return st.just(query)
    return st.one_of(
        st.just(query), st.sampled_from(COLLECTIONS).map(lambda c: {**query, "collection": c})
    )
