"""Change levels (pure logic): what each kind of change requires of a release's number, and the
``version-bump`` finding of a release numbered below it."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from catalog.release import Builtin, Mechanism, Migration, Release, validate
from catalog.release.levels import Level, declared_level, path_level
from catalog.release.version import Version
from catalog.schema.ids import renamed

V1 = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int32())])


def tables(schema: pa.Schema = V1) -> Builtin:
    return Builtin("mz_catalog", "mz_tables", "table", "s1", schema)


def roles() -> Builtin:
    return Builtin("mz_catalog", "mz_roles", "table", "s2", pa.schema([pa.field("id", pa.int64())]))


def step(
    to: str, builtins: Sequence[Builtin], mechanism: Mechanism | None = None, base: str = "1.0.0"
) -> tuple[Level, Level, str | None]:
    """(declared, required, the reason) of ``to`` after a ``base`` holding ``tables()`` and
    ``roles()``; ``mechanism`` is ``to``'s instruction for mz_tables."""
    migrations = []
    if mechanism is not None:
        transform = (lambda b: b) if mechanism is Mechanism.REWRITE else None
        migrations.append(
            Migration(to, "mz_catalog", "mz_tables", "table", mechanism, transform=transform)
        )
    releases = [Release(base, [tables(), roles()], []), Release(to, builtins, migrations)]
    level = path_level(releases, base, to)
    reason = level.reason()
    return level.declared, level.required, None if reason is None else reason.what


def test_each_change_requires_its_level() -> None:
    added = V1.append(pa.field("comment", pa.string()))
    widened = pa.schema([V1.field("id"), pa.field("n", pa.int64())])
    relaxed = pa.schema([pa.field("id", pa.string()), V1.field("n")])
    moved = pa.schema([V1.field("id"), renamed(pa.field("count", pa.int32()), "n")])
    dropped = pa.schema([V1.field("id")])
    evo = Mechanism.EVOLUTION
    assert step("1.0.1", [tables(), roles()]) == (Level.PATCH, Level.PATCH, None)
    assert step("1.1.0", [tables(added), roles()], evo)[1:] == (Level.MINOR, "field comment added")
    assert step("1.1.0", [tables(widened), roles()], evo)[1:] == (Level.MINOR, "field n widened")
    assert step("1.1.0", [tables(relaxed), roles()], evo)[1] is Level.MINOR
    assert step("1.1.0", [tables(), roles(), Builtin("a", "b", "table", "s3", V1)])[1:] == (
        Level.MINOR, "builtin added",
    )  # fmt: skip
    assert step("2.0.0", [tables(moved), roles()], evo)[1:] == (
        Level.MAJOR, "field n renamed to count",
    )  # fmt: skip
    assert step("2.0.0", [tables(dropped), roles()], evo)[1:] == (Level.MAJOR, "field n deleted")
    assert step("2.0.0", [tables(), roles()], Mechanism.REWRITE)[1:] == (Level.MAJOR, "rewrite")
    assert step("2.0.0", [tables(added), roles()], Mechanism.REPLACEMENT)[1:] == (
        Level.MAJOR, "replacement",
    )  # fmt: skip
    assert step("2.0.0", [tables()])[1:] == (Level.MAJOR, "builtin removed")


@pytest.mark.parametrize(
    ("base", "version", "declared"),
    [
        ("1.0.0", "1.0.1", Level.PATCH),
        ("1.0.3", "1.1.0", Level.MINOR),
        ("1.9.0", "2.0.0", Level.MAJOR),
        ("0.10.3", "0.11.0", Level.MAJOR),  # below 1.0.0 the minor component is the major line
        ("0.11.0", "0.11.1", Level.PATCH),
        ("1.0.0", "2.0.0-rc.1", Level.MAJOR),
    ],
)
def test_the_declared_level_is_the_first_component_that_moved(
    base: str, version: str, declared: Level
) -> None:
    assert declared_level(Version.parse(base), Version.parse(version)) is declared


def test_validate_finds_an_understated_release_and_judges_candidates_as_one_step() -> None:
    added = tables(V1.append(pa.field("comment", pa.string())))
    evolution = Migration("1.0.1", "mz_catalog", "mz_tables", "table", Mechanism.EVOLUTION)
    report = validate(
        [
            Release("1.0.0", [tables()], []),
            Release("1.0.1", [added], [evolution]),  # a patch that adds a field
            Release("1.1.0-rc.1", [added], [evolution]),
            Release("1.1.0", [added], [evolution]),
        ]
    )
    bumps = [f for f in report.findings() if f["category"] == "version-bump"]
    assert [b["releases"] for b in bumps] == [["1.0.0", "1.0.1"]]
    assert bumps[0]["required"] == "minor" and bumps[0]["declared"] == "patch"
    assert "1.0.1 is numbered as a patch release" in bumps[0]["message"]
    assert "field comment added" in bumps[0]["message"]
    by_version = {level.version: level for level in report.levels}
    final = by_version[Version.parse("1.1.0")]
    assert str(final.base) == "1.0.1", "a release is judged against the last lower release"
    assert str(by_version[Version.parse("1.1.0-rc.1")].base) == "1.0.1"
    assert report.ok, "a version-bump finding is not a failing path"
    narrowed = report.between(Version.parse("1.0.1"), Version.parse("1.1.0"))
    assert not [f for f in narrowed.findings() if f["category"] == "version-bump"]
