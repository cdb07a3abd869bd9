"""Change levels: what a release's schema changes ask of its version number.

A release's *required* level comes from its diff against the release before it:

* ``patch`` -- no schema change;
* ``minor`` -- only lossless expansion: a nullable field added, a field relaxed to nullable, a
  lossless widening, a builtin added;
* ``major`` -- anything else: a field deleted or renamed, a REWRITE or REPLACEMENT, a builtin
  removed or renamed, a change no evolution allows.

Its *declared* level is the first version component that moved from the release before it. Below
1.0.0 the minor component is the major line (``0.11.0`` after ``0.10.3`` is a major step, a
``0.11.1`` after it a patch), as Cargo reads 0.x versions. A prerelease is compared with the last
release of a lower ``MAJOR.MINOR.PATCH``, so a series of release candidates is judged as one step.
A release whose declared level is below its required one is a ``version-bump`` finding.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from catalog.release.loader import find_release
from catalog.release.manifest import Builtin, Mechanism, Release
from catalog.release.planning import InstructionIndex, winning_mechanism
from catalog.release.version import Version
from catalog.schema.diff import schema_diff
from catalog.schema.evolution import is_backward_compatible

__all__ = [
    "Change",
    "Level",
    "ReleaseLevel",
    "change_level",
    "declared_level",
    "path_level",
    "release_levels",
]


class Level(enum.IntEnum):
    """How much a release may change, in order."""

    PATCH = 0
    MINOR = 1
    MAJOR = 2

    def __str__(self) -> str:
        return self.name.lower()


@attrs.frozen
class Change:
    """One change between two releases and the level it requires."""

    level: Level
    collection: str
    what: str

    def __str__(self) -> str:
        return f"{self.collection}: {self.what}"


@attrs.frozen
class ReleaseLevel:
    """A release's declared and required level against the release it follows (``base``)."""

    version: Version
    base: Version
    declared: Level
    changes: tuple[Change, ...]

    @property
    def required(self) -> Level:
        return max((c.level for c in self.changes), default=Level.PATCH)

    @property
    def understated(self) -> bool:
        return self.required > self.declared

    def reason(self) -> Change | None:
        """The first change that requires the level (None for a patch)."""
        return next((c for c in self.changes if c.level == self.required), None)

    def finding(self) -> dict[str, Any]:
        """The ``version-bump`` finding of an understated release."""
        reason = self.reason()
        assert reason is not None, "only a release with changes is understated"
        return {
            "category": "version-bump",
            "rule": f"{self.required}-change-in-{self.declared}-release",
            "releases": [str(self.base), str(self.version)],
            "collection": reason.collection,
            "path": None,
            "required": str(self.required),
            "declared": str(self.declared),
            "message": (
                f"{self.version} is numbered as a {self.declared} release after {self.base}, "
                f"but {reason} requires a {self.required} release"
            ),
            "fix": f"number it as a {self.required} release, or leave the change to one",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "version": str(self.version),
            "base": str(self.base),
            "declared": str(self.declared),
            "required": str(self.required),
            "changes": [
                {"level": str(c.level), "collection": c.collection, "change": c.what}
                for c in self.changes
            ],
        }


def declared_level(base: Version, version: Version) -> Level:
    """The level ``version``'s number declares after ``base`` (0.x: minor is the major line)."""
    if version.major != base.major or (version.major == 0 and version.minor != base.minor):
        return Level.MAJOR
    if version.minor != base.minor:
        return Level.MINOR
    return Level.PATCH


def change_level(base: Release, release: Release, index: InstructionIndex) -> tuple[Change, ...]:
    """Every change from ``base`` to ``release`` with the level it requires, most severe first;
    ``index`` is ``release``'s instruction index (the instructions in between)."""
    before = {b.global_id: b for b in base.builtins}
    changes: list[Change] = []
    for builtin in release.builtins:
        old = before.pop(builtin.global_id, None)
        if old is None:
            changes.append(Change(Level.MINOR, builtin.name, "builtin added"))
        else:
            changes.extend(_builtin_changes(old, builtin, base.version, index))
    changes.extend(Change(Level.MAJOR, b.name, "builtin removed") for b in before.values())
    return tuple(sorted(changes, key=lambda c: (-c.level, c.collection, c.what)))


def _builtin_changes(
    old: Builtin, new: Builtin, since: Version, index: InstructionIndex
) -> list[Change]:
    if old.name != new.name:
        return [Change(Level.MAJOR, new.name, f"builtin renamed from {old.name}")]
    instructions = index.in_range(new.name, since, index.version)
    mechanism = winning_mechanism(instructions) if instructions else None
    if mechanism in (Mechanism.REWRITE, Mechanism.REPLACEMENT):
        assert mechanism is not None
        return [Change(Level.MAJOR, new.name, mechanism.value)]
    if old.fingerprint == new.fingerprint:
        return []
    if not is_backward_compatible(old.schema, new.schema):
        return [Change(Level.MAJOR, new.name, "a schema change no evolution allows")]
    diff = schema_diff(old.schema, new.schema)
    return [
        *(Change(Level.MAJOR, new.name, f"field {p} deleted") for p in diff["dropped"]),
        *(
            Change(Level.MAJOR, new.name, "field {} renamed to {}".format(*p.split(" -> ")))
            for p in diff["renamed"]
        ),
        *(Change(Level.MINOR, new.name, f"field {p} added") for p in diff["added"]),
        *(Change(Level.MINOR, new.name, f"field {p} made nullable") for p in diff["relaxed"]),
        *(Change(Level.MINOR, new.name, f"field {p} widened") for p in diff["changed"]),
    ]


def release_levels(
    ordered: Sequence[Release], indexes: Sequence[InstructionIndex]
) -> list[ReleaseLevel]:
    """The level of every release of ``ordered`` (in version order) but the first, each against
    the last release before it of a lower ``MAJOR.MINOR.PATCH``."""
    levels: list[ReleaseLevel] = []
    for j, release in enumerate(ordered):
        core = _core(release.version)
        base = next((i for i in range(j - 1, -1, -1) if _core(ordered[i].version) < core), None)
        if base is None:
            continue
        levels.append(
            ReleaseLevel(
                release.version,
                ordered[base].version,
                declared_level(ordered[base].version, release.version),
                change_level(ordered[base], release, indexes[j]),
            )
        )
    return levels


def path_level(
    releases: Sequence[Release], from_version: str | Version, to_version: str | Version
) -> ReleaseLevel:
    """The level of the one step ``from_version -> to_version`` (what ``plan`` shows)."""
    base, target = find_release(releases, from_version), find_release(releases, to_version)
    return ReleaseLevel(
        target.version,
        base.version,
        declared_level(base.version, target.version),
        change_level(base, target, InstructionIndex.of(target)),
    )


def _core(version: Version) -> tuple[int, int, int]:
    return (version.major, version.minor, version.patch)
