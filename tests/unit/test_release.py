"""Unit tests of catalog.release: manifests, loading, fingerprints, plan rules and validate."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import attrs
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import catalog.release as cr
from catalog.errors import EXIT_BAD_INPUT, PlanError, ReleaseError, SchemaIncompatibleError
from catalog.release import (
    Builtin,
    CatalogSnapshot,
    CollectionState,
    Mechanism,
    Migration,
    Release,
    Version,
    load_release,
    load_release_dir,
    plan,
    plan_path,
    snapshot_at,
    validate,
)
from catalog.schema import evolve, fingerprint, migration_type

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "releases"
BROKEN = ROOT / "tests" / "fixtures" / "broken_releases"

EVO, REPL, REWR = Mechanism.EVOLUTION, Mechanism.REPLACEMENT, Mechanism.REWRITE

# --- builders ---------------------------------------------------------------------------------


def nn(name: str, dtype: pa.DataType) -> pa.Field:
    return pa.field(name, dtype, nullable=False)


def col(name: str, dtype: pa.DataType | None = None) -> pa.Field:
    return pa.field(name, pa.string() if dtype is None else dtype)


TABLES_V1 = pa.schema([nn("id", pa.string()), col("name")])
TABLES_V2 = pa.schema([nn("id", pa.string()), col("name"), col("owner")])
TABLES_V3 = pa.schema([nn("id", pa.string()), col("name"), col("owner"), col("comment")])
ROLES_V1 = pa.schema([nn("id", pa.int64())])
ROLES_V2 = pa.schema([nn("id", pa.string())])


def identity(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def tables(schema: pa.Schema = TABLES_V1, **kw: object) -> Builtin:
    return Builtin("mz_catalog", "mz_tables", "table", "s1", schema, **kw)  # type: ignore[arg-type]


def roles(schema: pa.Schema = ROLES_V1, **kw: object) -> Builtin:
    return Builtin("mz_catalog", "mz_roles", "table", "s2", schema, **kw)  # type: ignore[arg-type]


def instr(
    version: str, mechanism: Mechanism = EVO, name: str = "mz_tables", kind: str = "table"
) -> Migration:
    transform = identity if mechanism is REWR else None
    return Migration(version, "mz_catalog", name, kind, mechanism, transform=transform)


def rel(version: str, builtins: Sequence[Builtin], migrations: Sequence[Migration] = ()) -> Release:
    return Release(version, builtins, migrations)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# --- public surface ---------------------------------------------------------------------------


def test_public_names_are_what_we_export() -> None:
    """__all__ lists the release API: value types, loaders, plan, validate."""
    assert set(cr.__all__) == {
        "KINDS",
        "RELEASE_ATTRIBUTE",
        "Builtin",
        "CatalogSnapshot",
        "CollectionState",
        "Mechanism",
        "Migration",
        "PathFailure",
        "Plan",
        "PlannedMigration",
        "Release",
        "SchemaDiff",
        "Transform",
        "ValidationReport",
        "Version",
        "find_release",
        "load_release",
        "load_release_dir",
        "plan",
        "plan_path",
        "snapshot_at",
        "validate",
    }
    assert all(hasattr(cr, name) for name in cr.__all__)


def test_release_module_imports_neither_kazoo_nor_pyspark() -> None:
    """catalog.release stays engine- and coordination-agnostic (docs/design.md section 3)."""
    source = Path(cr.__file__).read_text()
    assert "kazoo" not in source
    assert "pyspark" not in source


# --- versions ---------------------------------------------------------------------------------


def test_versions_compare_as_versions_not_strings() -> None:
    """0.9.0 < 0.10.0 < 0.10.1 < 1.0.0-alpha < 1.0.0-rc.2 < 1.0.0-rc.11 < 1.0.0 (semver order)."""
    texts = ["1.0.0", "0.10.1", "1.0.0-rc.11", "0.9.0", "1.0.0-alpha", "0.10.0", "1.0.0-rc.2"]
    ordered = sorted(Version.parse(t) for t in texts)
    assert [str(v) for v in ordered] == [
        "0.9.0",
        "0.10.0",
        "0.10.1",
        "1.0.0-alpha",
        "1.0.0-rc.2",
        "1.0.0-rc.11",
        "1.0.0",
    ]
    assert Version.parse("0.10.0") > Version.parse("0.9.9")


def test_version_accepts_leading_v_and_passes_versions_through() -> None:
    """``v0.11.0`` parses like ``0.11.0``; a Version is returned as is."""
    version = Version.parse("v0.11.0")
    assert version == Version(0, 11, 0)
    assert Version.parse(version) is version
    assert str(version) == "0.11.0"


@pytest.mark.parametrize("text", ["1.0", "01.0.0", "1.0.0+build.5", "x.y.z", "1.0.0-01", ""])
def test_version_rejects_non_semantic_versions(text: str) -> None:
    """Anything that is not MAJOR.MINOR.PATCH[-pre] is a ReleaseError (exit 2)."""
    with pytest.raises(ReleaseError) as info:
        Version.parse(text)
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_version_rejects_non_strings() -> None:
    """A float like 0.11 is not a version."""
    with pytest.raises(ReleaseError):
        Version.parse(0.11)  # type: ignore[arg-type]


def test_version_patch_line() -> None:
    """A patch release knows its release line; X.Y.0 is not a patch release."""
    assert Version.parse("0.11.1").is_patch
    assert not Version.parse("0.11.0").is_patch
    assert Version.parse("0.11.1").line == (0, 11)


@given(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50)))
def test_version_round_trips_and_orders_like_its_numbers(parts: tuple[int, int, int]) -> None:
    """str/parse round-trips, and release versions order like their number tuples."""
    version = Version(*parts)
    assert Version.parse(str(version)) == version
    other = Version(parts[0], parts[1] + 1, 0)
    assert (version < other) == (parts < (parts[0], parts[1] + 1, 0))


# --- construction -----------------------------------------------------------------------------


def test_builtin_name_and_fingerprint() -> None:
    """A builtin is named schema.object and fingerprinted by catalog.schema.fingerprint."""
    builtin = tables()
    assert builtin.name == "mz_catalog.mz_tables"
    assert builtin.fingerprint == fingerprint(TABLES_V1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("schema_name", "mz.catalog"),
        ("schema_name", ""),
        ("object_name", "mz tables"),
        ("kind", "tabel"),
        ("global_id", ""),
        ("global_id", "s 1"),
        ("retain_data", "yes"),
        ("schema", "not a schema"),
    ],
)
def test_builtin_rejects_invalid_fields(field: str, value: object) -> None:
    """Every field is validated on construction; the error names the field."""
    arguments: dict[str, object] = {
        "schema_name": "mz_catalog",
        "object_name": "mz_tables",
        "kind": "table",
        "global_id": "s1",
        "schema": TABLES_V1,
        field: value,
    }
    with pytest.raises(ReleaseError) as info:
        Builtin(**arguments)  # type: ignore[arg-type]
    assert info.value.details["field"] == field


def test_builtin_rejects_empty_schema_and_repeated_names() -> None:
    """A builtin needs at least one column and unique top-level names."""
    with pytest.raises(ReleaseError):
        tables(pa.schema([]))
    with pytest.raises(ReleaseError) as info:
        tables(pa.schema([col("a"), col("a")]))
    assert info.value.details["duplicates"] == ["a"]


def test_known_kinds() -> None:
    """The documented kinds are accepted."""
    for kind in cr.KINDS:
        assert Builtin("mz_catalog", "x", kind, "s1", TABLES_V1).kind == kind


def test_migration_accepts_mechanism_names() -> None:
    """Mechanisms may be given by value ('evolution') as well as by member."""
    assert Migration("0.2.0", "mz_catalog", "mz_tables", "table", "replacement").mechanism is REPL


def test_migration_rejects_unknown_mechanism() -> None:
    """An unknown mechanism name is a ReleaseError naming the field."""
    with pytest.raises(ReleaseError) as info:
        Migration("0.2.0", "mz_catalog", "mz_tables", "table", "truncate")
    assert info.value.details["field"] == "mechanism"


def test_rewrite_requires_a_callable_transform() -> None:
    """REWRITE without a transform (or with a non-callable one) cannot be declared."""
    with pytest.raises(ReleaseError) as info:
        Migration("0.2.0", "mz_catalog", "mz_tables", "table", REWR)
    assert info.value.details["field"] == "transform"
    with pytest.raises(ReleaseError):
        Migration("0.2.0", "mz_catalog", "mz_tables", "table", REWR, transform="f")  # type: ignore[arg-type]


@pytest.mark.parametrize("mechanism", [EVO, REPL])
def test_only_rewrite_takes_a_transform(mechanism: Mechanism) -> None:
    """Evolution and replacement never transform data, so a transform there is a mistake."""
    with pytest.raises(ReleaseError) as info:
        Migration("0.2.0", "mz_catalog", "mz_tables", "table", mechanism, transform=identity)
    assert info.value.details["field"] == "transform"


def test_migration_equality_ignores_the_transform_function() -> None:
    """Instructions compare by what they declare: the same rewrite loaded twice is equal."""
    a = Migration("0.2.0", "mz_catalog", "mz_tables", "table", REWR, transform=identity)
    b = Migration("0.2.0", "mz_catalog", "mz_tables", "table", REWR, transform=lambda b: b)
    assert a == b
    assert hash(a) == hash(b)


def test_release_converts_lists_to_tuples_and_is_frozen() -> None:
    """Releases hold tuples and cannot be mutated."""
    release = rel("0.1.0", [tables()], [])
    assert isinstance(release.builtins, tuple)
    assert isinstance(release.migrations, tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        release.version = Version(0, 2, 0)  # type: ignore[misc]


def test_release_rejects_duplicate_global_ids() -> None:
    """Two builtins with one GlobalId: the error names the id."""
    with pytest.raises(ReleaseError) as info:
        rel("0.1.0", [tables(), Builtin("mz_catalog", "mz_views", "table", "s1", TABLES_V1)])
    assert info.value.details["field"] == "global_id"
    assert info.value.details["value"] == "s1"


def test_release_rejects_duplicate_names() -> None:
    """Two builtins with one schema.object name: the error names it."""
    with pytest.raises(ReleaseError) as info:
        rel("0.1.0", [tables(), Builtin("mz_catalog", "mz_tables", "view", "s9", TABLES_V1)])
    assert info.value.details["field"] == "name"
    assert info.value.details["value"] == "mz_catalog.mz_tables"


def test_release_rejects_instructions_newer_than_itself() -> None:
    """A release cannot carry an instruction of a later version."""
    with pytest.raises(ReleaseError) as info:
        rel("0.2.0", [tables(TABLES_V2)], [instr("0.3.0")])
    assert info.value.details["field"] == "migrations"


def test_release_rejects_two_instructions_for_one_collection_at_one_version() -> None:
    """One collection gets at most one instruction per version."""
    with pytest.raises(ReleaseError) as info:
        rel("0.2.0", [tables(TABLES_V2)], [instr("0.2.0"), instr("0.2.0", REPL)])
    assert info.value.details["collection"] == "mz_catalog.mz_tables"


@pytest.mark.parametrize(
    ("builtins", "migrations"),
    [("mz_tables", []), ([TABLES_V1], []), ([], [tables()])],
)
def test_release_rejects_wrong_element_types(builtins: object, migrations: object) -> None:
    """Builtins and migrations must be lists of Builtin and Migration."""
    with pytest.raises(ReleaseError):
        Release("0.1.0", builtins, migrations)  # type: ignore[arg-type]


# --- loading ----------------------------------------------------------------------------------

RELEASE_FILE = """
    import pyarrow as pa
    from catalog.release import Builtin, Release

    SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False)])
    RELEASE = Release("0.1.0", [Builtin("mz_catalog", "mz_tables", "table", "s1", SCHEMA)])
    OTHER = Release("0.2.0", [Builtin("mz_catalog", "mz_tables", "table", "s1", SCHEMA)])
    NOT_A_RELEASE = 42
