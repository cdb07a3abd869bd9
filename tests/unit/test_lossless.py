"""Lossless widening: the rule table, and every value read exactly through a widened history."""

from __future__ import annotations

import decimal
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalog.schema as cs
from catalog.errors import ReaderFencedError, SchemaIncompatibleError
from catalog.schema.lossless import WIDENING_RULES, widening_rule, widens

ALLOWED = [
    (pa.int8(), pa.int16(), "widen-int"),
    (pa.int8(), pa.int64(), "widen-int"),
    (pa.int32(), pa.int64(), "widen-int"),
    (pa.uint8(), pa.uint64(), "widen-uint"),
    (pa.uint8(), pa.int16(), "widen-uint-to-int"),
    (pa.uint16(), pa.int32(), "widen-uint-to-int"),
    (pa.uint32(), pa.int64(), "widen-uint-to-int"),
    (pa.float16(), pa.float64(), "widen-float"),
    (pa.float32(), pa.float64(), "widen-float"),
    (pa.int32(), pa.float64(), "widen-int-to-double"),
    (pa.uint32(), pa.float64(), "widen-int-to-double"),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), "widen-decimal"),
    (pa.decimal128(10, 2), pa.decimal256(40, 2), "widen-decimal"),
    (pa.string(), pa.large_string(), "widen-large"),
    (pa.binary(), pa.large_binary(), "widen-large"),
]

REFUSED = [
    (pa.int64(), pa.int32()),  # narrowing
    (pa.int64(), pa.float64()),  # 2**53 + 1 has no double
    (pa.uint64(), pa.int64()),  # 2**64 - 1 has no int64
    (pa.uint32(), pa.int32()),  # not wider
    (pa.float64(), pa.float32()),
    (pa.int32(), pa.float32()),  # 2**24 + 1 has no float
    (pa.decimal128(10, 2), pa.decimal128(12, 3)),  # scale changed
    (pa.decimal128(12, 2), pa.decimal128(10, 2)),
    (pa.decimal256(40, 2), pa.decimal128(38, 2)),
    (pa.large_string(), pa.string()),
    (pa.string(), pa.binary()),
    (pa.int32(), pa.string()),
    (pa.timestamp("ms"), pa.timestamp("us")),  # not in the table (yet)
]


@pytest.mark.parametrize(("old", "new", "rule"), ALLOWED, ids=lambda v: str(v))
def test_allowed_widenings_name_their_rule(old: pa.DataType, new: pa.DataType, rule: str) -> None:
    assert widening_rule(old, new) == rule and rule in WIDENING_RULES
    assert cs.is_backward_compatible(pa.schema([pa.field("a", old)]), pa.schema([("a", new)]))


@pytest.mark.parametrize(("old", "new"), REFUSED, ids=lambda v: str(v))
def test_every_other_type_change_is_refused_with_type_changed(
    old: pa.DataType, new: pa.DataType
) -> None:
    assert not widens(old, new)
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.check_backward_compatible(pa.schema([("a", old)]), pa.schema([("a", new)]))
    assert (info.value.rule, info.value.path) == ("type-changed", "a")
    assert (info.value.old, info.value.new) == (str(old), str(new))


EXTREMES: dict[pa.DataType, list[object]] = {
    pa.int8(): [-(2**7), 2**7 - 1, 0],
    pa.int16(): [-(2**15), 2**15 - 1],
    pa.int32(): [-(2**31), 2**31 - 1, -1],
    pa.uint8(): [0, 2**8 - 1],
    pa.uint16(): [0, 2**16 - 1],
    pa.uint32(): [0, 2**32 - 1],
    pa.float32(): [0.5, -0.0, math.inf, -math.inf, 3.4028234663852886e38, 1.401298464324817e-45],
    pa.decimal128(10, 2): [decimal.Decimal("-99999999.99"), decimal.Decimal("12345678.90")],
    pa.string(): ["", "é", "x" * 100],
    pa.binary(): [b"", b"\x00\xff"],
}


