"""Property tests of catalog.schema over random nested schemas and random evolution chains."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import schema as cs
from catalog.errors import SchemaIncompatibleError

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PRIMITIVES = [
    pa.int32(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.bool_(),
    pa.date32(),
    pa.decimal128(10, 2),
    pa.timestamp("us", "UTC"),
]
MAP_KEYS = [pa.string(), pa.int32()]

# A step into a nested type: ("field", name), ("items", "") or ("value", "").
Step = tuple[str, str]
Path = tuple[Step, ...]


# --- schema strategies ------------------------------------------------------------------------


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    element = st.tuples(children, st.booleans()).map(lambda tn: pa.field("item", tn[0], tn[1]))
    value = st.tuples(children, st.booleans()).map(lambda tn: pa.field("value", tn[0], tn[1]))
    return st.one_of(
        element.map(pa.list_),
        element.map(pa.large_list),
        st.tuples(st.sampled_from(MAP_KEYS), value).map(lambda kv: pa.map_(kv[0], kv[1])),
        st.lists(st.tuples(children, st.booleans()), min_size=1, max_size=3).map(
            lambda fs: pa.struct([pa.field(f"f{i}", t, n) for i, (t, n) in enumerate(fs)])
        ),
    )


# Built once: validating a fresh recursive strategy on every draw costs more than drawing.
TYPES = st.recursive(st.sampled_from(PRIMITIVES), _nested, max_leaves=6)
SCHEMAS = st.lists(st.tuples(TYPES, st.booleans()), min_size=1, max_size=4).map(
    lambda fs: pa.schema([pa.field(f"f{i}", t, n) for i, (t, n) in enumerate(fs)])
)


# --- editing nested types ---------------------------------------------------------------------


def _fields(dtype: pa.DataType) -> list[pa.Field]:
    return [dtype.field(i) for i in range(dtype.num_fields)]


def _root(schema: pa.Schema) -> pa.DataType:
    return pa.struct(list(schema))


def _schema(root: pa.DataType) -> pa.Schema:
    return pa.schema(_fields(root))


def nodes(dtype: pa.DataType, path: Path = ()) -> list[tuple[Path, pa.DataType]]:
    """Every node of a type with its path (map keys are atomic here and not listed)."""
    found = [(path, dtype)]
    if pa.types.is_struct(dtype):
        for field in _fields(dtype):
            found += nodes(field.type, (*path, ("field", field.name)))
    elif pa.types.is_map(dtype):
        found += nodes(dtype.item_type, (*path, ("value", "")))
    elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        found += nodes(dtype.value_type, (*path, ("items", "")))
    return found


def replace(
    dtype: pa.DataType, path: Path, edit: Callable[[pa.DataType], pa.DataType]
) -> pa.DataType:
    """``dtype`` with the node at ``path`` replaced by ``edit(node)``."""
    if not path:
        return edit(dtype)
    (kind, name), rest = path[0], path[1:]
    if kind == "field":
        return pa.struct(
            [
                pa.field(x.name, replace(x.type, rest, edit), x.nullable, x.metadata)
                if x.name == name
                else x
                for x in _fields(dtype)
            ]
        )
    if kind == "items":
        element = dtype.value_field
        element = pa.field(element.name, replace(element.type, rest, edit), element.nullable)
        return pa.large_list(element) if pa.types.is_large_list(dtype) else pa.list_(element)
    item = dtype.item_field
    item = pa.field(item.name, replace(item.type, rest, edit), item.nullable)
    return pa.map_(dtype.key_field, item, keys_sorted=dtype.keys_sorted)


def becomes(new: pa.DataType) -> Callable[[pa.DataType], pa.DataType]:
    return lambda _: new


def with_fields(fields: list[pa.Field]) -> Callable[[pa.DataType], pa.DataType]:
    return becomes(pa.struct(fields))


def set_child_nullable(nullable: bool) -> Callable[[pa.DataType], pa.DataType]:
    """Sets the nullability of a list element or a map value."""

    def edit(dtype: pa.DataType) -> pa.DataType:
        if pa.types.is_map(dtype):
            item = dtype.item_field.with_nullable(nullable)
            return pa.map_(dtype.key_field, item, keys_sorted=dtype.keys_sorted)
        element = dtype.value_field.with_nullable(nullable)
        return pa.large_list(element) if pa.types.is_large_list(dtype) else pa.list_(element)

    return edit


def is_list_like(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_list(dtype) or pa.types.is_large_list(dtype))


Edit = Callable[[pa.DataType], pa.DataType]


@st.composite
def allowed_edit(draw: st.DrawFn, schema: pa.Schema, step: int) -> pa.Schema:
    """One allowed edit: relax, delete, or add a nullable field with a fresh name at the end."""
    root = _root(schema)
    edits: list[tuple[Path, Edit | None]] = []
    for path, node in nodes(root):
        if pa.types.is_struct(node):
            fields = _fields(node)
            edits.append((path, None))  # add a field at the end; its type is drawn below
            for i, field in enumerate(fields):
                edits.append((path, with_fields(fields[:i] + fields[i + 1 :])))
                if not field.nullable:
                    relaxed = [*fields[:i], field.with_nullable(True), *fields[i + 1 :]]
                    edits.append((path, with_fields(relaxed)))
        elif (pa.types.is_map(node) and not node.item_field.nullable) or (
            is_list_like(node) and not node.value_field.nullable
        ):
            edits.append((path, set_child_nullable(True)))
    path, edit = draw(st.sampled_from(edits))
    if edit is None:
        added = pa.field(f"a{step}", draw(TYPES), nullable=True)
        fields = _fields(dict(nodes(root))[path])
        edit = with_fields([*fields, added])
    return _schema(replace(root, path, edit))


@st.composite
def chains(draw: st.DrawFn, max_steps: int = 4) -> list[pa.Schema]:
    """A first schema followed by allowed edits."""
    chain = [draw(SCHEMAS)]
    for step in range(draw(st.integers(0, max_steps))):
        chain.append(draw(allowed_edit(chain[-1], step)))
    return chain


def _tombstones(mtype: pa.DataType, path: Path = ()) -> list[tuple[Path, str]]:
    """(live struct path, name) of every tombstone whose parent is still live."""
    found: list[tuple[Path, str]] = []
    if pa.types.is_struct(mtype):
        for field in _fields(mtype):
            if cs.is_tombstone(field):
                found.append((path, field.name))
            else:
                found += _tombstones(field.type, (*path, ("field", field.name)))
    elif pa.types.is_map(mtype):
        found += _tombstones(mtype.item_type, (*path, ("value", "")))
    elif is_list_like(mtype):
        found += _tombstones(mtype.value_type, (*path, ("items", "")))
    return found


@st.composite
def disallowed_edit(draw: st.DrawFn, history: pa.Schema, live: pa.Schema) -> tuple[pa.Schema, str]:
    """One refused evolution of ``live`` and the rule that must refuse it."""
    root = _root(live)
    edits: list[tuple[Path, Edit, str]] = []
    fresh = pa.field("fresh", pa.int32())
    for path, node in nodes(root):
        if pa.types.is_struct(node):
            fields = _fields(node)
            not_null = with_fields([*fields, fresh.with_nullable(False)])
            edits.append((path, not_null, "field-added-not-nullable"))
            if fields:
                edits.append((path, with_fields([fresh, *fields]), "field-added-not-at-end"))
            for i, field in enumerate(fields):
                if field.nullable:
                    tight = [*fields[:i], field.with_nullable(False), *fields[i + 1 :]]
                    edits.append((path, with_fields(tight), "nullability-tightened"))
                if i + 1 < len(fields):
                    swapped = [*fields[:i], fields[i + 1], fields[i], *fields[i + 2 :]]
                    edits.append((path, with_fields(swapped), "field-reordered"))
            if path:
                edits.append((path, becomes(pa.int32()), "type-changed"))
        elif pa.types.is_map(node):
            key = pa.int32() if pa.types.is_string(node.key_type) else pa.string()
            edits.append((path, becomes(pa.map_(key, node.item_field)), "map-key-changed"))
            if node.item_field.nullable:
                edits.append((path, set_child_nullable(False), "nullability-tightened"))
        elif is_list_like(node):
            if pa.types.is_large_list(node):  # list -> large_list is a lossless widening
                edits.append((path, becomes(pa.list_(node.value_field)), "type-changed"))
            if node.value_field.nullable:
                edits.append((path, set_child_nullable(False), "nullability-tightened"))
        else:
            other = pa.binary() if node != pa.binary() else pa.int8()
            edits.append((path, becomes(other), "type-changed"))
    live_nodes = dict(nodes(root))
    for path, name in _tombstones(_root(history)):
        readded = [*_fields(live_nodes[path]), pa.field(name, pa.int32())]
        edits.append((path, with_fields(readded), "field-readded"))
    path, edit, rule = draw(st.sampled_from(edits))
    return _schema(replace(root, path, edit)), rule


# --- data -------------------------------------------------------------------------------------


def _primitive_values(dtype: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_int32(dtype):
        return st.integers(-(2**31), 2**31 - 1)
    if pa.types.is_int64(dtype):
        return st.integers(-(2**63), 2**63 - 1)
    if pa.types.is_float64(dtype):
        return st.floats(allow_nan=False, allow_infinity=False)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return st.text(max_size=4)
    if pa.types.is_boolean(dtype):
        return st.booleans()
    if pa.types.is_date32(dtype):
        return st.dates()
    if pa.types.is_decimal(dtype):
        return st.decimals(
            min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2
        )
    if pa.types.is_timestamp(dtype):
        return st.datetimes(
            min_value=dt.datetime(1970, 1, 1),
            max_value=dt.datetime(2200, 1, 1),
            timezones=st.just(dt.UTC),
        )
    raise AssertionError(f"no value strategy for {dtype}")


def values(dtype: pa.DataType, nullable: bool) -> st.SearchStrategy[Any]:
    """Python values of ``dtype`` that pyarrow converts, None only where nullable."""
    if pa.types.is_struct(dtype):
        base: st.SearchStrategy[Any] = st.fixed_dictionaries(
            {x.name: values(x.type, x.nullable) for x in _fields(dtype)}
        )
    elif pa.types.is_map(dtype):
        entry = st.tuples(
            _primitive_values(dtype.key_type),
            values(dtype.item_type, dtype.item_field.nullable),
        )
        base = st.lists(entry, max_size=3)
    elif is_list_like(dtype):
        base = st.lists(values(dtype.value_type, dtype.value_field.nullable), max_size=3)
    else:
        base = _primitive_values(dtype)
    return st.one_of(st.none(), base) if nullable else base


def reference(value: Any, old: pa.DataType, new: pa.DataType) -> Any:
    """The migration spelled out on Python values: the oracle for cs.migrate."""
    if value is None:
        return None
    if pa.types.is_struct(new):
        return {
            x.name: reference(value[x.name], old.field(x.name).type, x.type)
            if old.get_field_index(x.name) >= 0
            else None
            for x in _fields(new)
        }
    if pa.types.is_map(new):
        return [(k, reference(v, old.item_type, new.item_type)) for k, v in value]
    if is_list_like(new):
        return [reference(v, old.value_type, new.value_type) for v in value]
    return value


@st.composite
def batches(draw: st.DrawFn, schema: pa.Schema) -> tuple[pa.RecordBatch, list[dict[str, Any]]]:
    row = st.fixed_dictionaries({x.name: values(x.type, x.nullable) for x in schema})
    rows = draw(st.lists(row, max_size=6))
    return pa.RecordBatch.from_pylist(rows, schema=schema), rows


# --- properties -------------------------------------------------------------------------------


@SETTINGS
@given(chain=chains())
def test_allowed_chains_are_compatible_with_every_earlier_schema(chain: list[pa.Schema]) -> None:
    """After allowed edits, each schema is compatible with every earlier one (and itself)."""
    for i, old in enumerate(chain):
        for new in chain[i:]:
            assert cs.is_backward_compatible(old, new)


@SETTINGS
@given(chain=chains())
def test_evolve_over_allowed_chains(chain: list[pa.Schema]) -> None:
    """evolve accepts every allowed chain, from any point, and its live type is the last schema."""
    history = [cs.migration_type(chain[0])]
    for schema in chain[1:]:
        history.append(cs.evolve(history[-1], schema))
    assert cs.live_schema(history[-1]) == chain[-1]
    for i, mtype in enumerate(history):
        assert cs.live_schema(cs.evolve(mtype, chain[-1])) == chain[-1]
        assert cs.is_backward_compatible(mtype, chain[-1]), i
    cs.check_reader(history[-1], chain[-1])
    back = cs.schema_from_bytes(cs.schema_to_bytes(history[-1]))
    assert back.equals(history[-1], check_metadata=True)
    assert cs.fingerprint(cs.live_schema(back)) == cs.fingerprint(chain[-1])


@SETTINGS
@given(data=st.data(), chain=chains(max_steps=3))
def test_disallowed_edits_are_refused(data: st.DataObject, chain: list[pa.Schema]) -> None:
    """Any refused kind of edit after an allowed history is refused with its rule."""
    history = cs.migration_type(chain[0])
    for schema in chain[1:]:
        history = cs.evolve(history, schema)
    bad, rule = data.draw(disallowed_edit(history, chain[-1]))
    with pytest.raises(SchemaIncompatibleError) as info:
        cs.evolve(history, bad)
    assert info.value.rule == rule
    assert not cs.is_backward_compatible(history, bad)
    if rule != "field-readded":
        assert not cs.is_backward_compatible(chain[-1], bad)


@SETTINGS
@given(data=st.data(), chain=chains(max_steps=3))
def test_migrated_data_has_the_new_type_and_every_row(
    data: st.DataObject, chain: list[pa.Schema]
) -> None:
    """Random data of the first schema migrates to exactly the last schema, row for row."""
    first, last = chain[0], chain[-1]
    batch, rows = data.draw(batches(first))
    out = cs.migrate(batch, first, last)
    out.validate(full=True)
    assert out.schema == last
    assert out.num_rows == batch.num_rows
    expected = [reference(r, _root(first), _root(last)) for r in rows]
    assert out.to_pylist() == expected

    stepwise = batch
    for old, new in itertools.pairwise(chain):
        stepwise = cs.migrate(stepwise, old, new)
    assert stepwise.to_pylist() == expected

    n = batch.num_rows
    if n >= 2:
        sliced = cs.migrate(batch.slice(1, n - 2), first, last)
        sliced.validate(full=True)
        assert sliced.to_pylist() == expected[1 : n - 1]
    table = cs.migrate(pa.Table.from_batches([batch, batch.slice(n // 2)]), first, last)
    assert table.schema == last
    assert table.to_pylist() == expected + expected[n // 2 :]


@SETTINGS
@given(data=st.data(), chain=chains(max_steps=3))
def test_projections_of_the_latest_schema_read_every_batch(
    data: st.DataObject, chain: list[pa.Schema]
) -> None:
    """A reader on any projection of the latest schema is not fenced and reads old batches."""
    history = cs.migration_type(chain[0])
    for schema in chain[1:]:
        history = cs.evolve(history, schema)
    last = chain[-1]
    names = data.draw(st.permutations(last.names).flatmap(lambda p: st.just(p[: len(p) // 2 + 1])))
    reader = pa.schema([last.field(name) for name in names])
    cs.check_reader(history, reader)
    batch, rows = data.draw(batches(chain[0]))
    out = cs.migrate(batch, chain[0], reader, projection=True)
    assert out.schema == reader
    assert out.to_pylist() == [reference(r, _root(chain[0]), _root(reader)) for r in rows]