"""


def test_load_release_by_file_path(tmp_path: Path) -> None:
    """A file path loads its RELEASE attribute; FILE.py:ATTR picks another one."""
    path = write(tmp_path / "rel.py", RELEASE_FILE)
    assert load_release(path).version == Version(0, 1, 0)
    assert load_release(f"{path}:OTHER").version == Version(0, 2, 0)


def test_load_release_by_module_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """package.module:ATTR imports the module and takes the attribute."""
    write(tmp_path / "relpkg" / "__init__.py", "")
    write(tmp_path / "relpkg" / "current.py", RELEASE_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "relpkg", raising=False)
    monkeypatch.delitem(sys.modules, "relpkg.current", raising=False)
    assert load_release("relpkg.current:OTHER").version == Version(0, 2, 0)
    assert load_release("relpkg.current").version == Version(0, 1, 0)


def test_load_release_file_with_sibling_imports() -> None:
    """A release file importing its predecessor and helpers loads, and leaves no modules behind."""
    release = load_release(EXAMPLE / "v0_11_0.py")
    assert release.version == Version(0, 11, 0)
    assert not {"_schemas", "_transforms", "v0_10_0", "v0_11_0"} & set(sys.modules)


def test_load_release_missing_file(tmp_path: Path) -> None:
    """A missing file is a ReleaseError naming the path."""
    with pytest.raises(ReleaseError) as info:
        load_release(tmp_path / "nope.py")
    assert info.value.details["path"] == str(tmp_path / "nope.py")


def test_load_release_missing_module() -> None:
    """A module reference that does not import is a ReleaseError naming the module."""
    with pytest.raises(ReleaseError) as info:
        load_release("no_such_release_pkg.mod:RELEASE")
    assert info.value.details["module"] == "no_such_release_pkg.mod"


def test_load_release_syntax_error_reports_line(tmp_path: Path) -> None:
    """A syntax error names the file and the line."""
    path = write(tmp_path / "bad.py", "import pyarrow\n\nRELEASE = Release(\n")
    with pytest.raises(ReleaseError) as info:
        load_release(path)
    assert info.value.details["path"] == str(path.resolve())
    assert info.value.details["line"] == 3


def test_load_release_invalid_release_reports_file_and_line(tmp_path: Path) -> None:
    """An invalid Release inside the file names the file, the line and the offending field."""
    path = write(
        tmp_path / "dup.py",
        """
        import pyarrow as pa
        from catalog.release import Builtin, Release

        S = pa.schema([pa.field("id", pa.string())])
        RELEASE = Release(
            "0.1.0",
            [
                Builtin("mz_catalog", "a", "table", "s1", S),
                Builtin("mz_catalog", "b", "table", "s1", S),
            ],
        )
        """,
    )
    with pytest.raises(ReleaseError) as info:
        load_release(path)
    assert info.value.details["path"] == str(path.resolve())
    assert info.value.details["line"] == 6
    assert info.value.details["field"] == "global_id"


def test_load_release_exception_while_importing(tmp_path: Path) -> None:
    """Any exception a release file raises becomes a ReleaseError naming it (never a traceback)."""
    path = write(tmp_path / "boom.py", "RELEASE = undefined_name\n")
    with pytest.raises(ReleaseError) as info:
        load_release(path)
    assert info.value.details["error"] == "NameError"
    assert info.value.details["line"] == 1


@pytest.mark.parametrize("attribute", ["MISSING", "NOT_A_RELEASE"])
def test_load_release_missing_or_wrong_attribute(tmp_path: Path, attribute: str) -> None:
    """A missing attribute, or one that is not a Release, is a ReleaseError naming it."""
    path = write(tmp_path / "rel.py", RELEASE_FILE)
    with pytest.raises(ReleaseError) as info:
        load_release(f"{path}:{attribute}")
    assert info.value.details["attribute"] == attribute


def test_load_release_dir_sorts_by_version_and_skips_helpers() -> None:
    """The example directory loads sorted by version; _-prefixed helpers are not releases."""
    releases = load_release_dir(EXAMPLE)
    versions = [r.version for r in releases]
    assert versions == sorted(versions)
    assert str(versions[0]) == "0.10.0"
    assert len(releases) == len(list(EXAMPLE.glob("v*.py")))


def test_load_release_dir_rejects_duplicate_versions(tmp_path: Path) -> None:
    """Two files declaring one version: load error naming both files."""
    write(tmp_path / "a.py", RELEASE_FILE)
    write(tmp_path / "b.py", RELEASE_FILE)
    with pytest.raises(ReleaseError) as info:
        load_release_dir(tmp_path)
    assert info.value.details["version"] == "0.1.0"
    assert len(info.value.details["files"]) == 2


def test_load_release_dir_requires_release_in_every_release_file(tmp_path: Path) -> None:
    """A non-helper file without RELEASE is an error (a typo must not drop a release silently)."""
    write(tmp_path / "a.py", RELEASE_FILE)
    write(tmp_path / "b.py", "RELAESE = None\n")
    with pytest.raises(ReleaseError) as info:
        load_release_dir(tmp_path)
    assert info.value.details["attribute"] == "RELEASE"


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_load_release_dir_missing_or_empty(tmp_path: Path, make: object) -> None:
    """A missing directory, or one without release files, is a ReleaseError."""
    with pytest.raises(ReleaseError):
        load_release_dir(make(tmp_path))  # type: ignore[operator]


def test_directories_with_the_same_module_names_do_not_interfere() -> None:
    """Two histories both holding v0_1_0.py and v0_2_0.py each load their own files."""
    first = load_release_dir(BROKEN / "missing_instruction")
    second = load_release_dir(BROKEN / "unknown_builtin")
    assert {b.name for b in first[0].builtins} == {"mz_catalog.mz_tables", "mz_catalog.mz_roles"}
    assert {b.name for b in second[0].builtins} == {"mz_catalog.mz_tables"}


# --- fingerprints -----------------------------------------------------------------------------


def test_metadata_noise_is_not_a_schema_change() -> None:
    """Schema metadata does not change the fingerprint, so no instruction is needed."""
    noisy = TABLES_V1.with_metadata({"comment": "cosmetic"})
    result = plan(rel("0.1.0", [tables()]), rel("0.2.0", [tables(noisy)]))
    assert result.is_empty


@pytest.mark.parametrize(
    "changed",
    [
        pa.schema([nn("id", pa.string()), nn("name", pa.string())]),  # nullability
        pa.schema([col("name"), nn("id", pa.string())]),  # order
        pa.schema([nn("id", pa.string()), col("title")]),  # name
        pa.schema([nn("id", pa.string()), col("name", pa.large_string())]),  # type
    ],
)
def test_any_canonical_change_without_instruction_is_refused(changed: pa.Schema) -> None:
    """Order, names, types and nullability all change the fingerprint."""
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [tables()]), rel("0.2.0", [tables(changed)]))
    assert info.value.details["collections"] == ["mz_catalog.mz_tables"]


# --- plan rules -------------------------------------------------------------------------------


def test_plan_takes_instructions_in_the_half_open_range() -> None:
    """Instructions with from < version <= to are planned; the one at `from` is not."""
    v1 = rel("0.1.0", [tables()])
    v2 = rel("0.2.0", [tables(TABLES_V2)], [instr("0.2.0")])
    v3 = rel("0.3.0", [tables(TABLES_V3)], [instr("0.2.0"), instr("0.3.0")])
    assert [str(m.version) for m in plan(v1, v3).migrations[0].instructions] == ["0.2.0", "0.3.0"]
    assert [str(m.version) for m in plan(v2, v3).migrations[0].instructions] == ["0.3.0"]
    assert [str(m.version) for m in plan(v1, v2).migrations[0].instructions] == ["0.2.0"]


@pytest.mark.parametrize(
    ("mechanisms", "winner"),
    [
        ([EVO, EVO], EVO),
        ([EVO, REPL], REPL),
        ([REPL, EVO], REPL),
        ([REPL, REWR], REPL),
        ([REWR, REPL], REPL),
        ([REWR, EVO], REWR),
        ([REWR, REWR], REWR),
    ],
)
def test_plan_mechanism_precedence(mechanisms: list[Mechanism], winner: Mechanism) -> None:
    """replacement > rewrite > evolution, whatever the order of the instructions: a replacement
    anywhere in the path discards what came before it, and on a jump nothing was written
    between it and a later rewrite."""
    v1 = rel("0.1.0", [tables()])
    migrations = [instr(f"0.{i + 2}.0", m) for i, m in enumerate(mechanisms)]
    target = rel(f"0.{len(mechanisms) + 1}.0", [tables(TABLES_V3)], migrations)
    planned = plan(v1, target).migrations
    assert [(p.name, p.mechanism) for p in planned] == [("mz_catalog.mz_tables", winner)]
    assert planned[0].instructions == tuple(migrations)


def test_plan_names_every_builtin_changed_without_instruction() -> None:
    """All changed builtins without instruction are named in one PlanError."""
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [tables(), roles()]), rel("0.2.0", [tables(TABLES_V2), roles(ROLES_V2)]))
    assert info.value.details["reason"] == "missing-instruction"
    assert sorted(info.value.details["collections"]) == [
        "mz_catalog.mz_roles",
        "mz_catalog.mz_tables",
    ]


def test_plan_checks_evolutions_against_the_schema_they_come_from() -> None:
    """An evolution that changes a type is refused with rule, collection and versions."""
    with pytest.raises(SchemaIncompatibleError) as info:
        plan(
            rel("0.1.0", [roles()]),
            rel("0.2.0", [roles(ROLES_V2)], [instr("0.2.0", EVO, "mz_roles")]),
        )
    error = info.value
    assert error.rule == "type-changed"
    assert error.path == "id"
    assert error.details["collection"] == "mz_catalog.mz_roles"
    assert (error.details["from_version"], error.details["to_version"]) == ("0.1.0", "0.2.0")


def test_plan_from_catalog_state_checks_the_stored_history() -> None:
    """With the shard's migration type, re-adding a deleted field is refused (field-readded)."""
    dropped = pa.schema([nn("id", pa.string())])
    history = evolve(migration_type(TABLES_V1), dropped)  # 'name' is a tombstone now
    state = CollectionState("s1", "mz_catalog.mz_tables", fingerprint(dropped), dropped, history)
    target = rel("0.3.0", [tables(TABLES_V1)], [instr("0.3.0")])
    with pytest.raises(SchemaIncompatibleError) as info:
        plan(CatalogSnapshot("0.2.0", [state]), target)
    assert info.value.rule == "field-readded"
    # Without the history the same schemas look like a plain addition.
    plain = CatalogSnapshot(
        "0.2.0", [CollectionState("s1", state.name, state.fingerprint, dropped)]
    )
    assert plan(plain, target).migrations[0].mechanism is EVO


