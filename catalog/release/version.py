"""Release versions: ``MAJOR.MINOR.PATCH[-prerelease]``, ordered by semver 2.0 precedence.

A leading ``v`` is accepted; build metadata (``+...``) is refused because it does not order."""

from __future__ import annotations

import functools
import re
from typing import Any

import attrs

from catalog.errors import ReleaseError

_VERSION_RE = re.compile(
    r"v?(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


@functools.total_ordering
@attrs.frozen(order=False, repr=False, cache_hash=True)
class Version:
    """A semantic version, ordered by semver precedence (never compared as a string)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    # The semver precedence key, computed once: plans and validation compare versions a lot, and
    # sort and bisect by it (a plain tuple, no Python-level __lt__).
    precedence: tuple[Any, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "precedence", self._key())

    @classmethod
    def parse(cls, value: str | Version) -> Version:
        """Parse ``0.11.0``, ``v0.11.0`` or ``1.0.0-rc.1``; a Version passes through."""
        if isinstance(value, Version):
            return value
        if not isinstance(value, str):
            raise ReleaseError(
                f"a version must be a string like '0.11.0', got {value!r}", value=repr(value)
            )
        match = _VERSION_RE.fullmatch(value.strip())
        if match is None:
            raise ReleaseError(
                f"not a semantic version: {value!r} (expected MAJOR.MINOR.PATCH)", value=value
            )
        prerelease = tuple(match["pre"].split(".")) if match["pre"] else ()
        for ident in prerelease:
            if ident.isdigit() and len(ident) > 1 and ident.startswith("0"):
                raise ReleaseError(
                    f"not a semantic version: {value!r} (numeric prerelease part with a leading 0)",
                    value=value,
                )
        return cls(int(match["major"]), int(match["minor"]), int(match["patch"]), prerelease)

    def __repr__(self) -> str:
        return f"Version('{self}')"

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{'.'.join(self.prerelease)}" if self.prerelease else core

    @property
    def line(self) -> tuple[int, int]:
        """The release line ``(major, minor)`` a patch release belongs to."""
        return (self.major, self.minor)

    @property
    def is_patch(self) -> bool:
        """True for a patch release (``X.Y.1`` and later) of a release line."""
        return self.patch > 0

    def _key(self) -> tuple[Any, ...]:
        # semver: a release sorts after its prereleases; numeric identifiers sort numerically
        # and before alphanumeric ones.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return bool(self.precedence < other.precedence)


def to_version(value: str | Version) -> Version:
    return Version.parse(value)
