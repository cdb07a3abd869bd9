"""Unit tests of catalog.schema: evolution rules, migration types, data migration, fencing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from catalog import schema as cs
from catalog.errors import (
    EXIT_REFUSED,
    BadInputError,
    ReaderFencedError,
    SchemaIncompatibleError,
)
from catalog.schema.walk import as_data_type as as_type

# --- builders ---------------------------------------------------------------------------------


def f(name: str, dtype: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, dtype, nullable=nullable)


def nn(name: str, dtype: pa.DataType) -> pa.Field:
    return pa.field(name, dtype, nullable=False)


def tomb(field: pa.Field) -> pa.Field:
    return pa.field(field.name, field.type, True, {cs.TOMBSTONE_KEY: b"true"})


def st(*fields: pa.Field) -> pa.DataType:
    return pa.struct(list(fields))


def sch(*fields: pa.Field) -> pa.Schema:
    return pa.schema(list(fields))


I32, I64, STR = pa.int32(), pa.int64(), pa.string()
XY = st(f("x", I32), f("y", STR))
XY_NN = st(nn("x", I32), f("y", STR))
XYZ = st(f("x", I32), f("y", STR), f("z", STR))
ZXY = st(f("z", STR), f("x", I32), f("y", STR))


def lst(element: pa.DataType | pa.Field) -> pa.DataType:
    return pa.list_(element)


def llst(element: pa.DataType | pa.Field) -> pa.DataType:
    return pa.large_list(element)


def mp(key: pa.DataType, value: pa.DataType | pa.Field, keys_sorted: bool = False) -> pa.DataType:
    return pa.map_(key, value, keys_sorted=keys_sorted)


# --- the rule table ---------------------------------------------------------------------------

OK = None
CASES: list[Any] = [
    # top level
    pytest.param(sch(f("a", I32)), sch(f("a", I32)), OK, "", id="identical"),
    pytest.param(sch(nn("a", I32)), sch(f("a", I32)), OK, "", id="relax"),
    pytest.param(
        sch(f("a", I32), f("b", STR), f("c", I64)),
        sch(f("a", I32), f("c", I64)),
        OK,
        "",
        id="delete-middle",
    ),
    pytest.param(sch(f("a", I32), f("b", STR)), sch(f("a", I32)), OK, "", id="delete-last"),
    pytest.param(sch(f("a", I32)), sch(f("a", I32), f("b", STR)), OK, "", id="add-nullable-end"),
    pytest.param(
        sch(f("a", I32), f("b", STR)), sch(f("a", I32), f("c", STR)), OK, "", id="delete-and-add"
    ),
    pytest.param(sch(f("a", I32)), sch(f("a", I64)), OK, "", id="int-widening"),
    pytest.param(sch(f("a", I64)), sch(f("a", I32)), "type-changed", "a", id="int-narrowing"),
    pytest.param(
        sch(f("a", I64)),
        sch(f("a", pa.float64())),
        "type-changed",
        "a",
        id="int64-to-double-loses-precision",
    ),
    pytest.param(
        sch(f("a", pa.uint64())), sch(f("a", I64)), "type-changed", "a", id="uint64-to-int64"
    ),
    pytest.param(
        sch(f("a", STR)), sch(f("a", pa.large_string())), OK, "", id="string-to-large-string"
    ),
    pytest.param(
        sch(f("t", pa.timestamp("us", "UTC"))),
        sch(f("t", pa.timestamp("us", "+01:00"))),
        "type-changed",
        "t",
        id="timezone",
    ),
    pytest.param(
        sch(f("d", pa.decimal128(10, 2))),
        sch(f("d", pa.decimal128(12, 2))),
        OK,
        "",
        id="decimal-precision",
    ),
    pytest.param(
        sch(f("d", pa.decimal128(10, 2))),
        sch(f("d", pa.decimal128(12, 3))),
        "type-changed",
        "d",
        id="decimal-scale",
    ),
    pytest.param(sch(f("a", I32)), sch(f("a", XY)), "type-changed", "a", id="int-to-struct"),
    pytest.param(sch(f("a", I32)), sch(nn("a", I32)), "nullability-tightened", "a", id="tighten"),
    pytest.param(
        sch(f("a", I32), f("b", STR)),
        sch(f("b", STR), f("a", I32)),
        "field-reordered",
        "a",
        id="reorder",
    ),
    pytest.param(
        sch(f("a", I32)),
        sch(f("a", I32), nn("b", STR)),
        "field-added-not-nullable",
        "b",
        id="add-non-null",
    ),
    pytest.param(
        sch(f("a", I32)),
        sch(f("b", STR), f("a", I32)),
        "field-added-not-at-end",
        "b",
        id="add-front",
    ),
    pytest.param(
        sch(f("a", I32), f("c", I32)),
        sch(f("a", I32), f("b", STR), f("c", I32)),
        "field-added-not-at-end",
        "b",
        id="add-middle",
    ),
    pytest.param(
        sch(f("a", I32), tomb(f("b", STR))),
        sch(f("a", I32), f("b", STR)),
        "field-readded",
        "b",
        id="readd",
    ),
    pytest.param(
        sch(f("a", I32)),
        sch(f("a", I32), f("b", STR), f("b", I32)),
        "field-name-duplicated",
        "b",
        id="duplicate",
    ),
    # struct
    pytest.param(sch(f("s", XY_NN)), sch(f("s", XY)), OK, "", id="struct-relax"),
    pytest.param(sch(f("s", XY)), sch(f("s", st(f("x", I32)))), OK, "", id="struct-delete"),
    pytest.param(
        sch(f("s", XY)),
        sch(f("s", st(f("x", I32), f("y", STR), f("z", I64)))),
        OK,
        "",
        id="struct-add-end",
    ),
    pytest.param(
        sch(nn("s", XY_NN)),
        sch(f("s", st(f("x", I32), f("z", STR)))),
        OK,
        "",
        id="struct-relax-parent-delete-add",
    ),
    pytest.param(
        sch(f("s", XY)), sch(f("s", st(f("x", I64), f("y", STR)))), OK, "", id="struct-widening"
    ),
    pytest.param(
        sch(f("s", XY)),
        sch(f("s", st(f("x", pa.int16()), f("y", STR)))),
        "type-changed",
        "s.x",
        id="struct-type",
    ),
    pytest.param(
        sch(f("s", XY)), sch(f("s", XY_NN)), "nullability-tightened", "s.x", id="struct-tighten"
    ),
    pytest.param(sch(nn("s", XY)), sch(f("s", XY)), OK, "", id="struct-parent-relax"),
    pytest.param(
        sch(f("s", XY)), sch(nn("s", XY)), "nullability-tightened", "s", id="struct-parent-tighten"
    ),
    pytest.param(
        sch(f("s", XY)),
        sch(f("s", st(f("y", STR), f("x", I32)))),
        "field-reordered",
        "s.x",
        id="struct-reorder",
    ),
    pytest.param(
        sch(f("s", XY)),
        sch(f("s", st(f("x", I32), f("y", STR), nn("z", I64)))),
        "field-added-not-nullable",
        "s.z",
        id="struct-add-non-null",
    ),
    pytest.param(
        sch(f("s", XY)),
        sch(f("s", st(f("z", I64), f("x", I32), f("y", STR)))),
        "field-added-not-at-end",
        "s.z",
        id="struct-add-front",
    ),
    pytest.param(
        sch(f("s", st(f("x", I32), tomb(f("y", STR))))),
        sch(f("s", XY)),
        "field-readded",
        "s.y",
        id="struct-readd",
    ),
    pytest.param(
        sch(f("s", st(f("t", st(f("u", I32)))))),
        sch(f("s", st(f("t", st(f("u", STR)))))),
        "type-changed",
        "s.t.u",
        id="struct-2-deep-type",
    ),
    pytest.param(sch(f("s", XY)), sch(f("s", lst(I32))), "type-changed", "s", id="struct-to-list"),
    # list
    pytest.param(
        sch(f("l", lst(nn("item", I32)))), sch(f("l", lst(I32))), OK, "", id="list-element-relax"
    ),
    pytest.param(
        sch(f("l", lst(I32))),
        sch(f("l", lst(nn("item", I32)))),
        "nullability-tightened",
        "l.items",
        id="list-element-tighten",
    ),
    pytest.param(sch(f("l", lst(I32))), sch(f("l", lst(I64))), OK, "", id="list-element-widening"),
    pytest.param(
        sch(f("l", lst(I32))),
        sch(f("l", lst(STR))),
        "type-changed",
        "l.items",
        id="list-element-type",
    ),
    pytest.param(
        sch(f("l", lst(XY))),
        sch(f("l", lst(st(f("x", I32), f("y", STR), f("z", I64))))),
        OK,
        "",
        id="list-struct-add",
    ),
    pytest.param(
        sch(f("l", lst(XY))), sch(f("l", lst(st(f("y", STR))))), OK, "", id="list-struct-delete"
    ),
    pytest.param(
        sch(f("l", lst(XY))),
        sch(f("l", lst(st(f("x", I32), f("y", STR), nn("z", I64))))),
        "field-added-not-nullable",
        "l.items.z",
        id="list-struct-add-non-null",
    ),
    pytest.param(
        sch(f("l", lst(XY))),
        sch(f("l", lst(st(f("y", STR), f("x", I32))))),
        "field-reordered",
        "l.items.x",
        id="list-struct-reorder",
    ),
    pytest.param(
        sch(f("l", lst(XY))),
        sch(f("l", lst(st(f("x", STR), f("y", STR))))),
        "type-changed",
        "l.items.x",
        id="list-struct-type",
    ),
    pytest.param(
        sch(f("l", lst(st(f("x", I32), tomb(f("y", STR)))))),
        sch(f("l", lst(XY))),
        "field-readded",
        "l.items.y",
        id="list-struct-readd",
    ),
    pytest.param(sch(f("l", lst(I32))), sch(f("l", llst(I32))), OK, "", id="list-to-large-list"),
    pytest.param(
        sch(f("l", lst(I32), nullable=False)), sch(f("l", lst(I32))), OK, "", id="list-relax"
    ),
    # large_list
    pytest.param(sch(f("l", llst(XY))), sch(f("l", llst(XYZ))), OK, "", id="large-list-struct-add"),
    pytest.param(
        sch(f("l", llst(XY))),
        sch(f("l", llst(XY_NN))),
        "nullability-tightened",
        "l.items.x",
        id="large-list-struct-tighten",
    ),
    pytest.param(
        sch(f("l", llst(XY))),
        sch(f("l", llst(ZXY))),
        "field-added-not-at-end",
        "l.items.z",
        id="large-list-struct-add-front",
    ),
    pytest.param(
        sch(f("l", llst(I32))), sch(f("l", lst(I32))), "type-changed", "l", id="large-list-to-list"
    ),
    pytest.param(
        sch(f("l", llst(I32))),
        sch(f("l", llst(STR))),
        "type-changed",
        "l.items",
        id="large-list-element-type",
    ),
    # map
    pytest.param(
        sch(f("m", mp(STR, XY))),
        sch(f("m", mp(STR, st(f("x", I32), f("y", STR), f("z", I32))))),
        OK,
        "",
        id="map-value-struct-add",
    ),
    pytest.param(
        sch(f("m", mp(STR, XY))),
        sch(f("m", mp(STR, st(f("x", I32))))),
        OK,
        "",
        id="map-value-struct-delete",
    ),
    pytest.param(
        sch(f("m", mp(STR, nn("value", I32)))),
        sch(f("m", mp(STR, I32))),
        OK,
        "",
        id="map-value-relax",
    ),
    pytest.param(
        sch(f("m", mp(STR, I32))),
        sch(f("m", mp(STR, nn("value", I32)))),
        "nullability-tightened",
        "m.value",
        id="map-value-tighten",
    ),
    pytest.param(
        sch(f("m", mp(STR, I32))),
        sch(f("m", mp(STR, STR))),
        "type-changed",
        "m.value",
        id="map-value-type",
    ),
    pytest.param(
        sch(f("m", mp(STR, XY))),
        sch(f("m", mp(STR, st(f("y", STR), f("x", I32))))),
        "field-reordered",
        "m.value.x",
        id="map-value-struct-reorder",
    ),
    pytest.param(
        sch(f("m", mp(STR, XY))),
        sch(f("m", mp(STR, st(f("x", I32), f("y", STR), nn("z", I32))))),
        "field-added-not-nullable",
        "m.value.z",
        id="map-value-struct-add-non-null",
    ),
    pytest.param(
        sch(f("m", mp(STR, st(f("x", I32), tomb(f("y", STR)))))),
        sch(f("m", mp(STR, XY))),
        "field-readded",
        "m.value.y",
        id="map-value-struct-readd",
    ),
    pytest.param(
        sch(f("m", mp(STR, I32))),
        sch(f("m", mp(I64, I32))),
        "map-key-changed",
        "m.key",
        id="map-key-type",
    ),
    pytest.param(
        sch(f("m", mp(STR, I32))),
        sch(f("m", mp(STR, I32, keys_sorted=True))),
        "map-key-changed",
        "m.key",
        id="map-keys-sorted",
    ),
    pytest.param(
        sch(f("m", mp(STR, I32))), sch(f("m", lst(I32))), "type-changed", "m", id="map-to-list"
    ),
    # deep nesting and bare DataTypes
    pytest.param(
        sch(f("l", lst(mp(STR, lst(st(f("a", I32))))))),
        sch(f("l", lst(mp(STR, lst(st(f("a", I32), nn("b", I32))))))),
        "field-added-not-nullable",
        "l.items.value.items.b",
        id="deep-add-non-null",
    ),
    pytest.param(I64, I32, "type-changed", "", id="datatype-root"),
    pytest.param(XY, st(f("x", I32), f("y", STR), f("z", STR)), OK, "", id="datatype-struct-add"),
    pytest.param(lst(XY), lst(st(f("x", I32))), OK, "", id="datatype-list-delete"),
    pytest.param(XY, st(f("y", STR)), OK, "", id="datatype-struct-delete-first"),
    pytest.param(
        lst(XY), lst(XY_NN), "nullability-tightened", "items.x", id="datatype-list-tighten"
    ),
]


@pytest.mark.parametrize(("old", "new", "rule", "path"), CASES)
def test_rule_table(old: Any, new: Any, rule: str | None, path: str) -> None:
    """Each evolution is accepted or refused with the documented rule id and dotted path."""
    assert cs.is_backward_compatible(old, new) is (rule is None)
    if rule is None:
        cs.check_backward_compatible(old, new)
        return
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.check_backward_compatible(old, new)
    assert (info.value.rule, info.value.path) == (rule, path)
    assert info.value.suggestion
    assert info.value.exit_code == EXIT_REFUSED
    assert info.value.to_json()["rule"] == rule


def test_rule_table_is_large_enough() -> None:
    """The rule table keeps at least 40 cases and exercises every rule id."""
    assert len(CASES) >= 40
    rules = {case.values[2] for case in CASES}
    assert {
        "type-changed",
        "nullability-tightened",
        "field-reordered",
        "field-added-not-nullable",
        "field-added-not-at-end",
        "field-readded",
        "map-key-changed",
    } <= rules


def test_refusal_names_old_and_new_types() -> None:
    """A type change refusal carries both types and a suggestion naming the other mechanisms."""
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.check_backward_compatible(sch(f("s", XY)), sch(f("s", st(f("x", STR), f("y", STR)))))
    assert (info.value.old, info.value.new) == ("int32", "string")
    assert "REPLACEMENT" in (info.value.suggestion or "")
    assert "s.x" in str(info.value)


def test_list_element_names_are_not_significant() -> None:
    """Renaming a list element field (Parquet writes 'element') is not a refusal."""
    assert cs.is_backward_compatible(sch(f("l", lst(I32))), sch(f("l", lst(f("element", I32)))))


# --- migration types and evolve ---------------------------------------------------------------

V0 = sch(
    nn("id", I64),
    f("s", st(f("t", st(f("u", I32), f("v", STR))), f("w", STR))),
    f("l", lst(XY)),
)


def test_migration_type_of_first_schema_is_the_schema() -> None:
    """The first migration type is the schema itself, with no tombstones."""
    assert cs.migration_type(V0).equals(V0, check_metadata=True)


def test_migration_type_refuses_tombstones_and_duplicates() -> None:
    """A first schema with tombstone metadata or duplicate names is refused."""
    with pytest.raises(BadInputError):
        cs.migration_type(sch(f("a", I32), tomb(f("b", I32))))
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migration_type(sch(f("s", st(f("a", I32), f("a", STR)))))
    assert (info.value.rule, info.value.path) == ("field-name-duplicated", "s.a")


def test_evolve_keeps_tombstones_in_place_and_appends_new_fields() -> None:
    """Deleted fields stay as nullable tombstones where they were; added fields come after them."""
    v1 = sch(f("id", I64), f("s", st(f("t", st(f("u", I32))), f("w", STR))), f("l", lst(XY)))
    v2 = sch(f("id", I64), f("s", st(f("t", st(f("u", I32), f("n", I64))))), f("l", lst(XY)))
    m1 = cs.evolve(cs.migration_type(V0), v1)
    m2 = cs.evolve(m1, v2)
    t = m2.field("s").type.field("t").type
    assert [x.name for x in t] == ["u", "v", "n"]
    assert cs.is_tombstone(t.field("v")) and t.field("v").nullable
    s = m2.field("s").type
    assert [x.name for x in s] == ["t", "w"]
    assert cs.is_tombstone(s.field("w"))
    assert not cs.is_tombstone(m2.field("id"))
    assert cs.live_schema(m2) == v2


def test_evolve_refuses_readding_a_name_deleted_two_levels_deep() -> None:
    """Re-adding s.t.v after deleting it is refused with its path, even two schemas later."""
    v1 = sch(f("id", I64), f("s", st(f("t", st(f("u", I32))), f("w", STR))), f("l", lst(XY)))
    v2 = sch(f("id", I64), f("s", st(f("t", st(f("u", I32))), f("w", STR), f("z", I32))))
    v3 = sch(f("id", I64), f("s", st(f("t", st(f("u", I32), f("v", STR))), f("w", STR))))
    history = cs.evolve(cs.evolve(cs.migration_type(V0), v1), v2)
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.evolve(history, v3)
    assert (info.value.rule, info.value.path) == ("field-readded", "s.t.v")
    # The latest live schema alone would accept it; the tombstone is what refuses it.
    assert cs.is_backward_compatible(v2, sch(*v2, f("l", I32)))
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.evolve(history, sch(*v2, f("l", lst(XY))))
    assert (info.value.rule, info.value.path) == ("field-readded", "l")


def test_evolve_refuses_readding_a_deleted_list_element_field() -> None:
    """A name deleted inside a list element struct stays reserved there."""
    m1 = cs.evolve(cs.migration_type(V0), sch(*list(V0)[:2], f("l", lst(st(f("x", I32))))))
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.evolve(m1, sch(*list(V0)[:2], f("l", lst(st(f("x", I32), f("y", I64))))))
    assert (info.value.rule, info.value.path) == ("field-readded", "l.items.y")


def test_evolve_to_the_same_live_schema_returns_history() -> None:
    """Registering the current schema again is a no-op that returns the very same history."""
    m1 = cs.evolve(cs.migration_type(V0), sch(f("id", I64), f("l", lst(XY))))
    assert cs.evolve(m1, cs.live_schema(m1)) is m1


def test_evolve_refuses_incompatible_schema_with_path() -> None:
    """evolve reports the rule and path of the first offending field."""
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.evolve(cs.migration_type(V0), sch(nn("id", I64), f("s", STR), f("l", lst(XY))))
    assert (info.value.rule, info.value.path) == ("type-changed", "s")


def test_evolve_refuses_a_new_schema_carrying_tombstones() -> None:
    """A migration type passed where a live schema belongs is bad input, not silently merged."""
    with pytest.raises(BadInputError):
        cs.evolve(cs.migration_type(V0), sch(*V0, tomb(f("gone", I32))))


def test_deleting_a_non_null_field_leaves_a_nullable_tombstone() -> None:
    """A tombstone is nullable even when the deleted field was not."""
    m1 = cs.evolve(cs.migration_type(V0), sch(*list(V0)[1:]))
    assert cs.is_tombstone(m1.field("id")) and m1.field("id").nullable


def test_live_schema_strips_nested_tombstones_and_keeps_metadata() -> None:
    """live_schema removes tombstones at every depth and keeps other field and schema metadata."""
    mtype = pa.schema(
        [
            pa.field("a", I32, metadata={b"doc": b"kept"}),
            f("m", mp(STR, st(f("x", I32), tomb(f("y", STR))))),
            tomb(f("b", I32)),
        ],
        metadata={b"owner": b"catalog"},
    )
    live = cs.live_schema(mtype)
    assert live == sch(f("a", I32), f("m", mp(STR, st(f("x", I32)))))
    assert live.field("a").metadata == {b"doc": b"kept"}
    assert live.metadata == {b"owner": b"catalog"}


def test_checking_against_history_equals_evolve() -> None:
    """check_backward_compatible on a migration type applies the tombstones like evolve."""
    m1 = cs.evolve(cs.migration_type(sch(f("a", I32), f("b", I32))), sch(f("a", I32)))
    assert not cs.is_backward_compatible(m1, sch(f("a", I32), f("b", I32)))
    assert cs.is_backward_compatible(m1, sch(f("a", I32), f("c", I32)))


# --- data migration ---------------------------------------------------------------------------


def migrated(data: Any, old: Any, new: Any, **kw: Any) -> Any:
    out = cs.migrate(data, old, new, **kw)
    if isinstance(out, (pa.Array, pa.ChunkedArray)):
        out.validate(full=True)
        assert out.type == as_type(new)
    else:
        out.validate(full=True)
    return out


def test_migrate_struct_array_with_null_parents() -> None:
    """Struct arrays get nulls for added fields, lose deleted ones, keep parent nulls."""
    old = st(nn("x", I32), f("y", STR))
    new = st(f("x", I32), f("z", I64))
    data = pa.array([{"x": 1, "y": "a"}, None, {"x": 3, "y": None}], old)
    out = migrated(data, old, new)
    assert out.to_pylist() == [{"x": 1, "z": None}, None, {"x": 3, "z": None}]
    assert out.type.field("x").nullable


def test_migrate_sliced_struct_array() -> None:
    """A slice of a struct array migrates exactly its rows, nulls included."""
    old, new = XY, st(f("x", I32), f("z", STR))
    data = pa.array([{"x": 1, "y": "a"}, None, {"x": 3, "y": "c"}, {"x": 4, "y": "d"}], old)
    out = migrated(data.slice(1, 2), old, new)
    assert out.to_pylist() == [None, {"x": 3, "z": None}]


def test_migrate_sliced_list_of_structs_with_null_lists() -> None:
    """List offsets of a slice are rebased; null lists and null struct elements survive."""
    old = lst(XY)
    new = lst(st(f("y", STR), f("z", I32)))
    rows = [[{"x": 1, "y": "a"}], None, [{"x": 2, "y": "b"}, None], [], [{"x": 5, "y": "e"}]]
    data = pa.array(rows, old)
    out = migrated(data.slice(1, 3), old, new)
    assert out.to_pylist() == [None, [{"y": "b", "z": None}, None], []]
    assert len(out.values) == 2  # only the slice's elements were migrated


def test_migrate_slice_starting_at_offset_zero_with_null_lists() -> None:
    """A slice whose first offset is 0 but whose offsets are sliced still migrates (and maps)."""
    rows = [None, None, [{"x": 1, "y": "a"}]]
    out = migrated(pa.array(rows, lst(XY)).slice(1), lst(XY), lst(st(f("x", I32))))
    assert out.to_pylist() == [None, [{"x": 1}]]
    map_rows = [None, None, [("k", {"x": 1, "y": "a"})]]
    out = migrated(pa.array(map_rows, mp(STR, XY)).slice(1), mp(STR, XY), mp(STR, st(f("y", STR))))
    assert out.to_pylist() == [None, [("k", {"y": "a"})]]


def test_migrate_large_list_and_relaxed_element() -> None:
    """large_list elements migrate too, and a non-null element becomes nullable."""
    old = llst(pa.field("item", st(nn("x", I32)), nullable=False))
    new = llst(st(f("x", I32), f("y", STR)))
    data = pa.array([[{"x": 1}], None, [{"x": 2}, {"x": 3}]], old)
    out = migrated(data.slice(1), old, new)
    assert out.to_pylist() == [None, [{"x": 2, "y": None}, {"x": 3, "y": None}]]
    assert out.type.value_field.nullable


def test_migrate_map_of_structs_sliced_with_null_maps() -> None:
    """Map values of struct type migrate; keys, null maps and slicing are preserved."""
    old = mp(STR, XY)
    new = mp(STR, st(f("x", I32), f("z", I64)))
    rows = [[("a", {"x": 1, "y": "p"})], None, [("b", {"x": 2, "y": "q"}), ("c", None)]]
    data = pa.array(rows, old)
    out = migrated(data.slice(1), old, new)
    assert out.to_pylist() == [None, [("b", {"x": 2, "z": None}), ("c", None)]]


def test_migrate_chunked_array() -> None:
    """Chunked arrays migrate chunk by chunk, empty chunks included."""
    old, new = XY, st(f("y", STR))
    data = pa.chunked_array([pa.array([{"x": 1, "y": "a"}], old), pa.array([], old)], type=old)
    out = migrated(data, old, new)
    assert out.num_chunks == 2 and out.to_pylist() == [{"y": "a"}]


def test_migrate_record_batch_and_table_have_exactly_the_target_schema() -> None:
    """Batches and tables come out with the target schema (nullability included) and all rows."""
    old = sch(nn("id", I64), f("s", XY), f("gone", STR))
    new = sch(f("id", I64), f("s", st(f("x", I32), f("z", STR))), f("added", lst(XY)))
    batch = pa.record_batch(
        [
            pa.array([1, 2]),
            pa.array([{"x": 1, "y": "a"}, None], XY),
            pa.array(["p", "q"]),
        ],
        schema=old,
    )
    out = migrated(batch, old, new)
    assert isinstance(out, pa.RecordBatch) and out.schema == new
    assert out.to_pylist() == [
        {"id": 1, "s": {"x": 1, "z": None}, "added": None},
        {"id": 2, "s": None, "added": None},
    ]
    table = pa.Table.from_batches([batch, batch.slice(1)])
    out_table = migrated(table, old, new)
    assert isinstance(out_table, pa.Table) and out_table.schema == new
    assert out_table.num_rows == 3


def test_migrate_passes_ts_and_diff_through() -> None:
    """migrate_batch carries _ts and _diff after the collection columns, unchanged."""
    old, new = sch(f("a", I32), f("b", STR)), sch(f("a", I32), f("c", STR))
    batch = pa.record_batch(
        [pa.array([1], I32), pa.array(["x"]), pa.array([7], pa.uint64()), pa.array([1], I64)],
        names=["a", "b", "_ts", "_diff"],
    )
    out = cs.migrate_batch(batch, old, new)
    assert out.schema == sch(*new, f("_ts", pa.uint64()), f("_diff", I64))
    assert out.to_pylist() == [{"a": 1, "c": None, "_ts": 7, "_diff": 1}]


def test_migrate_refuses_columns_outside_the_schema() -> None:
    """A column that is neither in the schema nor passed through is refused, not dropped."""
    batch = pa.record_batch([pa.array([1]), pa.array([7], pa.uint64())], names=["a", "_ts"])
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migrate(batch, sch(f("a", I64)), sch(f("a", I64)))
    assert (info.value.rule, info.value.path) == ("data-mismatch", "_ts")
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migrate_batch(
            pa.record_batch([pa.array([1])], names=["a"]), sch(f("a", I64)), sch(f("a", I64))
        )
    assert (info.value.rule, info.value.path) == ("data-mismatch", "_ts")


def test_migrate_refuses_incompatible_types_and_mismatched_data() -> None:
    """Migration needs a compatible target and data of the declared source type."""
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migrate(pa.array([1], I64), I64, I32)
    assert info.value.rule == "type-changed"
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migrate(
            pa.array([{"x": 1}], st(f("x", I64))), st(f("x", I32)), st(f("x", I32), f("y", I32))
        )
    assert (info.value.rule, info.value.path) == ("data-mismatch", "x")


def test_migrate_identity_returns_the_data() -> None:
    """Migrating to the same type does no work."""
    data = pa.array([{"x": 1, "y": "a"}], XY)
    assert cs.migrate(data, XY, XY) is data


def test_migrate_to_zero_columns_keeps_the_row_count() -> None:
    """Deleting every field still yields one (empty) row per input row."""
    batch = pa.record_batch([pa.array([1, 2, 3])], names=["a"])
    out = cs.migrate(batch, batch.schema, sch())
    assert out.num_rows == 3 and out.schema == sch()
    out_array = cs.migrate(pa.array([{"x": 1}, None], st(f("x", I32))), st(f("x", I32)), st())
    assert out_array.to_pylist() == [{}, None]


def test_migrate_with_projection_reorders_and_fills_nulls() -> None:
    """A reader projection may reorder fields at any depth and include later nullable fields."""
    old = sch(nn("id", I64), f("s", XY))
    reader = sch(f("s", st(f("new", STR), f("x", I32))), f("id", I64))
    batch = pa.record_batch([pa.array([1]), pa.array([{"x": 2, "y": "a"}], XY)], schema=old)
    out = cs.migrate(batch, old, reader, projection=True)
    assert out.schema == reader
    assert out.to_pylist() == [{"s": {"new": None, "x": 2}, "id": 1}]
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.migrate(batch, old, sch(f("s", XY_NN)), projection=True)
    assert (info.value.rule, info.value.path) == ("nullability-tightened", "s.x")


def test_migrate_handles_parquet_list_element_names() -> None:
    """Data whose list element is named 'element' (a Parquet round trip) migrates by type."""
    data = pa.array([[{"x": 1, "y": "a"}]], lst(f("element", XY)))
    out = migrated(data, lst(XY), lst(st(f("x", I32))))
    assert out.to_pylist() == [[{"x": 1}]]


@pytest.mark.parametrize(
    ("old", "new", "preserves"),
    [
        (sch(f("a", I32)), sch(f("a", I32), f("b", STR)), True),
        (sch(nn("a", I32)), sch(f("a", I32)), True),
        (sch(f("a", I32), f("b", STR)), sch(f("b", STR)), False),
        (sch(f("l", lst(XY))), sch(f("l", lst(st(f("y", STR))))), False),
        (
            sch(f("m", mp(STR, XY))),
            sch(f("m", mp(STR, st(f("x", I32), f("y", STR), f("z", STR))))),
            True,
        ),
    ],
)
def test_migration_preserves_order(old: pa.Schema, new: pa.Schema, preserves: bool) -> None:
    """Only deletions may break the sort order of migrated data."""
    assert cs.migration_preserves_order(old, new) is preserves


def test_migration_preserves_order_refuses_incompatible() -> None:
    """The order flag is only defined for allowed migrations."""
    with pytest.raises(SchemaIncompatibleError):
        cs.migration_preserves_order(sch(f("a", I64)), sch(f("a", I32)))
    assert cs.migration_preserves_order(sch(f("a", I32)), sch(f("a", I64)))  # widening keeps it


# --- reader fencing ---------------------------------------------------------------------------

SHARD = cs.evolve(
    cs.migration_type(sch(nn("id", I64), f("s", XY_NN), f("l", lst(XY)), f("m", mp(STR, I32)))),
    sch(f("id", I64), f("s", st(nn("x", I32))), f("l", lst(XY)), f("m", mp(STR, I32)), f("n", STR)),
)


@pytest.mark.parametrize(
    "reader",
    [
        pytest.param(cs.live_schema(SHARD), id="latest"),
        pytest.param(sch(f("n", STR), f("id", I64)), id="top-level-projection-reordered"),
        pytest.param(sch(f("l", lst(st(f("y", STR), f("x", I32))))), id="nested-projection"),
        pytest.param(sch(f("s", st(f("x", I32)))), id="nullable-over-non-null"),
        pytest.param(sch(), id="empty"),
    ],
)
def test_check_reader_accepts(reader: pa.Schema) -> None:
    """The current schema and projections of it are never fenced."""
    cs.check_reader(SHARD, reader)


@pytest.mark.parametrize(
    ("reader", "rule", "path"),
    [
        (sch(f("s", st(f("x", I32), f("y", STR)))), "reader-needs-deleted-field", "s.y"),
        (sch(nn("id", I64)), "reader-needs-non-null", "id"),
        (sch(f("l", lst(nn("item", XY)))), "reader-needs-non-null", "l.items"),
        (sch(f("zzz", STR)), "reader-unknown-field", "zzz"),
        (sch(f("l", lst(st(f("q", I32))))), "reader-unknown-field", "l.items.q"),
        (sch(f("id", I32)), "reader-narrower-type", "id"),
        (sch(f("id", STR)), "reader-type-mismatch", "id"),
        (sch(f("l", llst(XY))), "reader-type-mismatch", "l"),
        (sch(f("m", mp(I64, I32))), "reader-type-mismatch", "m.key"),
    ],
)
def test_check_reader_fences(reader: pa.Schema, rule: str, path: str) -> None:
    """Readers needing deleted, tightened, unknown or retyped fields are fenced with the rule."""
    with pytest.raises(ReaderFencedError) as info:
        cs.check_reader(SHARD, reader)
    assert (info.value.rule, info.value.path) == (rule, path)


# --- fingerprint ------------------------------------------------------------------------------

PINNED = sch(
    nn("id", I64),
    f("name", STR),
    f("at", pa.timestamp("us", "UTC")),
    f("amount", pa.decimal128(12, 3)),
    f("tags", lst(STR)),
    f("attrs", mp(STR, st(f("k", pa.int16()), nn("v", pa.large_string())))),
    f("blob", pa.large_list(pa.binary())),
)
PINNED_FINGERPRINT = "59f163ec66ff30fa8e31dd8423df73196612cc011c373ee4559e22ce53419e53"


def test_fingerprint_is_pinned() -> None:
    """The canonical form does not drift: a change here changes every stored fingerprint."""
    assert cs.fingerprint(PINNED) == PINNED_FINGERPRINT


def test_fingerprint_ignores_metadata() -> None:
    """Schema metadata, field metadata (nested too) and metadata order never change it."""
    decorated = pa.schema(
        [
            pa.field(x.name, x.type, x.nullable, metadata={b"doc": b"cosmetic", b"a": b"b"})
            for x in PINNED
        ],
        metadata={b"comment": b"hello"},
    )
    assert cs.fingerprint(decorated) == cs.fingerprint(PINNED)
    nested = sch(f("s", st(pa.field("x", I32, metadata={b"doc": b"x"}))))
    assert cs.fingerprint(nested) == cs.fingerprint(sch(f("s", st(f("x", I32)))))


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(sch(f("id", I64), *list(PINNED)[1:]), id="nullability"),
        pytest.param(sch(*list(PINNED)[1:], nn("id", I64)), id="order"),
        pytest.param(sch(nn("ID", I64), *list(PINNED)[1:]), id="name"),
        pytest.param(
            sch(*list(PINNED)[:2], f("at", pa.timestamp("us", "+00:00")), *list(PINNED)[3:]),
            id="timezone",
        ),
        pytest.param(
            sch(*list(PINNED)[:3], f("amount", pa.decimal128(12, 2)), *list(PINNED)[4:]), id="scale"
        ),
        pytest.param(
            sch(*list(PINNED)[:4], f("tags", lst(nn("item", STR))), *list(PINNED)[5:]),
            id="element-nullability",
        ),
        pytest.param(sch(*list(PINNED)[:6], f("blob", pa.list_(pa.binary()))), id="list-kind"),
    ],
)
def test_fingerprint_changes_with_the_schema(variant: pa.Schema) -> None:
    """Nullability, order, names and type parameters all change the fingerprint."""
    assert cs.fingerprint(variant) != PINNED_FINGERPRINT


def test_fingerprint_is_identical_in_another_process() -> None:
    """A fresh interpreter with another hash seed computes the same fingerprint."""
    src = str(Path(cs.__file__).resolve().parents[2])  # catalog/schema/__init__.py
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": src}
    script = (
        "import sys, pyarrow as pa\n"
        "from catalog.schema import fingerprint, schema_from_bytes\n"
        "print(fingerprint(schema_from_bytes(bytes.fromhex(sys.argv[1]))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, cs.schema_to_bytes(PINNED).hex()],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == PINNED_FINGERPRINT


# --- diff and serialization -------------------------------------------------------------------


def test_schema_diff_lists_dotted_paths() -> None:
    """The diff names added, dropped and relaxed paths at every depth."""
    old = sch(nn("id", I64), f("s", XY), f("l", lst(st(f("a", I32), f("b", I32)))), f("g", STR))
    new = sch(
        f("id", I64),
        f("s", st(f("x", I32))),
        f("l", lst(st(f("a", I32), f("c", STR)))),
        f("n", mp(STR, I32)),
    )
    assert cs.schema_diff(old, new) == {
        "added": ["l.items.c", "n"],
        "dropped": ["s.y", "l.items.b", "g"],
        "relaxed": ["id"],
        "changed": [],
        "renamed": [],
    }
    assert cs.schema_diff(sch(f("a", I32)), sch(nn("a", I64)))["changed"] == ["a"]


def test_schema_round_trip_keeps_nested_tombstones() -> None:
    """IPC serialization keeps field metadata (tombstones) at every depth, and schema metadata."""
    mtype = pa.schema(
        [
            tomb(f("gone", I32)),
            f("m", mp(STR, lst(st(f("x", I32), tomb(f("y", STR)))))),
        ],
        metadata={b"k": b"v"},
    )
    back = cs.schema_from_bytes(cs.schema_to_bytes(mtype))
    assert isinstance(cs.schema_to_bytes(mtype), bytes)
    assert back.equals(mtype, check_metadata=True)
    inner = back.field("m").type.item_type.value_type
    assert cs.is_tombstone(inner.field("y")) and not cs.is_tombstone(inner.field("x"))
    assert cs.live_schema(back) == sch(f("m", mp(STR, lst(st(f("x", I32))))))


def test_public_names() -> None:
    """The public surface others code against stays exported."""
    assert {
        "is_backward_compatible",
        "check_backward_compatible",
        "migration_type",
        "evolve",
        "live_schema",
        "is_tombstone",
        "migrate",
        "migrate_batch",
        "migration_preserves_order",
        "check_reader",
        "fingerprint",
        "schema_diff",
        "schema_to_bytes",
        "schema_from_bytes",
        "visit",
        "visit_with_partner",
    } <= set(cs.__all__)
    assert all(hasattr(cs, name) for name in cs.__all__)