def test_plan_from_catalog_state_uses_stored_fingerprints() -> None:
    """A stored fingerprint that differs from the release's, without instruction, is refused."""
    state = CollectionState("s1", "mz_catalog.mz_tables", "0" * 64, TABLES_V1)
    with pytest.raises(PlanError) as info:
        plan(CatalogSnapshot("0.1.0", [state]), rel("0.2.0", [tables()]))
    assert info.value.details["collections"] == ["mz_catalog.mz_tables"]


@pytest.mark.parametrize("mechanism", [REPL, REWR])
def test_replacement_and_rewrite_allow_incompatible_schemas(mechanism: Mechanism) -> None:
    """A new shard takes any schema: no evolution check for replacement or rewrite."""
    target = rel("0.2.0", [roles(ROLES_V2)], [instr("0.2.0", mechanism, "mz_roles")])
    planned = plan(rel("0.1.0", [roles()]), target).migrations[0]
    assert planned.mechanism is mechanism
    assert planned.diff.changed == ("id",)


@pytest.mark.parametrize("mechanisms", [[REPL], [EVO, REPL]])
def test_retain_data_builtins_are_never_replaced(mechanisms: list[Mechanism]) -> None:
    """A retain_data builtin whose merged mechanism is replacement is refused."""
    migrations = [instr(f"0.{i + 2}.0", m, "mz_roles") for i, m in enumerate(mechanisms)]
    target = rel(f"0.{len(mechanisms) + 1}.0", [roles(ROLES_V2, retain_data=True)], migrations)
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [roles(retain_data=True)]), target)
    assert info.value.details["reason"] == "retain-data-replaced"
    assert info.value.details["collections"] == ["mz_catalog.mz_roles"]