@pytest.mark.parametrize(("old", "new", "rule"), ALLOWED, ids=lambda v: str(v))
def test_old_values_read_exactly_at_any_depth(
    old: pa.DataType, new: pa.DataType, rule: str
) -> None:
    """A batch written under the narrow type reads every value exactly under the wide one, top
    level, in a struct, as list elements and as map values; nulls stay null."""
    values: list[object] = [*EXTREMES.get(old, [1, 2]), None]
    source = pa.schema([
        pa.field("v", old),
        pa.field("s", pa.struct([pa.field("v", old)])),
        pa.field("l", pa.list_(old)),
        pa.field("m", pa.map_(pa.string(), old)),
    ])  # fmt: skip
    target = pa.schema([
        pa.field("v", new),
        pa.field("s", pa.struct([pa.field("v", new)])),
        pa.field("l", pa.list_(new)),
        pa.field("m", pa.map_(pa.string(), new)),
    ])  # fmt: skip
    rows = [{"v": v, "s": {"v": v}, "l": [v, v], "m": [("k", v)]} for v in values]
    table = pa.Table.from_pylist(rows, schema=source)
    read = cs.migrate_batch(table, source, target, passthrough=())
    assert read.schema == target
    assert read.to_pylist() == pa.Table.from_pylist(rows, schema=target).to_pylist()
    for got, want in zip(read.column("v").to_pylist(), values, strict=True):
        assert (got is None) == (want is None)
        if isinstance(want, float):
            assert math.copysign(1.0, got) == math.copysign(1.0, want) and got == want


def test_a_list_widens_to_a_large_list_and_reads_exactly() -> None:
    """list -> large_list (widen-large) at the top and inside a struct; the reverse refused."""
    source = pa.schema(
        [("l", pa.list_(pa.int32())), ("s", pa.struct([("l", pa.list_(pa.int8()))]))]
    )
    target = pa.schema(
        [("l", pa.large_list(pa.int64())), ("s", pa.struct([("l", pa.large_list(pa.int8()))]))]
    )
    assert cs.is_backward_compatible(source, target)
    assert not cs.is_backward_compatible(target, source)
    rows = [
        {"l": [1, None, 2**31 - 1], "s": {"l": [-128]}},
        {"l": None, "s": None},
        {"l": [], "s": {"l": []}},
    ]
    table = pa.Table.from_pylist(rows, schema=source).slice(1)  # offsets not starting at 0
    read = cs.migrate_batch(table, source, target, passthrough=())
    assert read.schema == target and read.to_pylist() == rows[1:]
    history = cs.evolve(cs.migration_type(source), target)
    with pytest.raises(ReaderFencedError) as info:
        cs.check_reader(history, source)
    assert info.value.rule == "reader-narrower-type"


def test_a_reader_narrower_than_the_stored_type_is_fenced_with_its_rule() -> None:
    history = cs.evolve(
        cs.migration_type(pa.schema([("a", pa.int32())])), pa.schema([("a", pa.int64())])
    )
    cs.check_reader(history, pa.schema([("a", pa.int64())]))
    with pytest.raises(ReaderFencedError) as info:
        cs.check_reader(history, pa.schema([("a", pa.int32())]))
    assert (info.value.rule, info.value.path) == ("reader-narrower-type", "a")


LADDERS = [
    [pa.int8(), pa.int16(), pa.int32(), pa.int64()],
    [pa.uint8(), pa.uint16(), pa.int32(), pa.int64()],
    [pa.int16(), pa.float64()],
    [pa.float16(), pa.float32(), pa.float64()],
]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_chains_of_widenings_read_every_stored_value_exactly(data: st.DataObject) -> None:
    """Batches stored at every step of a random widening chain all read, under the last type,
    as exactly the values written (each step's migration equals the direct one)."""
    ladder = data.draw(st.sampled_from(LADDERS))
    steps = sorted(set(data.draw(st.lists(st.integers(0, len(ladder) - 1), min_size=1))))
    chain = [ladder[i] for i in steps]
    history = cs.migration_type(pa.schema([("v", chain[0])]))
    for dtype in chain[1:]:
        history = cs.evolve(history, pa.schema([("v", dtype)]))
    last = pa.schema([("v", chain[-1])])
    for dtype in chain:
        lo, hi = (-(2 ** (dtype.bit_width - 1)), 2 ** (dtype.bit_width - 1) - 1)
        if pa.types.is_unsigned_integer(dtype):
            lo, hi = 0, 2**dtype.bit_width - 1
        if pa.types.is_floating(dtype):
            values = data.draw(st.lists(st.floats(width=dtype.bit_width), max_size=5))
        else:
            values = data.draw(st.lists(st.integers(lo, hi), max_size=5))
        table = pa.Table.from_pylist([{"v": v} for v in values], schema=pa.schema([("v", dtype)]))
        read = cs.migrate_batch(table, pa.schema([("v", dtype)]), last, passthrough=())
        for got, want in zip(read.column("v").to_pylist(), values, strict=True):
            assert got == want or (math.isnan(got) and math.isnan(want))
