"""Nested keys standing in as their value ids (catalog.consolidate.value_ids.StandIns): the
flat algorithms then give the same rows as hash consolidation, nested values included."""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.consolidate import DIFF, TS, consolidate, consolidate_hashed
from catalog.consolidate import columns as tuning
from catalog.consolidate.value_ids import StandIns
from support.shards import as_bits


def rows(table: pa.Table) -> list[str]:
    """The rows in a canonical order, compared by repr (a nested NaN equals a nested NaN)."""
    return [repr(row) for row in as_bits(table)]


NESTED = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.list_(pa.float64()))])
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("s", NESTED),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field(TS, pa.uint64()),
        pa.field(DIFF, pa.int64()),
    ]
)
ROW = st.fixed_dictionaries(
    {
        "id": st.one_of(st.none(), st.integers(0, 30)),
        "tags": st.one_of(st.none(), st.lists(st.sampled_from(["x", "y", ""]), max_size=2)),
        "s": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "a": st.one_of(st.none(), st.integers(0, 1)),
                    "b": st.one_of(st.none(), st.lists(st.sampled_from([0.0, -0.0, math.nan]))),
                }
            ),
        ),
        "m": st.one_of(
            st.none(), st.lists(st.tuples(st.sampled_from("kl"), st.integers(0, 1)), max_size=2)
        ),
        TS: st.integers(0, 1),
        DIFF: st.sampled_from([1, -1, 2]),
    }
)


@st.composite
def histories(draw: st.DrawFn) -> pa.Table:
    """Rows, some repeated with the opposite, the same or another nested value."""
    rows: list[dict[str, Any]] = draw(st.lists(ROW, max_size=30))
    for index in draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=12)):
        if not rows:
            break
        twin = dict(rows[index])
        kind = draw(st.sampled_from(["retract", "again", "other-tags"]))
        if kind == "retract":
            twin[DIFF] = -twin[DIFF]
        elif kind == "other-tags":
            twin["tags"] = draw(st.sampled_from([None, [], ["z"]]))
        rows.append(twin)
    order = draw(st.permutations(range(len(rows))))
    return pa.Table.from_pylist([rows[i] for i in order], schema=SCHEMA)


@settings(max_examples=300, deadline=None)
@given(table=histories())
def test_stand_ins_consolidate_as_hashing_does(table: pa.Table) -> None:
    """Whichever flat path the stand-ins take: the same rows and diffs as hash consolidation,
    bitwise, in the input's schema."""
    expected = rows(consolidate_hashed(table))
    with mock.patch.object(tuning, "RUNS_MIN_ROWS", 0):
        out = consolidate(table)
    assert out.schema == table.schema
    assert rows(out) == expected


def test_a_large_table_with_a_list_column_takes_the_stand_in_path() -> None:
    """10,000 unique rows and a retracted pair, with a list key: the stand-ins give each id
    back its own value, and the pair cancels."""
    count = 10_000
    table = pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "tags": [[str(n % 7)] if n % 3 else None for n in range(count)],
            "s": [{"a": n % 2, "b": [float(n)]} for n in range(count)],
            "m": [[("k", n)] for n in range(count)],
            TS: pa.array([0] * count, pa.uint64()),
            DIFF: pa.array([1] * count, pa.int64()),
        },
        schema=SCHEMA,
    )
    retraction = table.slice(5, 1).set_column(5, SCHEMA.field(DIFF), pa.array([-1], pa.int64()))
    history = pa.concat_tables([table, retraction])
    with mock.patch.object(StandIns, "of", wraps=StandIns.of) as stood_in:
        out = consolidate(history)
    assert stood_in.call_count == 1
    assert out.num_rows == count - 1
    assert rows(out) == rows(consolidate_hashed(history))