def test_retain_data_builtins_may_be_rewritten() -> None:
    """Rewrite keeps the data, so it is allowed; a replacement anywhere on the path is not
    (it discards what came before it, and wins the merge)."""
    target = rel("0.3.0", [roles(ROLES_V2, retain_data=True)], [instr("0.3.0", REWR, "mz_roles")])
    planned = plan(rel("0.1.0", [roles(retain_data=True)]), target).migrations[0]
    assert planned.mechanism is REWR
    assert planned.transforms == (identity,)
    migrations = [instr("0.2.0", REPL, "mz_roles"), instr("0.3.0", REWR, "mz_roles")]
    target = rel("0.3.0", [roles(ROLES_V2, retain_data=True)], migrations)
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [roles(retain_data=True)]), target)
    assert info.value.details["reason"] == "retain-data-replaced"


def test_plan_rejects_instructions_naming_unknown_builtins() -> None:
    """An instruction of the target release naming no builtin of it is refused."""
    target = rel("0.2.0", [tables()], [instr("0.2.0", EVO, "mz_tabels")])
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [tables()]), target)
    assert info.value.details["reason"] == "unknown-builtin"
    assert info.value.details["collections"] == ["mz_catalog.mz_tabels"]


def test_plan_rejects_instructions_with_the_wrong_kind() -> None:
    """An instruction names (schema, object, kind): a kind mismatch is an unknown builtin."""
    target = rel("0.2.0", [tables(TABLES_V2)], [instr("0.2.0", kind="source")])
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [tables()]), target)
    assert info.value.details["reason"] == "unknown-builtin"


