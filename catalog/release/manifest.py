"""Release manifests: builtin collections, migration instructions and their mechanisms.

Value objects validated at construction, so an invalid release can never exist."""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs
import pyarrow as pa

from catalog.errors import ReleaseError
from catalog.release.version import Version, to_version
from catalog.schema import fingerprint

#: Kinds of builtin collections a release may declare.
KINDS: Final = frozenset({"table", "source", "view", "materialized-view", "index", "log"})


#: The attribute a release file defines, unless a ref names another one.
RELEASE_ATTRIBUTE: Final = "RELEASE"


#: A REWRITE transformation: one batch in the old schema to one batch in the new schema.
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]


IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_GLOBAL_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class Mechanism(enum.Enum):
    """How a collection is migrated (docs/design.md section 2)."""

    EVOLUTION = "evolution"
    REPLACEMENT = "replacement"
    REWRITE = "rewrite"


#: Merge precedence: the highest rank among a collection's instructions in a path wins. A
#: replacement discards everything before it and nothing written between it and a later rewrite
#: exists on a path that jumps over them, so any replacement wins; a rewrite then carries the
#: evolutions around it (docs/design.md, "One rule for a path").
MECHANISM_RANK: Final = MappingProxyType({"evolution": 0, "rewrite": 1, "replacement": 2})


def _to_mechanism(value: Mechanism | str) -> Mechanism:
    try:
        return value if isinstance(value, Mechanism) else Mechanism(value)
    except ValueError:
        raise ReleaseError(
            f"unknown mechanism {value!r} (expected one of "
            f"{', '.join(m.value for m in Mechanism)})",
            field="mechanism",
            value=value,
        ) from None


