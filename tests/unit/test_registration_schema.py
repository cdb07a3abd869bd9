"""orchestrator.migrate.registration_schema: what a leader registers when a newer release's
crashed leader left fields on the shard (pure logic on shard states, no ZooKeeper)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog.errors import SchemaIncompatibleError
from catalog.schema import check_reader
from catalog.shard import ShardState, create_op, evolve_op, find_schema_id
from orchestrator.migrate import registration_schema

BASE = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("name", pa.string())])
OLDER = pa.schema([*BASE, pa.field("source_id", pa.string())])  # what the older release wants
NEWER = pa.schema([*OLDER, pa.field("redacted", pa.string())])  # what the crashed leader left


def shard(*schemas: pa.Schema) -> ShardState:
    _, state = create_op("s", schemas[0])
    for schema in schemas[1:]:
        op, state = evolve_op(state, schema)
        assert op is not None
    return state


def test_no_foreign_fields_registers_the_release_schema() -> None:
    assert registration_schema(shard(BASE), BASE, OLDER).equals(OLDER)


def test_fields_of_a_crashed_newer_leader_are_kept() -> None:
    """The older release's evolution keeps `redacted` instead of deleting it: here the wider
    schema is exactly what the crashed leader registered, so nothing new is registered."""
    state = shard(BASE, NEWER)
    wider = registration_schema(state, BASE, OLDER)
    assert wider.names == ["id", "name", "source_id", "redacted"]
    assert find_schema_id(state, wider) == 1
    with pytest.raises(SchemaIncompatibleError):
        # What registering the release's own schema would lead to, later: re-adding is refused.
        _, narrowed = evolve_op(state, OLDER)
        evolve_op(narrowed, NEWER)


def test_intended_deletions_still_happen_and_added_fields_go_last() -> None:
    """A field the release deletes (`name`, known to the catalog's schema) is deleted; the
    foreign one is kept; the release's own new field comes after the kept ones."""
    state = shard(BASE, pa.schema([*BASE, pa.field("foreign", pa.int64())]))
    new = pa.schema([BASE.field("id"), pa.field("mine", pa.string())])
    wider = registration_schema(state, BASE, new)
    assert wider.names == ["id", "foreign", "mine"]
    op, after = evolve_op(state, wider)
    assert op is not None and after.live_schema.names == ["id", "foreign", "mine"]


def test_an_invalid_widening_falls_back_to_the_release_schema() -> None:
    """When keeping the foreign field cannot make a valid evolution (here the release changes
    `name`'s type, which no evolution allows), the release's own schema is returned, and
    the leader's usual refusal applies."""
    state = shard(BASE, pa.schema([*BASE, pa.field("foreign", pa.int64())]))
    new = pa.schema([BASE.field("id"), pa.field("name", pa.int32())])  # a type change
    assert registration_schema(state, BASE, new).equals(new)


def test_nested_fields_of_a_crashed_newer_leader_are_kept() -> None:
    """At any depth: a struct child and a field of list elements the crashed leader added
    survive, the release's own nested addition comes after them, and the release's schema
    reads the result as a projection."""
    item = pa.struct([pa.field("x", pa.int64())])
    base = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("config", pa.struct([pa.field("size", pa.string())])),
            pa.field("key", pa.list_(item)),
        ]
    )
    newer = pa.schema(
        [
            base.field("id"),
            pa.field(
                "config",
                pa.struct([pa.field("size", pa.string()), pa.field("disk_limit", pa.string())]),
            ),
            pa.field(
                "key",
                pa.list_(pa.struct([pa.field("x", pa.int64()), pa.field("last", pa.bool_())])),
            ),
        ]
    )
    mine = pa.schema(
        [
            base.field("id"),
            pa.field(
                "config", pa.struct([pa.field("size", pa.string()), pa.field("zone", pa.string())])
            ),
            base.field("key"),
        ]
    )
    state = shard(base, newer)
    wider = registration_schema(state, base, mine)
    assert [f.name for f in wider.field("config").type] == ["size", "disk_limit", "zone"]
    assert [f.name for f in wider.field("key").type.value_type] == ["x", "last"]
    _, after = evolve_op(state, wider)
    check_reader(after.schema, mine)  # the release reads its own schema as a projection
    check_reader(after.schema, newer)  # and the crashed release can still read (and start)


def test_map_value_fields_of_a_crashed_newer_leader_are_kept() -> None:
    """Map values widen like structs and list elements (they were skipped before widening
    became a schema visitor)."""

    def labels(*fields: pa.Field) -> pa.Schema:
        value = pa.struct(list(fields))
        return pa.schema([pa.field("id", pa.string(), nullable=False), pa.field(
            "labels", pa.map_(pa.string(), value))])  # fmt: skip

    text = pa.field("text", pa.string())
    base = labels(text)
    newer = labels(text, pa.field("lang", pa.string()))
    mine = labels(text, pa.field("color", pa.string()))
    state = shard(base, newer)
    wider = registration_schema(state, base, mine)
    value = wider.field("labels").type.item_type
    assert [f.name for f in value] == ["text", "lang", "color"]
    op, registered = evolve_op(state, wider)
    assert op is not None
    check_reader(registered.schema, mine)  # the release reads it as a projection