def test_plan_ignores_instructions_for_builtins_that_came_and_went() -> None:
    """An older instruction for a builtin added and removed between from and to is moot."""
    migration = Migration("0.2.0", "mz_catalog", "mz_views", "view", EVO)
    target = rel("0.3.0", [tables()], [migration])
    assert plan(rel("0.1.0", [tables()]), target).is_empty


def test_plan_refuses_downgrades() -> None:
    """to < from is refused with reason downgrade."""
    with pytest.raises(PlanError) as info:
        plan(rel("0.2.0", [tables()]), rel("0.1.0", [tables()]))
    assert info.value.details["reason"] == "downgrade"


def test_plan_to_the_same_version_is_empty() -> None:
    """Restarting the release the catalog is at plans nothing."""
    release = rel("0.2.0", [tables(TABLES_V2)], [instr("0.2.0")])
    result = plan(release, release)
    assert result.is_empty
    assert result.from_version == result.to_version


def test_plan_lists_new_and_removed_builtins() -> None:
    """Builtins without a collection are new (no shard yet); collections gone are removed."""
    result = plan(rel("0.1.0", [tables()]), rel("0.2.0", [roles()]))
    assert [b.name for b in result.new_builtins] == ["mz_catalog.mz_roles"]
    assert [c.name for c in result.removed_builtins] == ["mz_catalog.mz_tables"]
    assert result.migrations == ()