def _check_identifier(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not IDENTIFIER_RE.fullmatch(value):
        raise ReleaseError(
            f"{type(instance).__name__}.{attribute.name} must be an identifier "
            f"(letters, digits, _), got {value!r}",
            field=attribute.name,
            value=repr(value),
        )


def _check_kind(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in KINDS:
        raise ReleaseError(
            f"{type(instance).__name__}.kind must be one of {', '.join(sorted(KINDS))}, "
            f"got {value!r}",
            field=attribute.name,
            value=repr(value),
        )


def _check_global_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _GLOBAL_ID_RE.fullmatch(value):
        raise ReleaseError(
            f"{type(instance).__name__}.global_id must be a non-empty id like 's42', got {value!r}",
            field=attribute.name,
            value=repr(value),
        )


def _check_schema(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, pa.Schema):
        raise ReleaseError(
            f"{type(instance).__name__}.schema must be a pyarrow.Schema, "
            f"got {type(value).__name__}",
            field=attribute.name,
        )
    if len(value) == 0:
        raise ReleaseError(f"{type(instance).__name__}.schema has no fields", field=attribute.name)
    names = value.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ReleaseError(
            f"{type(instance).__name__}.schema repeats field names: {', '.join(duplicates)}",
            field=attribute.name,
            duplicates=duplicates,
        )


def _check_bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ReleaseError(
            f"{type(instance).__name__}.{attribute.name} must be a bool, got {value!r}",
            field=attribute.name,
            value=repr(value),
        )


@attrs.frozen
class Builtin:
    """A builtin collection: ``(schema_name, object_name, kind)`` with a stable GlobalId.

    ``retain_data=True`` marks a collection whose history must survive every upgrade (the source
    system's exemption list): it can be evolved or rewritten, never replaced.
    """

    schema_name: str = attrs.field(validator=_check_identifier)
    object_name: str = attrs.field(validator=_check_identifier)
    kind: str = attrs.field(validator=_check_kind)
    global_id: str = attrs.field(validator=_check_global_id)
    schema: pa.Schema = attrs.field(validator=_check_schema)
    retain_data: bool = attrs.field(default=False, validator=_check_bool)
    #: ``schema_name.object_name``: how collections are named everywhere.
    name: str = attrs.field(init=False, eq=False, repr=False)
    #: Stable hash of the canonical schema (see :func:`catalog.schema.fingerprint`), derived
    #: once: a builtin unchanged across releases is one object, compared once per pair.
    fingerprint: str = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.schema_name}.{self.object_name}")
        object.__setattr__(self, "fingerprint", fingerprint(self.schema))


@attrs.frozen
class Migration:
    """One migration instruction: migrate this collection at this version by this mechanism.

    ``transform`` (REWRITE only) maps a batch in the old schema to one in the new schema.
    ``inverse`` (REWRITE or REPLACEMENT) maps a batch in the new schema back to the old one: a
    rollback carries the rows this release wrote to the replacement through it
    (``orchestrator.migrate.rollback``). Neither is part of equality: instructions compare by
    what they declare, not by function identity.

    A *conversion* says the builtin changed kind (``former_kind``) or name (``former_name``,
    ``schema.object``) at this version, keeping its GlobalId: a table became a materialized
    view. It is a REPLACEMENT, which subsumes every older instruction naming the former
    description, so later releases may drop those (``validate`` accepts their removal then,
    and only then; docs/releases.md, "A builtin that changes kind").
    """

    version: Version = attrs.field(converter=to_version)
    schema_name: str = attrs.field(validator=_check_identifier)
    object_name: str = attrs.field(validator=_check_identifier)
    kind: str = attrs.field(validator=_check_kind)
    mechanism: Mechanism = attrs.field(converter=_to_mechanism)
    transform: Transform | None = attrs.field(default=None, eq=False)
    inverse: Transform | None = attrs.field(default=None, eq=False)
    former_kind: str | None = attrs.field(default=None)
    former_name: str | None = attrs.field(default=None)
    # Derived once: validation looks instructions up by these millions of times.
    _name: str = attrs.field(init=False, eq=False, repr=False)
    _key: tuple[Version, str, str, Mechanism] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        name = f"{self.schema_name}.{self.object_name}"
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_key", (self.version, name, self.kind, self.mechanism))
        if self.mechanism is Mechanism.REWRITE and not callable(self.transform):
            raise ReleaseError(
                f"rewrite instruction {self.describe()} needs a callable transform",
                field="transform",
                instruction=self.describe(),
            )
        if self.mechanism is not Mechanism.REWRITE and self.transform is not None:
            raise ReleaseError(
                f"{self.mechanism.value} instruction {self.describe()} must not have a transform "
                "(only rewrite transforms data)",
                field="transform",
                instruction=self.describe(),
            )
        if self.inverse is not None and self.mechanism is Mechanism.EVOLUTION:
            raise ReleaseError(
                f"evolution instruction {self.describe()} must not have an inverse (an older "
                "release reads an evolved shard as it is)",
                field="inverse",
                instruction=self.describe(),
            )
        if self.inverse is not None and not callable(self.inverse):
            raise ReleaseError(
                f"instruction {self.describe()} needs a callable inverse",
                field="inverse",
                instruction=self.describe(),
            )
        if self.is_conversion:
            self._check_conversion()

    @property
    def is_conversion(self) -> bool:
        """Whether this instruction says the builtin changed kind or name (a conversion)."""
        return self.former_kind is not None or self.former_name is not None

    def converts(self, name: str, kind: str) -> bool:
        """Whether this conversion subsumes instructions naming ``name`` of ``kind``: the
        builtin's former description (a part not declared former is the current one)."""
        return (
            self.is_conversion
            and name == (self.former_name or self._name)
            and kind == (self.former_kind or self.kind)
        )

    def _check_conversion(self) -> None:
        if self.mechanism is not Mechanism.REPLACEMENT:
            raise ReleaseError(
                f"instruction {self.describe()} converts a builtin (kind or name) and must be a "
                "replacement: a new shard for the new description",
                field="mechanism",
                instruction=self.describe(),
            )
        if self.former_kind is not None and self.former_kind not in KINDS:
            raise ReleaseError(
                f"instruction {self.describe()}: former_kind must be one of "
                f"{', '.join(sorted(KINDS))}, got {self.former_kind!r}",
                field="former_kind",
                instruction=self.describe(),
            )
        if self.former_name is not None:
            schema, _, obj = self.former_name.partition(".")
            if not (IDENTIFIER_RE.fullmatch(schema) and IDENTIFIER_RE.fullmatch(obj)):
                raise ReleaseError(
                    f"instruction {self.describe()}: former_name must be schema.object, got "
                    f"{self.former_name!r}",
                    field="former_name",
                    instruction=self.describe(),
                )
        if self.converts(self._name, self.kind):
            raise ReleaseError(
                f"instruction {self.describe()} declares a conversion from its own description: "
                "give the former kind or name that differs",
                field="former_kind",
                instruction=self.describe(),
            )

    @property
    def name(self) -> str:
        """``schema_name.object_name`` of the collection this instruction migrates."""
        return self._name

    @property
    def key(self) -> tuple[Version, str, str, Mechanism]:
        """What identifies an instruction across releases: version, name, kind, mechanism."""
        return self._key

    def describe(self) -> str:
        """A short human form: ``0.11.0 mz_catalog.mz_tables (table) evolution``."""
        return f"{self.version} {self.name} ({self.kind}) {self.mechanism.value}"


def _to_builtins(value: Iterable[Builtin]) -> tuple[Builtin, ...]:
    items = _to_tuple(value, "builtins")
    for item in items:
        if not isinstance(item, Builtin):
            raise ReleaseError(
                f"Release.builtins holds a {type(item).__name__}, not a Builtin", field="builtins"
            )
    return items


def _to_migrations(value: Iterable[Migration]) -> tuple[Migration, ...]:
    items = _to_tuple(value, "migrations")
    for item in items:
        if not isinstance(item, Migration):
            raise ReleaseError(
                f"Release.migrations holds a {type(item).__name__}, not a Migration",
                field="migrations",
            )
    return items


def _to_tuple(value: Iterable[Any], field: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ReleaseError(
            f"Release.{field} must be a list, got {type(value).__name__}", field=field
        )
    return tuple(value)


@attrs.frozen
class Release:
    """One product version: its builtin collections and every migration instruction up to it.

    ``migrations`` is cumulative: every instruction of every earlier release stays in the list
    (the source design's rule; :func:`validate` reports removals).
    """

    version: Version = attrs.field(converter=to_version)
    builtins: tuple[Builtin, ...] = attrs.field(converter=_to_builtins)
    migrations: tuple[Migration, ...] = attrs.field(default=(), converter=_to_migrations)
    #: The release this one was made from (``previous=PREVIOUS``), if declared: where a path
    #: that evolves a collection before rewriting it finds the schema the rewrite's transform
    #: was written against (:func:`catalog.release.planning.rewrite_steps`).
    previous: Release | None = attrs.field(default=None, eq=False, repr=False)
    # Look-ups by name, built once: a leader asks for each of a thousand collections.
    _by_name: dict[str, Builtin] = attrs.field(init=False, eq=False, repr=False)
    _migrations_by_name: dict[str, tuple[Migration, ...]] = attrs.field(
        init=False, eq=False, repr=False
    )
    # The ancestors oldest first, and their versions: a path's look-up is a bisection.
    _lineage: tuple[Release, ...] = attrs.field(init=False, eq=False, repr=False)
    _lineage_versions: tuple[Version, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        by_name: dict[str, list[Migration]] = {}
        for migration in self.migrations:
            by_name.setdefault(migration.name, []).append(migration)
        object.__setattr__(self, "_by_name", {b.name: b for b in self.builtins})
        object.__setattr__(
            self, "_migrations_by_name", {n: tuple(ms) for n, ms in by_name.items()}
        )
        if self.previous is not None and (
            not isinstance(self.previous, Release) or not self.previous.version < self.version
        ):
            raise ReleaseError(
                f"release {self.version} names as previous "
                f"{getattr(self.previous, 'version', type(self.previous).__name__)}, which is "
                "not an older Release",
                field="previous",
                version=str(self.version),
            )
        lineage = () if self.previous is None else (*self.previous._lineage, self.previous)
        object.__setattr__(self, "_lineage", lineage)
        object.__setattr__(self, "_lineage_versions", tuple(r.version for r in lineage))
        reject_duplicates(self.version, [b.global_id for b in self.builtins], "global_id")
        reject_duplicates(self.version, [b.name for b in self.builtins], "name")
        seen: dict[tuple[Version, str], Migration] = {}
        for migration in self.migrations:
            if migration.version > self.version:
                raise ReleaseError(
                    f"release {self.version} has instruction {migration.describe()} "
                    "newer than itself",
                    field="migrations",
                    version=str(self.version),
                    instruction=migration.describe(),
                )
            slot = (migration.version, migration.name)
            if slot in seen:
                raise ReleaseError(
                    f"release {self.version} has two instructions for {migration.name} at "
                    f"{migration.version}: {seen[slot].describe()} and {migration.describe()}",
                    field="migrations",
                    version=str(self.version),
                    collection=migration.name,
                )
            seen[slot] = migration

    def builtin(self, name: str) -> Builtin | None:
        """The builtin called ``schema_name.object_name``, if this release has it."""
        return self._by_name.get(name)

    def migrations_of(self, name: str) -> tuple[Migration, ...]:
        """The instructions for the collection called ``name``, in declared order."""
        return self._migrations_by_name.get(name, ())

    def ancestor_before(self, version: Version) -> Release | None:
        """The newest release this one was made from that is older than ``version``."""
        index = bisect.bisect_left(self._lineage_versions, version)
        return self._lineage[index - 1] if index else None

    def fingerprints(self) -> dict[str, str]:
        """Fingerprint of every builtin, by GlobalId (what the catalog stores)."""
        return {b.global_id: b.fingerprint for b in self.builtins}


def reject_duplicates(version: Version, values: list[str], field: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ReleaseError(
                f"release {version} declares {field} {value!r} twice",
                field=field,
                value=value,
                version=str(version),
            )
        seen.add(value)
