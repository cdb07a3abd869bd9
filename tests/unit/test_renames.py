"""Renames through stable field ids (catalog.schema.ids): a rename keeps its field's slot and id
and data of every older schema reads under the new name, at any depth; a deleted name comes back
as a new field with a new id; ids are never reused; refusals name their rule."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import SchemaIncompatibleError
from catalog.schema import evolve, field_id, former_names, live_schema, migrate, renamed
from catalog.schema.expand import expansion
from catalog.schema.ids import LAST_ID_KEY, ids_like, last_id, number

V1 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("owner", pa.string()),
        pa.field("size", pa.int32()),
        pa.field("spec", pa.struct([pa.field("cpu", pa.int16()), pa.field("mem", pa.int32())])),
        pa.field("tags", pa.list_(pa.struct([pa.field("k", pa.string())]))),
    ]
)
# owner -> owner_id, spec.mem -> spec.memory, tags.items.k -> tags.items.key; size widened.
V2 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        renamed(pa.field("owner_id", pa.string()), "owner"),
        pa.field("size", pa.int64()),
        pa.field(
            "spec",
            pa.struct(
                [pa.field("cpu", pa.int16()), renamed(pa.field("memory", pa.int32()), "mem")]
            ),
        ),
        pa.field("tags", pa.list_(pa.struct([renamed(pa.field("key", pa.string()), "k")]))),
    ]
)
ROWS = [
    {"id": 1, "owner": "ann", "size": 7, "spec": {"cpu": 2, "mem": 512}, "tags": [{"k": "a"}]},
    {"id": 2, "owner": None, "size": None, "spec": None, "tags": None},
]


def names(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema]


def test_a_rename_keeps_the_slot_and_id_and_old_data_reads_under_the_new_name() -> None:
    history = evolve(V1, V1)
    assert field_id(history.field("owner")) is None  # nothing numbered before a rename
    evolved = evolve(history, V2)
    assert names(evolved) == ["id", "owner_id", "size", "spec", "tags"]
    ids = [field_id(f) for f in evolved]
    assert ids == [1, 2, 3, 4, 7] and last_id(evolved) == 8  # spec.cpu 5, spec.mem 6, k 8
    assert former_names(evolved.field("owner_id")) == ("owner",)
    memory = evolved.field("spec").type.field("memory")
    assert former_names(memory) == ("mem",) and field_id(memory) == 6
    old = ids_like(V1, number(V1))  # the shard renumbers the schemas it registered before
    table = pa.Table.from_pylist(ROWS, schema=old)
    read = migrate(table, old, live_schema(evolved))
    assert read.to_pylist() == [
        {"id": 1, "owner_id": "ann", "size": 7, "spec": {"cpu": 2, "memory": 512},
         "tags": [{"key": "a"}]},
        {"id": 2, "owner_id": None, "size": None, "spec": None, "tags": None},
    ]  # fmt: skip


def test_the_release_schema_reads_the_unnumbered_expansion_by_its_declared_names() -> None:
    """Before the contraction the shard keeps the old names (the expansion); the release that
    renames reads and writes through its declared former names, both ways."""
    expanded = expansion(V1, V2)
    assert names(expanded) == names(V1)  # the expansion keeps the old name: older releases
    table = pa.Table.from_pylist(ROWS, schema=V1)
    as_release = migrate(table, V1, V2, projection=True)
    assert as_release.column("owner_id").to_pylist() == ["ann", None]
    assert as_release.column("spec").to_pylist()[0] == {"cpu": 2, "memory": 512}
    same_size = V2.set(2, V1.field("size"))  # the window keeps the narrow type too
    forward = migrate(table, V1, same_size, projection=True)
    back = migrate(forward, same_size, V1, projection=True, newer=True)  # renames backwards
    assert back.to_pylist() == table.to_pylist()


def test_a_deleted_name_comes_back_as_a_new_field_with_a_new_id() -> None:
    numbered = evolve(V1, V2)  # numbered by the rename
    without = pa.schema([f for f in V2 if f.name != "size"])
    deleted = evolve(numbered, without)
    assert field_id(deleted.field("size")) == 3  # the tombstone keeps its id
    again = pa.schema([*without, pa.field("size", pa.string())])
    readded = evolve(deleted, again)
    assert [f.name for f in readded] == ["id", "owner_id", "size", "spec", "tags", "size"]
    assert field_id(readded.field(5)) == 9 and readded.metadata[LAST_ID_KEY] == b"9"
    old = ids_like(V1, number(V1))
    table = pa.Table.from_pylist(ROWS, schema=old)
    read = migrate(table, old, live_schema(readded))
    assert read.column("size").to_pylist() == [None, None]  # the old size is another field


def test_an_unnumbered_history_still_refuses_a_readded_name() -> None:
    without = pa.schema([f for f in V1 if f.name != "size"])
    deleted = evolve(V1, without)
    with pytest.raises(SchemaIncompatibleError) as caught:
        evolve(deleted, pa.schema([*without, pa.field("size", pa.int32())]))
    assert caught.value.rule == "field-readded"


@pytest.mark.parametrize(
    ("schema", "rule", "path"),
    [
        # renamed from a name the history never had (a release skipping the middle rename)
        (pa.schema([V1.field("id"), renamed(pa.field("owner_name", pa.string()), "owner_id")]),
         "rename-source-missing", "owner_name"),
        # renamed onto the name of another field the history holds live
        (pa.schema([V1.field("id"), renamed(pa.field("size", pa.string()), "owner")]),
         "rename-conflict", "size"),
        # renamed and kept under its old name too
        (pa.schema([V1.field("id"), V1.field("owner"),
                    renamed(pa.field("o2", pa.string()), "owner")]),
         "rename-conflict", "o2"),
    ],
    ids=["source-missing", "onto-a-live-name", "renamed-and-kept"],
)  # fmt: skip
def test_bad_renames_are_refused_naming_the_rule_and_path(
    schema: pa.Schema, rule: str, path: str
) -> None:
    with pytest.raises(SchemaIncompatibleError) as caught:
        evolve(V1, schema)
    assert (caught.value.rule, caught.value.details["path"]) == (rule, path)


def test_a_chain_of_renames_across_skipped_releases_reads_through_every_name() -> None:
    """a -> b in one release, b -> c in the next: a release declaring every former name finds
    the field whichever release the shard is at."""
    a = pa.schema([pa.field("a", pa.string())])
    b = pa.schema([renamed(pa.field("b", pa.string()), "a")])
    c = pa.schema([renamed(pa.field("c", pa.string()), "b", "a")])
    through_b = evolve(evolve(a, b), c)
    skipping_b = evolve(a, c)
    assert former_names(through_b.field("c")) == ("b", "a")
    assert field_id(through_b.field("c")) == field_id(skipping_b.field("c")) == 1
    old = ids_like(a, number(a))
    data = pa.Table.from_pylist([{"a": "x"}], schema=old)
    assert migrate(data, old, live_schema(through_b)).to_pylist() == [{"c": "x"}]


def test_a_name_a_rename_freed_comes_back_in_a_later_release_as_a_new_field() -> None:
    """Release 2 renames a -> b; release 3 adds a new a. The new a has a new id, the old data
    reads under b, the expansion of release 3 keeps b and adds a, and release 3's rows moved
    back to release 2's schema keep b's values where they belong."""
    one = pa.schema([pa.field("id", pa.int64()), pa.field("a", pa.string())])
    two = pa.schema([pa.field("id", pa.int64()), renamed(pa.field("b", pa.string()), "a")])
    three = pa.schema([*two, pa.field("a", pa.int32())])
    history = evolve(evolve(one, two), three)
    assert [(f.name, field_id(f)) for f in history] == [("id", 1), ("b", 2), ("a", 3)]
    old = ids_like(one, number(one))
    data = pa.Table.from_pylist([{"id": 1, "a": "x"}], schema=old)
    assert migrate(data, old, live_schema(history)).to_pylist() == [{"id": 1, "b": "x", "a": None}]
    assert [f.name for f in expansion(live_schema(evolve(one, two)), three)] == ["id", "b", "a"]
    rows = pa.Table.from_pylist([{"id": 2, "b": "y", "a": 5}], schema=three)
    moved = migrate(rows, three, live_schema(evolve(one, two)), projection=True, newer=True)
    assert moved.to_pylist() == [{"id": 2, "b": "y"}]
    with pytest.raises(SchemaIncompatibleError) as caught:  # the same in one release: refused
        evolve(one, pa.schema([*two, pa.field("a", pa.int32())]))
    assert caught.value.rule == "rename-conflict"


def _schema_of(fields: list[tuple[int, str, str | None]]) -> pa.Schema:
    """A release's schema from model fields ``(identity, name, renamed from)``: an id, a
    struct, then each model field, a string."""
    out = []
    for _identity, name, former in fields:
        field = pa.field(name, pa.string())
        out.append(renamed(field, former) if former else field)
    inner = pa.struct([pa.field("p", pa.string()), pa.field("q", pa.string())])
    return pa.schema([pa.field("id", pa.int64()), pa.field("s", inner), *out])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_random_histories_of_renames_deletes_and_adds_read_every_value_by_identity(
    data: st.DataObject,
) -> None:
    """A shard through random releases that rename, delete and add fields (a freed or deleted
    name reused once the shard is numbered): every batch, written at any step, reads under the
    last schema with each value in the field it was written to, and nothing else."""
    from catalog.shard.ops import evolve_op
    from catalog.shard.state import ShardState

    model: list[tuple[int, str, str | None]] = [(1, "f1", None), (2, "f2", None)]
    next_identity = 3
    state = ShardState(shard_id="s", schemas=(evolve(_schema_of(model), _schema_of(model)),))
    written: list[tuple[int, list[int]]] = []  # (schema id, identities it wrote)
    tables: list[pa.Table] = []
    for _step in range(data.draw(st.integers(1, 5))):
        action = data.draw(st.sampled_from(["rename", "delete", "add"]))
        numbered = field_id(state.live_schema.field("id")) is not None
        names = {n for _, n, _ in model}
        if action == "rename" and model:
            i = data.draw(st.integers(0, len(model) - 1))
            ident, name, _ = model[i]
            fresh = f"r{next_identity}"
            next_identity += 1
            model[i] = (ident, fresh, name)
        elif action == "delete" and model:
            model.pop(data.draw(st.integers(0, len(model) - 1)))
        else:
            used = {n for s in state.schemas for n in s.names}
            freed = sorted(used - names - {"id", "s"}) if numbered else []
            name = data.draw(st.sampled_from(freed)) if freed else f"a{next_identity}"
            model.append((next_identity, name, None))
            next_identity += 1
        _, state = evolve_op(state, _schema_of(model))
        model = [(i, n, None) for i, n, _ in model]  # declared once, registered since
        live = state.live_schema
        row = {"id": len(tables), **{n: f"{i}@{len(tables)}" for i, n, _ in model}}
        tables.append(pa.Table.from_pylist([row], schema=live))
        written.append((state.schema_id, [i for i, _, _ in model]))
    final = state.live_schema
    for (schema_id, identities), table in zip(written, tables, strict=True):
        read = migrate(table, state.live(schema_id), final).to_pylist()[0]
        for ident, name, _ in model:
            want = f"{ident}@{read['id']}" if ident in identities else None
            assert read[name] == want, (name, read, model)
        assert set(read) == {"id", *(n for _, n, _ in model), "s"}


def _releases(*schemas: pa.Schema) -> list[Any]:
    """A history of one builtin through ``schemas`` (0.1.0, 0.2.0, ...), each by EVOLUTION."""
    from catalog.release import Builtin, Mechanism, Migration, Release

    out = []
    for minor, schema in enumerate(schemas, start=1):
        version = f"0.{minor}.0"
        moves = [] if minor == 1 else [
            Migration(f"0.{m}.0", "mz_catalog", "mz_things", "table", Mechanism.EVOLUTION)
            for m in range(2, minor + 1)
        ]  # fmt: skip
        out.append(Release(version, [Builtin("mz_catalog", "mz_things", "table", "s1", schema)],
                           moves))  # fmt: skip
    return out


def _failing(releases: list[Any]) -> dict[tuple[str, str], str | None]:
    from catalog.release import validate

    report = validate(releases)
    return {(str(f.from_version), str(f.to_version)): f.rule for f in report.failures}


A = pa.schema([pa.field("a", pa.string())])
B = pa.schema([renamed(pa.field("b", pa.string()), "a")])


def test_validate_follows_rename_chains_and_names_the_path_that_skips_one() -> None:
    declared = pa.schema([renamed(pa.field("c", pa.string()), "b", "a")])
    assert _failing(_releases(A, B, declared)) == {}
    skipping = pa.schema([renamed(pa.field("c", pa.string()), "b")])
    assert _failing(_releases(A, B, skipping)) == {("0.1.0", "0.3.0"): "rename-source-missing"}


def test_validate_lets_a_freed_name_back_only_after_the_rename_landed() -> None:
    """0.3.0 re-adds the name 0.2.0 renamed away: from 0.2.0 it is a new field; straight from
    0.1.0 one window would need both meanings of the name, so that path is refused."""
    again = pa.schema([*B, pa.field("a", pa.int32())])
    assert _failing(_releases(A, B, again)) == {("0.1.0", "0.3.0"): "rename-conflict"}


def test_validate_refuses_a_backport_that_renamed_differently() -> None:
    """A patch renames a -> b; the next minor renames a -> c: from the patch there is no a."""
    from catalog.release import Builtin, Mechanism, Migration, Release

    patch = Release(
        "0.1.1",
        [Builtin("mz_catalog", "mz_things", "table", "s1", B)],
        [Migration("0.1.1", "mz_catalog", "mz_things", "table", Mechanism.EVOLUTION)],
    )
    other = pa.schema([renamed(pa.field("c", pa.string()), "a")])
    minor = Release("0.2.0", [Builtin("mz_catalog", "mz_things", "table", "s1", other)], [
        Migration("0.1.1", "mz_catalog", "mz_things", "table", Mechanism.EVOLUTION),
        Migration("0.2.0", "mz_catalog", "mz_things", "table", Mechanism.EVOLUTION),
    ])  # fmt: skip
    failing = _failing([_releases(A)[0], patch, minor])
    assert failing[("0.1.1", "0.2.0")] == "rename-source-missing"
    assert ("0.1.0", "0.2.0") not in failing


def test_a_numbered_shard_is_stored_in_a_format_older_readers_refuse_by_number() -> None:
    """Once a shard numbers its fields its state is stored as format 4 (whole) or 3 (split
    head): a catalog-upgrade from before field ids refuses formats past 2 as written by a newer
    one, never reads a renamed field by its old name. This code reads both, and names a format
    newer than it knows."""
    import json as _json

    from catalog.consensus import Versioned
    from catalog.errors import CorruptStateError
    from catalog.shard.ops import evolve_op
    from catalog.shard.state import ShardState
    from catalog.shard.stored import decode_stored

    plain = ShardState(shard_id="s", schemas=(evolve(V1, V1),), version=0)
    assert _json.loads(plain.encode())["format"] == 1
    _, numbered = evolve_op(plain, V2)
    whole = numbered.encode()
    assert _json.loads(whole)["format"] == 4
    assert decode_stored(Versioned(whole, 1, key="k"), None) == numbered
    head = _json.loads(numbered.encode_head())
    assert head["format"] == 3
    back = decode_stored(Versioned(numbered.encode_head(), 1, key="k"),
                         Versioned(numbered.encode_body(), 0, key="b"))  # fmt: skip
    assert back is not None and back.live_schema.names == numbered.live_schema.names
    future = _json.dumps({**head, "format": 5}).encode()
    with pytest.raises(CorruptStateError, match="newer catalog-upgrade"):
        decode_stored(Versioned(future, 1, key="k"), None)


def test_a_release_that_drops_a_rename_declaration_fails_the_paths_from_before_it() -> None:
    """0.2.0 renames a -> b; 0.3.0 keeps b but no longer declares it: straight from 0.1.0 that
    would delete a and add b empty, so that path fails (the memo does not mistake 0.3.0's schema
    for 0.2.0's: their fingerprints are equal). Deleting b in between ends the chain: a later
    new field b needs no declaration."""
    plain = pa.schema([pa.field("b", pa.string())])
    assert _failing(_releases(A, B, plain)) == {("0.1.0", "0.3.0"): "rename-declaration-dropped"}
    assert _failing(_releases(A, B, B)) == {}
    gone = pa.schema([pa.field("other", pa.int64())])
    back = pa.schema([pa.field("other", pa.int64()), pa.field("b", pa.string())])
    assert "rename-declaration-dropped" not in _failing(_releases(A, B, gone, back)).values()