def test_plan_instructions_for_new_builtins_are_moot() -> None:
    """A builtin added after `from` is created at its latest schema; its instructions don't run."""
    v1 = rel("0.1.0", [tables()])
    v3 = rel("0.3.0", [tables(), roles(ROLES_V2)], [instr("0.3.0", REPL, "mz_roles")])
    result = plan(v1, v3)
    assert [b.name for b in result.new_builtins] == ["mz_catalog.mz_roles"]
    assert result.migrations == ()


def test_plan_refuses_a_reassigned_global_id() -> None:
    """A GlobalId that names another builtin than before is refused."""
    other = Builtin("mz_catalog", "mz_views", "table", "s1", TABLES_V1)
    with pytest.raises(PlanError) as info:
        plan(rel("0.1.0", [tables()]), rel("0.2.0", [other]))
    assert info.value.details["reason"] == "global-id-reassigned"


def test_plan_diff_lists_added_dropped_and_relaxed_paths() -> None:
    """The per-collection diff shows dotted paths added, dropped and made nullable."""
    old = pa.schema([nn("id", pa.string()), nn("n", pa.int32()), col("gone")])
    new = pa.schema([nn("id", pa.string()), col("n", pa.int32()), col("extra")])
    result = plan(rel("0.1.0", [tables(old)]), rel("0.2.0", [tables(new)], [instr("0.2.0")]))
    diff = result.migrations[0].diff
    assert (diff.added, diff.dropped, diff.relaxed) == (("extra",), ("gone",), ("n",))


def test_plan_to_json_shape() -> None:
    """plan.to_json has from/to, migrations with instructions and diff, new and removed lists."""
    result = plan(
        rel("0.1.0", [tables()]), rel("0.2.0", [tables(TABLES_V2), roles()], [instr("0.2.0")])
    )
    document = result.to_json()
    assert document["from"] == "0.1.0"
    assert document["to"] == "0.2.0"
    [migration] = document["migrations"]
    assert migration["mechanism"] == "evolution"
    assert migration["instructions"] == [
        {"version": "0.2.0", "mechanism": "evolution", "kind": "table"}
    ]
    assert migration["diff"]["added"] == ["owner"]
    assert document["new_builtins"] == [
        {"global_id": "s2", "name": "mz_catalog.mz_roles", "kind": "table"}
    ]
    assert document["removed_builtins"] == []


def test_plan_path_checks_the_history_walked_through_earlier_releases() -> None:
    """plan_path sees a field deleted two releases before `from`; plain plan cannot."""
    releases = load_release_dir(BROKEN / "readded_field")
    v3, v4 = releases[2], releases[3]
    assert plan(v3, v4).migrations[0].mechanism is EVO  # no history: looks like an addition
    with pytest.raises(SchemaIncompatibleError) as info:
        plan_path(releases, "0.3.0", "0.4.0")
    assert info.value.rule == "field-readded"
    assert info.value.details["collection"] == "mz_catalog.mz_sources"


def test_snapshot_at_restarts_history_on_replacement() -> None:
    """A replacement creates a new shard: its history starts from the new schema."""
    v1 = rel("0.1.0", [tables(TABLES_V2)])
    v2 = rel("0.2.0", [tables(TABLES_V1)], [instr("0.2.0", EVO)])
    v3 = rel("0.3.0", [tables(TABLES_V1)], [instr("0.2.0", EVO), instr("0.3.0", REPL)])
    [evolved] = snapshot_at([v1, v2, v3], "0.2.0").collections
    [replaced] = snapshot_at([v1, v2, v3], "0.3.0").collections
    assert evolved.history is not None and "owner" in evolved.history.names
    assert replaced.history is not None and "owner" not in replaced.history.names


# --- validate ---------------------------------------------------------------------------------


def test_example_history_validates_cleanly() -> None:
    """Every upgrade path of scenarios/releases works."""
    releases = load_release_dir(EXAMPLE)
    report = validate(releases)
    assert report.ok, [f.to_json() for f in report.failures]
    assert report.paths_checked == len(releases) * (len(releases) - 1) // 2


BROKEN_CASES = [
    (
        "missing_instruction",
        ("0.1.0", "0.2.0"),
        "missing-instruction",
        "mz_catalog.mz_tables",
        None,
    ),
    (
        "incompatible_evolution",
        ("0.1.0", "0.2.0"),
        "incompatible-evolution",
        "mz_catalog.mz_tables",
        "type-changed",
    ),
    (
        "readded_field",
        ("0.3.0", "0.4.0"),
        "incompatible-evolution",
        "mz_catalog.mz_sources",
        "field-readded",
    ),
    (
        "removed_instruction",
        ("0.2.0", "0.3.0"),
        "instruction-removed",
        "mz_catalog.mz_tables",
        None,
    ),
    ("backport_not_carried_forward", ("0.1.1", "0.2.0"), "backport", "mz_catalog.mz_tables", None),
    (
        "retain_data_replaced",
        ("0.1.0", "0.2.0"),
        "retain-data-replaced",
        "mz_internal.mz_session_history",
        None,
    ),
    ("unknown_builtin", ("0.1.0", "0.2.0"), "unknown-builtin", "mz_catalog.mz_tabels", None),
]


@pytest.mark.parametrize(
    ("case", "path", "reason", "collection", "rule"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES]
)
def test_validate_reports_each_broken_history(
    case: str, path: tuple[str, str], reason: str, collection: str, rule: str | None
) -> None:
    """Each deliberately broken history fails on its path with its reason and culprit."""
    report = validate(load_release_dir(BROKEN / case))
    assert not report.ok
    found = {
        (str(f.from_version), str(f.to_version), f.reason, f.collection, f.rule)
        for f in report.failures
    }
    assert (*path, reason, collection, rule) in found


def test_validate_separates_backports_from_removals() -> None:
    """A patch-line instruction missing from a later minor release is a backport, not a removal."""
    report = validate(load_release_dir(BROKEN / "backport_not_carried_forward"))
    assert "instruction-removed" not in {f.reason for f in report.failures}
    assert report.failing_paths() == [(Version(0, 1, 1), Version(0, 2, 0))]


def test_validate_readded_field_needs_the_walked_history() -> None:
    """0.3.0 -> 0.4.0 fails only because 0.2.0 deleted the field: the history was walked."""
    report = validate(load_release_dir(BROKEN / "readded_field"))
    readded = {
        (str(f.from_version), str(f.to_version))
        for f in report.failures
        if f.rule == "field-readded"
    }
    assert readded == {("0.2.0", "0.4.0"), ("0.3.0", "0.4.0")}


def test_duplicate_global_id_history_is_a_load_error() -> None:
    """A release with a duplicated GlobalId cannot be loaded (exit 2), naming the id."""
    with pytest.raises(ReleaseError) as info:
        load_release_dir(BROKEN / "duplicate_global_id")
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert info.value.details["value"] == "s1"


def test_validate_rejects_duplicate_versions() -> None:
    """Two releases at one version cannot be validated."""
    with pytest.raises(ReleaseError):
        validate([rel("0.1.0", [tables()]), rel("0.1.0", [tables()])])


def test_validate_one_release_checks_no_paths() -> None:
    """A single release has no upgrade path to check."""
    report = validate([rel("0.1.0", [tables()])])
    assert report.ok
    assert report.paths_checked == 0


def test_validation_report_json_shape() -> None:
    """The report JSON lists each failure with from, to, reason, collection and message."""
    report = validate(load_release_dir(BROKEN / "incompatible_evolution"))
    document = report.to_json()
    assert document["ok"] is False
    assert document["paths_checked"] == 1
    [failure] = document["failures"]
    assert failure["from"] == "0.1.0"
    assert failure["to"] == "0.2.0"
    assert failure["reason"] == "incompatible-evolution"
    assert failure["collection"] == "mz_catalog.mz_tables"
    assert failure["rule"] == "type-changed"
    assert failure["message"]


# --- the example history ----------------------------------------------------------------------


def _types(dtype: pa.DataType) -> set[str]:
    if pa.types.is_struct(dtype):
        return {"struct"}.union(*(_types(dtype.field(i).type) for i in range(dtype.num_fields)))
    if pa.types.is_list(dtype):
        return {"list"} | _types(dtype.value_type)
    if pa.types.is_map(dtype):
        return {"map"} | _types(dtype.item_type)
    return set()


def test_example_history_covers_what_the_scenarios_need() -> None:
    """>= 8 releases with a patch line, >= 30 builtins in >= 3 schemas, nested types, every
    mechanism, a retain_data builtin, and builtins added and removed over time."""
    releases = load_release_dir(EXAMPLE)
    assert len(releases) >= 8
    assert any(r.version.is_patch for r in releases)
    assert max(len(r.builtins) for r in releases) >= 30
    assert len({b.schema_name for b in releases[-1].builtins}) >= 3
    nested = set().union(*(_types(f.type) for b in releases[-1].builtins for f in b.schema))
    assert {"struct", "list", "map"} <= nested
    assert {m.mechanism for m in releases[-1].migrations} == set(Mechanism)
    assert any(b.retain_data for b in releases[-1].builtins)
    ids = [{b.global_id for b in r.builtins} for r in releases]
    assert any(after - before for before, after in itertools.pairwise(ids))
    assert any(before - after for before, after in itertools.pairwise(ids))


def test_example_first_upgrade_has_every_mechanism() -> None:
    """0.10.0 -> 0.11.0 (the demo's path) evolves with a visible change, replaces and rewrites."""
    releases = load_release_dir(EXAMPLE)
    result = plan_path(releases, "0.10.0", "0.11.0")
    by_mechanism = {m.mechanism: m for m in result.migrations}
    assert set(by_mechanism) == set(Mechanism)
    assert any(m.diff.added for m in result.migrations if m.mechanism is EVO)


def test_example_rewrite_transforms_produce_the_new_schema() -> None:
    """Every REWRITE transform of the example maps a batch of the old schema to the new one."""
    releases = load_release_dir(EXAMPLE)
    for before, after in itertools.pairwise(releases):
        for migration in plan(before, after).migrations:
            if migration.mechanism is not REWR:
                continue
            batch = pa.RecordBatch.from_pylist([], schema=migration.old_schema)
            for transform in migration.transforms:
                batch = transform(batch)
            assert batch.schema.equals(migration.new_schema), migration.name


def test_example_role_id_rewrite_transforms_values() -> None:
    """The 0.11.0 rewrite turns numeric role ids into 'u<n>' and keeps the other columns."""
    result = plan_path(load_release_dir(EXAMPLE), "0.10.0", "0.11.0")
    roles_migration = result.get("mz_catalog.mz_roles")
    assert roles_migration is not None
    old = pa.RecordBatch.from_pylist(
        [{"id": 7, "oid": 1, "name": "alice", "inherit": True, "vars": None}],
        schema=roles_migration.old_schema,
    )
    [transform] = roles_migration.transforms
    new = transform(old)
    assert new.column("id").to_pylist() == ["u7"]
    assert new.column("name").to_pylist() == ["alice"]


# --- a builtin that changes kind or name (a conversion) ---------------------------------------


def kafka(kind: str, schema: pa.Schema = TABLES_V1, name: str = "mz_kafka_sources") -> Builtin:
    return Builtin("mz_catalog", name, kind, "s9", schema)


def kafka_step(version: str, kind: str, mechanism: Mechanism = EVO, **more: object) -> Migration:
    return Migration(version, "mz_catalog", "mz_kafka_sources", kind, mechanism, **more)  # type: ignore[arg-type]


def converted_history(drop_old: bool = True, at: str = "0.3.0") -> list[Release]:
    """Materialize's 26.34: a builtin table evolved at 0.2.0 becomes a materialized view at
    ``at`` by a conversion replacement; the release drops the table's step (``drop_old``)."""
    evolved = kafka_step("0.2.0", "table")
    conversion = kafka_step(at, "materialized-view", REPL, former_kind="table")
    return [
        rel("0.1.0", [kafka("table")]),
        rel("0.2.0", [kafka("table", TABLES_V2)], [evolved]),
        rel("0.3.0", [kafka("materialized-view", TABLES_V2)],
            [conversion] if drop_old else [evolved, conversion]),
    ]  # fmt: skip


def test_a_conversion_subsumes_the_steps_of_the_former_description() -> None:
    """Materialize's rule: the steps naming the table are removed and a replacement of the
    view is added at the conversion version; every path plans a replacement."""
    history = converted_history()
    assert validate(history).ok
    for source in history[:2]:
        (planned,) = plan(source, history[2]).migrations
        assert planned.mechanism is REPL


def test_the_unsafe_forms_of_a_conversion_are_refused() -> None:
    """Keeping the table's step names no builtin; dropping it without a conversion, or a
    conversion older than the step it drops, is a removal; a conversion is a replacement."""
    kept = validate(converted_history(drop_old=False))
    assert {f.reason for f in kept.failures} == {"unknown-builtin"}
    plain = converted_history()
    plain[2] = rel("0.3.0", plain[2].builtins, [kafka_step("0.3.0", "materialized-view", REPL)])
    assert "instruction-removed" in {f.reason for f in validate(plain).failures}
    early = converted_history(at="0.1.5")
    early.insert(1, rel("0.1.5", [kafka("table")]))
    assert "instruction-removed" in {f.reason for f in validate(early).failures}
    with pytest.raises(ReleaseError, match="must be a replacement"):
        kafka_step("0.3.0", "materialized-view", EVO, former_kind="table")
    with pytest.raises(ReleaseError, match="from its own description"):
        kafka_step("0.3.0", "table", REPL, former_kind="table")


def test_a_renamed_builtin_keeps_its_global_id_through_a_conversion() -> None:
    """A builtin renamed at 0.2.0 by a conversion plans a replacement; without the conversion
    the same rename is a GlobalId reassigned."""
    old = rel("0.1.0", [kafka("table")])
    renamed = Migration("0.2.0", "mz_internal", "mz_kafka", "table", REPL,
                        former_name="mz_catalog.mz_kafka_sources")  # fmt: skip
    new_builtin = Builtin("mz_internal", "mz_kafka", "table", "s9", TABLES_V1)
    (planned,) = plan(old, rel("0.2.0", [new_builtin], [renamed])).migrations
    assert planned.mechanism is REPL
    with pytest.raises(PlanError) as refused:
        plan(old, rel("0.2.0", [new_builtin]))
    assert refused.value.details["reason"] == "global-id-reassigned"
