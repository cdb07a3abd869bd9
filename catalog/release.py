"""Release manifests, fingerprints, migration plans and exhaustive validation of upgrade paths.

A *release* is one product version's definition (DESIGN.md section 8): its builtin collections and
its full ``MIGRATIONS`` list, written as plain Python and loaded by file path or ``module:ATTR`` the
way Alembic loads revision scripts. Everything below the loaders is pure logic over values, like
Alembic's ``RevisionMap``: no ZooKeeper, no blobs, no Spark.

* :func:`plan` merges the instructions of one upgrade ``from -> to`` into one
  :class:`PlannedMigration` per collection (DESIGN.md section 5, step 3).
* :func:`validate` checks every pair ``X < Y`` of a release history as an upgrade path: the
  "exhaustive upgrade test" of the source design.

Conventions this module fixes:

* Versions are ``MAJOR.MINOR.PATCH`` with an optional ``-prerelease`` (semver 2.0 precedence); a
  leading ``v`` is accepted. Build metadata (``+...``) is rejected because it does not order.
* Builtin kinds are the closed set :data:`KINDS`. An instruction names ``(schema, object, kind)``
  and must match the builtin's kind.
* Mechanisms merge by precedence ``rewrite > replacement > evolution`` (DESIGN.md section 5).
* Instructions are matched to builtins by name; builtins are matched to catalog collections by
  GlobalId. An in-range instruction naming a builtin of neither end of the path is ignored (the
  builtin was added and removed in between) unless it is an instruction of the target release
  itself, which must always name one of the target's builtins.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import functools
import importlib
import importlib.util
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Final

import attrs
import pyarrow as pa
import structlog

from catalog.errors import CatalogError, PlanError, ReleaseError, SchemaIncompatibleError
from catalog.schema import evolve, fingerprint, migration_type, schema_diff

__all__ = [
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
]

log = structlog.get_logger(__name__)

#: Kinds of builtin collections a release may declare.
KINDS: Final = frozenset({"table", "source", "view", "materialized-view", "index", "log"})

#: The attribute a release file defines, unless a ref names another one.
RELEASE_ATTRIBUTE: Final = "RELEASE"

#: A REWRITE transformation: one batch in the old schema to one batch in the new schema.
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]

_VERSION_RE = re.compile(
    r"v?(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOBAL_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_MODULE_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


# --- versions --------------------------------------------------------------------------------


@functools.total_ordering
@attrs.frozen(order=False, repr=False)
class Version:
    """A semantic version, ordered by semver precedence (never compared as a string)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    # The semver precedence key, computed once: plans and validation compare versions a lot.
    _order: tuple[Any, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_order", self._key())

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
        return bool(self._order < other._order)


def _to_version(value: str | Version) -> Version:
    return Version.parse(value)


# --- manifests -------------------------------------------------------------------------------


class Mechanism(enum.Enum):
    """How a collection is migrated (DESIGN.md section 2)."""

    EVOLUTION = "evolution"
    REPLACEMENT = "replacement"
    REWRITE = "rewrite"

    @property
    def rank(self) -> int:
        """Merge precedence: the highest rank among a collection's instructions wins."""
        return _MECHANISM_RANK[self.value]


_MECHANISM_RANK: Final = MappingProxyType({"evolution": 0, "replacement": 1, "rewrite": 2})


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
    if not isinstance(value, str) or not _IDENTIFIER_RE.fullmatch(value):
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

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.schema_name}.{self.object_name}")

    @property
    def fingerprint(self) -> str:
        """Stable hash of the canonical schema (see :func:`catalog.schema.fingerprint`)."""
        return fingerprint(self.schema)


@attrs.frozen
class Migration:
    """One migration instruction: migrate this collection at this version by this mechanism.

    ``transform`` (REWRITE only) maps a batch in the old schema to one in the new schema. It is
    not part of equality: instructions compare by what they declare, not by function identity.
    """

    version: Version = attrs.field(converter=_to_version)
    schema_name: str = attrs.field(validator=_check_identifier)
    object_name: str = attrs.field(validator=_check_identifier)
    kind: str = attrs.field(validator=_check_kind)
    mechanism: Mechanism = attrs.field(converter=_to_mechanism)
    transform: Transform | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
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

    @property
    def name(self) -> str:
        """``schema_name.object_name`` of the collection this instruction migrates."""
        return f"{self.schema_name}.{self.object_name}"

    @property
    def key(self) -> tuple[Version, str, str, Mechanism]:
        """What identifies an instruction across releases: version, name, kind, mechanism."""
        return (self.version, self.name, self.kind, self.mechanism)

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

    version: Version = attrs.field(converter=_to_version)
    builtins: tuple[Builtin, ...] = attrs.field(converter=_to_builtins)
    migrations: tuple[Migration, ...] = attrs.field(default=(), converter=_to_migrations)

    def __attrs_post_init__(self) -> None:
        _reject_duplicates(self.version, [b.global_id for b in self.builtins], "global_id")
        _reject_duplicates(self.version, [b.name for b in self.builtins], "name")
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
        return next((b for b in self.builtins if b.name == name), None)

    def fingerprints(self) -> dict[str, str]:
        """Fingerprint of every builtin, by GlobalId (what the catalog stores)."""
        return {b.global_id: b.fingerprint for b in self.builtins}


def _reject_duplicates(version: Version, values: list[str], field: str) -> None:
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


# --- loading ---------------------------------------------------------------------------------


def load_release(ref: str | Path) -> Release:
    """Load a release from ``path/to/file.py[:ATTR]`` or ``package.module:ATTR``.

    ``ATTR`` defaults to ``RELEASE``. Every failure (missing file or module, syntax error,
    exception while importing, missing attribute, attribute not a Release) is a
    :class:`ReleaseError` naming the file or module (and the line, when there is one).
    """
    text = str(ref)
    target, attribute = text, RELEASE_ATTRIBUTE
    head, sep, tail = text.rpartition(":")
    if sep and head and _IDENTIFIER_RE.fullmatch(tail):
        target, attribute = head, tail
    if target.endswith(".py") or "/" in target or "\\" in target or Path(target).exists():
        path = Path(target)
        if not path.is_file():
            raise ReleaseError(f"release file not found: {path}", path=str(path))
        with _sibling_imports(path.resolve().parent):
            module = _import_file(path.resolve())
        return _release_attribute(module, attribute, str(path))
    if not _MODULE_REF_RE.fullmatch(target):
        raise ReleaseError(
            f"not a release reference: {text!r} (expected FILE.py[:ATTR] or package.module:ATTR)",
            ref=text,
        )
    try:
        with _translated_import_errors(target):
            module = importlib.import_module(target)
    except ReleaseError as exc:
        missing = exc.__cause__
        if (
            isinstance(missing, ModuleNotFoundError)
            and missing.name is not None
            and (target == missing.name or target.startswith(f"{missing.name}."))
        ):
            raise ReleaseError(f"release module not found: {target}", module=target) from None
        raise
    return _release_attribute(module, attribute, target)


def load_release_dir(directory: str | Path) -> list[Release]:
    """Load every ``*.py`` release in ``directory``, sorted by version.

    Files starting with ``_`` are helpers (shared schemas, transforms) and are not releases;
    every other file must define ``RELEASE``. Release files may import each other and their
    helpers by plain module name: the directory is importable while they load.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ReleaseError(f"release directory not found: {root}", path=str(root))
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise ReleaseError(f"no release files (*.py) in {root}", path=str(root))
    loaded: list[tuple[Release, Path]] = []
    with _sibling_imports(root.resolve()):
        for path in files:
            module = _import_file(path.resolve())
            loaded.append((_release_attribute(module, RELEASE_ATTRIBUTE, str(path)), path))
    by_version: dict[Version, Path] = {}
    for release, path in loaded:
        if release.version in by_version:
            raise ReleaseError(
                f"two releases at version {release.version}: {by_version[release.version].name} "
                f"and {path.name}",
                path=str(path),
                version=str(release.version),
                files=[str(by_version[release.version]), str(path)],
            )
        by_version[release.version] = path
    releases = sorted((r for r, _ in loaded), key=lambda r: r.version)
    log.debug("releases_loaded", directory=str(root), versions=[str(r.version) for r in releases])
    return releases


def find_release(releases: Iterable[Release], version: str | Version) -> Release:
    """The release at ``version``; a :class:`ReleaseError` when there is none."""
    wanted = Version.parse(version)
    available = list(releases)
    for release in available:
        if release.version == wanted:
            return release
    raise ReleaseError(
        f"no release {wanted} (available: {', '.join(str(r.version) for r in available)})",
        version=str(wanted),
        available=[str(r.version) for r in available],
    )


@contextlib.contextmanager
def _sibling_imports(directory: Path) -> Iterator[None]:
    """Make ``directory`` importable for the duration, without leaking its modules.

    Release directories reuse module names (``_schemas``, ``v1_0_0``): modules of the same names
    loaded from elsewhere are set aside and restored, and the modules this load adds from the
    directory are dropped afterwards, so the next directory gets its own. Not thread-safe (it
    edits ``sys.path`` and ``sys.modules``), like every import.
    """
    siblings = {p.stem for p in directory.glob("*.py")} | {
        p.name for p in directory.iterdir() if (p / "__init__.py").is_file()
    }
    shadowed = {
        name: module
        for name, module in sys.modules.items()
        if name.split(".")[0] in siblings and not _module_inside(module, directory)
    }
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    entry = str(directory)
    sys.path.insert(0, entry)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
        added = [
            n for n, m in sys.modules.items() if n not in before and _module_inside(m, directory)
        ]
        for name in added:
            del sys.modules[name]
        sys.modules.update(shadowed)


def _module_inside(module: ModuleType | None, directory: Path) -> bool:
    filename = getattr(module, "__file__", None)
    return isinstance(filename, str) and filename.startswith(f"{directory}{os.sep}")


def _import_file(path: Path) -> ModuleType:
    """Import one release file under its stem, so sibling imports of it share the module."""
    name = (
        path.stem if _IDENTIFIER_RE.fullmatch(path.stem) else re.sub(r"\W", "_", f"_r_{path.stem}")
    )
    existing = sys.modules.get(name)
    if existing is not None and _module_inside(existing, path.parent):
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReleaseError(f"cannot import release file {path}", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _translated_import_errors(str(path)):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@contextlib.contextmanager
def _translated_import_errors(where: str) -> Iterator[None]:
    """Turn whatever importing a release raises into one ReleaseError naming the file and line."""
    try:
        yield
    except SyntaxError as exc:
        raise ReleaseError(
            f"syntax error in {exc.filename or where} line {exc.lineno}: {exc.msg}",
            path=exc.filename or where,
            line=exc.lineno,
        ) from exc
    # A release file is user code: whatever it raises while importing (a ReleaseError from an
    # invalid Builtin, a NameError, a missing helper module) is bad input, reported with the file
    # and line it came from instead of a traceback.
    except Exception as exc:
        if isinstance(exc, ReleaseError) and ("path" in exc.details or "module" in exc.details):
            raise
        culprit, line = _innermost_user_frame(exc, where)
        message = exc.message if isinstance(exc, CatalogError) else f"{type(exc).__name__}: {exc}"
        details = exc.details if isinstance(exc, CatalogError) else {}
        raise ReleaseError(
            f"{culprit}{f' line {line}' if line else ''}: {message}",
            **{**details, "path": culprit, "line": line, "error": type(exc).__name__},
        ) from exc


def _innermost_user_frame(exc: BaseException, where: str) -> tuple[str, int | None]:
    """The last traceback frame outside this package and the standard library: the user's line."""
    culprit, line = where, None
    package = str(Path(__file__).resolve().parent)
    stdlib = os.path.dirname(os.__file__)
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith((package, stdlib, "<")) and "site-packages" not in filename:
            culprit, line = filename, tb.tb_lineno
        tb = tb.tb_next
    return culprit, line


def _release_attribute(module: ModuleType, attribute: str, where: str) -> Release:
    if not hasattr(module, attribute):
        raise ReleaseError(f"{where} has no attribute {attribute}", path=where, attribute=attribute)
    value = getattr(module, attribute)
    if not isinstance(value, Release):
        raise ReleaseError(
            f"{where}: {attribute} is a {type(value).__name__}, not a catalog.release.Release",
            path=where,
            attribute=attribute,
        )
    return value


# --- catalog state ---------------------------------------------------------------------------


@attrs.frozen
class CollectionState:
    """What the catalog knows about one builtin collection at its durable version.

    ``schema`` is the live schema; ``history`` the shard's migration type (live schema plus
    tombstones of deleted fields) when known, so evolutions are checked against the whole history.
    """

    global_id: str
    name: str
    fingerprint: str
    schema: pa.Schema
    history: pa.Schema | None = None

    @classmethod
    def of(cls, builtin: Builtin, history: pa.Schema | None = None) -> CollectionState:
        """The state a catalog bootstrapped (or last migrated) to ``builtin`` holds."""
        return cls(builtin.global_id, builtin.name, builtin.fingerprint, builtin.schema, history)

    def migration_history(self) -> pa.Schema:
        """The schema history evolutions are checked against (the live schema if unknown)."""
        return self.history if self.history is not None else migration_type(self.schema)


def _to_states(value: Iterable[CollectionState]) -> tuple[CollectionState, ...]:
    return tuple(value)


@attrs.frozen
class CatalogSnapshot:
    """The catalog state a plan starts from: durable version and its builtin collections."""

    version: Version = attrs.field(converter=_to_version)
    collections: tuple[CollectionState, ...] = attrs.field(converter=_to_states)

    def __attrs_post_init__(self) -> None:
        _reject_duplicates(self.version, [c.global_id for c in self.collections], "global_id")

    @classmethod
    def from_release(cls, release: Release) -> CatalogSnapshot:
        """The state of a catalog whose durable version is ``release`` (histories unknown)."""
        return cls(release.version, tuple(CollectionState.of(b) for b in release.builtins))

    def by_global_id(self) -> dict[str, CollectionState]:
        """Collections keyed by GlobalId."""
        return {c.global_id: c for c in self.collections}


# --- plans -----------------------------------------------------------------------------------


@attrs.frozen
class SchemaDiff:
    """Dotted paths of fields added, dropped, made nullable, and otherwise changed (a type or
    nullability change only a replacement or rewrite can make) between two schemas."""

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    relaxed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @classmethod
    def between(cls, old: pa.Schema, new: pa.Schema) -> SchemaDiff:
        """The diff of :func:`catalog.schema.schema_diff` as a value."""
        diff = schema_diff(old, new)

        def paths(key: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(diff.get(key, ())))

        return cls(paths("added"), paths("dropped"), paths("relaxed"), paths("changed"))

    @property
    def is_empty(self) -> bool:
        """True when nothing visible changed."""
        return not (self.added or self.dropped or self.relaxed or self.changed)


@attrs.frozen
class PlannedMigration:
    """One collection's migration: the winning mechanism and the instructions merged into it."""

    global_id: str
    name: str
    mechanism: Mechanism
    instructions: tuple[Migration, ...]
    old_schema: pa.Schema
    new_schema: pa.Schema

    @property
    def diff(self) -> SchemaDiff:
        """Fields added, dropped and relaxed from the old live schema to the new one."""
        return SchemaDiff.between(self.old_schema, self.new_schema)

    @property
    def transforms(self) -> tuple[Transform, ...]:
        """The REWRITE transforms to apply, oldest instruction first."""
        return tuple(m.transform for m in self.instructions if m.transform is not None)


@attrs.frozen
class Plan:
    """The merged migration plan of one upgrade ``from_version -> to_version``."""

    from_version: Version
    to_version: Version
    migrations: tuple[PlannedMigration, ...] = ()
    new_builtins: tuple[Builtin, ...] = ()
    removed_builtins: tuple[CollectionState, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when the upgrade touches no collection."""
        return not (self.migrations or self.new_builtins or self.removed_builtins)

    def get(self, name: str) -> PlannedMigration | None:
        """The planned migration of collection ``name``, if any."""
        return next((m for m in self.migrations if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (the ``plan --json`` output)."""
        return {
            "from": str(self.from_version),
            "to": str(self.to_version),
            "migrations": [
                {
                    "global_id": m.global_id,
                    "name": m.name,
                    "mechanism": m.mechanism.value,
                    "instructions": [
                        {"version": str(i.version), "mechanism": i.mechanism.value, "kind": i.kind}
                        for i in m.instructions
                    ],
                    "diff": attrs.asdict(m.diff, value_serializer=_list_values),
                }
                for m in self.migrations
            ],
            "new_builtins": [
                {"global_id": b.global_id, "name": b.name, "kind": b.kind}
                for b in self.new_builtins
            ],
            "removed_builtins": [
                {"global_id": c.global_id, "name": c.name} for c in self.removed_builtins
            ],
        }


def _list_values(_inst: object, _field: object, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


#: Checks one evolution: ``None`` when the builtin's schema may evolve the collection's history.
EvolveCheck = Callable[[CollectionState, Builtin], SchemaIncompatibleError | None]


def _check_evolution(state: CollectionState, builtin: Builtin) -> SchemaIncompatibleError | None:
    try:
        evolve(state.migration_history(), builtin.schema)
    except SchemaIncompatibleError as exc:
        return exc
    return None


@attrs.frozen
class _InstructionIndex:
    """A release's instructions grouped by collection and sorted by version, for range queries."""

    version: Version
    by_name: Mapping[str, tuple[tuple[tuple[Any, ...], ...], tuple[Migration, ...]]]
    own: tuple[Migration, ...]
    keys: frozenset[tuple[Version, str, str, Mechanism]]

    @classmethod
    def of(cls, release: Release) -> _InstructionIndex:
        grouped: dict[str, list[Migration]] = {}
        for migration in sorted(release.migrations, key=lambda m: m.version):
            grouped.setdefault(migration.name, []).append(migration)
        return cls(
            release.version,
            MappingProxyType(
                {
                    name: (tuple(m.version._order for m in ms), tuple(ms))
                    for name, ms in grouped.items()
                }
            ),
            tuple(m for m in release.migrations if m.version == release.version),
            frozenset(m.key for m in release.migrations),
        )

    def in_range(self, name: str, low: Version, high: Version) -> tuple[Migration, ...]:
        """Instructions for ``name`` with ``low < version <= high``, oldest first."""
        entry = self.by_name.get(name)
        if entry is None:
            return ()
        # Bisect on the precedence keys: plain tuple comparisons, no Python-level __lt__.
        orders, migrations = entry
        start = bisect.bisect_right(orders, low._order)
        return migrations[start : bisect.bisect_right(orders, high._order)]


@attrs.frozen
class _Problem:
    """One reason a path fails, for one collection (None: the whole path)."""

    reason: str
    collection: str | None
    error: CatalogError


def _merge(instructions: Sequence[Migration]) -> Mechanism:
    winner = instructions[0].mechanism
    for migration in instructions[1:]:
        if _MECHANISM_RANK[migration.mechanism.value] > _MECHANISM_RANK[winner.value]:
            winner = migration.mechanism
    return winner


def _build_plan(
    source: CatalogSnapshot,
    target: Release,
    *,
    index: _InstructionIndex,
    fingerprints: Mapping[str, str],
    evolve_check: EvolveCheck,
    current: Mapping[str, CollectionState] | None = None,
) -> tuple[Plan, list[_Problem]]:
    """The plan ``source -> target`` and every problem found; the pure core of plan/validate."""
    low, high = source.version, target.version
    empty = Plan(low, high)
    if high < low:
        error = PlanError(
            f"downgrade not supported: the catalog is at {low}, the release is {high}",
            reason="downgrade",
            from_version=str(low),
            to_version=str(high),
        )
        return empty, [_Problem("downgrade", None, error)]
    if current is None:
        current = source.by_global_id()
    by_name = {b.name: b for b in target.builtins}
    problems: list[_Problem] = []
    unknown: dict[tuple[Version, str, str, Mechanism], Migration] = {}
    if low < high:
        for migration in index.own:
            builtin = by_name.get(migration.name)
            if builtin is None or builtin.kind != migration.kind:
                unknown[migration.key] = migration
    planned: list[PlannedMigration] = []
    new: list[Builtin] = []
    for builtin in target.builtins:
        state = current.get(builtin.global_id)
        if state is None:
            new.append(builtin)
            continue
        if state.name != builtin.name:
            problems.append(_global_id_reassigned(state, builtin, low, high))
            continue
        instructions = index.in_range(builtin.name, low, high)
        mismatched = [m for m in instructions if m.kind != builtin.kind]
        if mismatched:
            unknown.update((m.key, m) for m in mismatched)
            continue
        changed = fingerprints[builtin.global_id] != state.fingerprint
        if not instructions:
            if changed:
                problems.append(_missing_instruction(builtin, low, high))
            continue
        mechanism = _merge(instructions)
        if builtin.retain_data and mechanism is Mechanism.REPLACEMENT:
            problems.append(_retain_data_replaced(builtin, instructions, low, high))
            continue
        if mechanism is Mechanism.EVOLUTION and changed:
            incompatible = evolve_check(state, builtin)
            if incompatible is not None:
                problems.append(_incompatible(incompatible, builtin, low, high))
                continue
        planned.append(
            PlannedMigration(
                builtin.global_id,
                builtin.name,
                mechanism,
                instructions,
                state.schema,
                builtin.schema,
            )
        )
    problems.extend(_unknown_builtin(m, target) for m in unknown.values())
    target_ids = {b.global_id for b in target.builtins}
    removed = tuple(c for gid, c in current.items() if gid not in target_ids)
    result = Plan(low, high, tuple(planned), tuple(new), removed)
    return result, problems


def _missing_instruction(builtin: Builtin, low: Version, high: Version) -> _Problem:
    error = PlanError(
        f"{builtin.name} changed schema between {low} and {high} without a migration instruction",
        reason="missing-instruction",
        collections=[builtin.name],
        from_version=str(low),
        to_version=str(high),
        suggestion=f"add Migration(version='{high}', schema_name='{builtin.schema_name}', "
        f"object_name='{builtin.object_name}', kind='{builtin.kind}', mechanism=...) "
        "to MIGRATIONS",
    )
    return _Problem("missing-instruction", builtin.name, error)


def _retain_data_replaced(
    builtin: Builtin, instructions: Sequence[Migration], low: Version, high: Version
) -> _Problem:
    culprits = [m.describe() for m in instructions if m.mechanism is Mechanism.REPLACEMENT]
    error = PlanError(
        f"{builtin.name} retains its data and can never be migrated by replacement "
        f"({'; '.join(culprits)})",
        reason="retain-data-replaced",
        collections=[builtin.name],
        instructions=culprits,
        from_version=str(low),
        to_version=str(high),
        suggestion="use an evolution, or a rewrite with a transform, for this collection",
    )
    return _Problem("retain-data-replaced", builtin.name, error)


def _unknown_builtin(migration: Migration, target: Release) -> _Problem:
    error = PlanError(
        f"instruction {migration.describe()} names no builtin {migration.kind} of release "
        f"{target.version}",
        reason="unknown-builtin",
        collections=[migration.name],
        instruction=migration.describe(),
        to_version=str(target.version),
    )
    return _Problem("unknown-builtin", migration.name, error)


def _global_id_reassigned(
    state: CollectionState, builtin: Builtin, low: Version, high: Version
) -> _Problem:
    error = PlanError(
        f"GlobalId {builtin.global_id} names {state.name} at {low} but {builtin.name} at {high}",
        reason="global-id-reassigned",
        collections=[builtin.name],
        global_id=builtin.global_id,
        from_version=str(low),
        to_version=str(high),
        suggestion="give the new builtin a new GlobalId; never reuse one",
    )
    return _Problem("global-id-reassigned", builtin.name, error)


def _incompatible(
    exc: SchemaIncompatibleError, builtin: Builtin, low: Version, high: Version
) -> _Problem:
    extra = {
        k: v
        for k, v in exc.details.items()
        if k not in {"rule", "path", "old", "new", "suggestion"}
    }
    error = SchemaIncompatibleError(
        f"{builtin.name}: evolution {low} -> {high} is not backward compatible: {exc.message}",
        rule=exc.rule,
        path=exc.path,
        old=exc.old,
        new=exc.new,
        suggestion=exc.suggestion,
        **{
            **extra,
            "reason": "incompatible-evolution",
            "collection": builtin.name,
            "global_id": builtin.global_id,
            "from_version": str(low),
            "to_version": str(high),
        },
    )
    return _Problem("incompatible-evolution", builtin.name, error)


# The order plan() reports problems in: the cheapest to fix and most fundamental first.
_REASON_ORDER: Final = (
    "downgrade",
    "unknown-builtin",
    "global-id-reassigned",
    "missing-instruction",
    "retain-data-replaced",
    "incompatible-evolution",
)


def plan(source: Release | CatalogSnapshot, target: Release) -> Plan:
    """Plan the upgrade from ``source`` (a release or the catalog's state) to ``target``.

    Takes the target's instructions with ``from < version <= to``, grouped by collection, merged
    by precedence; refuses (PlanError or SchemaIncompatibleError) a downgrade, an instruction
    naming no builtin, a changed builtin without instruction (naming every one), a replaced
    ``retain_data`` builtin, or an evolution not backward compatible with the history it comes
    from. Builtins without a collection yet are ``new_builtins``; collections the target no longer
    has are ``removed_builtins``.
    """
    snapshot = (
        source if isinstance(source, CatalogSnapshot) else CatalogSnapshot.from_release(source)
    )
    result, problems = _build_plan(
        snapshot,
        target,
        index=_InstructionIndex.of(target),
        fingerprints=target.fingerprints(),
        evolve_check=_check_evolution,
    )
    _raise_first(problems)
    log.debug(
        "plan_built",
        from_version=str(result.from_version),
        to_version=str(result.to_version),
        migrations=len(result.migrations),
        new=len(result.new_builtins),
        removed=len(result.removed_builtins),
    )
    return result


def _raise_first(problems: Sequence[_Problem]) -> None:
    for reason in _REASON_ORDER:
        same = [p for p in problems if p.reason == reason]
        if not same:
            continue
        first = same[0].error
        if len(same) == 1 or isinstance(first, SchemaIncompatibleError):
            raise first
        names = [p.collection for p in same if p.collection is not None]
        raise PlanError(
            f"{_REASON_TITLES[reason]}: {', '.join(names)}",
            reason=reason,
            collections=names,
            from_version=first.details.get("from_version"),
            to_version=first.details.get("to_version"),
        )


_REASON_TITLES: Final = MappingProxyType(
    {
        "downgrade": "downgrade not supported",
        "unknown-builtin": "instructions name unknown builtins",
        "global-id-reassigned": "GlobalIds reassigned to other builtins",
        "missing-instruction": "builtins changed schema without a migration instruction",
        "retain-data-replaced": "builtins that retain data are replaced",
        "incompatible-evolution": "evolutions are not backward compatible",
    }
)


def plan_path(
    releases: Sequence[Release], from_version: str | Version, to_version: str | Version
) -> Plan:
    """Plan ``from_version -> to_version`` between two releases of a history.

    The source collections carry the schema history :func:`snapshot_at` builds, so an evolution
    re-adding a field dropped before ``from_version`` is refused here as it is by the shard.
    """
    target = find_release(releases, to_version)
    return plan(snapshot_at(releases, from_version), target)


# --- exhaustive validation -------------------------------------------------------------------


class _EvolutionCache:
    """Per-validation memo of fingerprints, fresh histories and ``evolve`` results.

    Schemas are keyed by identity (releases share schema objects, and every schema keyed here is
    held by the memo itself, so an id is never reused while cached) and then by fingerprint, so
    equal schemas declared twice still hit the memo.
    """

    __slots__ = ("_evolved", "_fingerprints", "_fresh")

    def __init__(self) -> None:
        self._fingerprints: dict[int, tuple[pa.Schema, str]] = {}
        self._fresh: dict[str, pa.Schema] = {}
        self._evolved: dict[
            tuple[int, str], tuple[pa.Schema, pa.Schema | SchemaIncompatibleError]
        ] = {}

    def fingerprint(self, schema: pa.Schema) -> str:
        """The fingerprint of ``schema``, computed once per schema object."""
        hit = self._fingerprints.get(id(schema))
        if hit is None:
            hit = (schema, fingerprint(schema))
            self._fingerprints[id(schema)] = hit
        return hit[1]

    def fresh(self, schema: pa.Schema) -> pa.Schema:
        """The history of a new shard created with ``schema``."""
        digest = self.fingerprint(schema)
        history = self._fresh.get(digest)
        if history is None:
            history = self._fresh[digest] = migration_type(schema)
        return history

    def evolve(self, history: pa.Schema, schema: pa.Schema) -> pa.Schema | SchemaIncompatibleError:
        """``evolve(history, schema)``, or the error it raises."""
        key = (id(history), self.fingerprint(schema))
        hit = self._evolved.get(key)
        if hit is None:
            result: pa.Schema | SchemaIncompatibleError
            try:
                result = evolve(history, schema)
            except SchemaIncompatibleError as exc:
                result = exc
            hit = self._evolved[key] = (history, result)
        return hit[1]

    def check(self, state: CollectionState, builtin: Builtin) -> SchemaIncompatibleError | None:
        """The :data:`EvolveCheck` validate uses: memoised per (history, target schema)."""
        result = self.evolve(state.migration_history(), builtin.schema)
        return result if isinstance(result, SchemaIncompatibleError) else None


def _walk_histories(
    ordered: Sequence[Release], indexes: Sequence[_InstructionIndex], cache: _EvolutionCache
) -> list[CatalogSnapshot]:
    """The catalog state after each release of ``ordered``, upgraded one release at a time.

    A collection's history is evolved through every release in version order whose instructions
    evolve it, and starts afresh when it is created, replaced or rewritten (a new shard), or when
    a step is broken (missing instruction or incompatible evolution: that step fails validation
    on its own, and later paths are judged from the release that introduced the change).
    """
    snapshots: list[CatalogSnapshot] = []
    previous: dict[str, CollectionState] = {}
    previous_version: Version | None = None
    for release, index in zip(ordered, indexes, strict=True):
        states: list[CollectionState] = []
        for builtin in release.builtins:
            digest = cache.fingerprint(builtin.schema)
            prior = previous.get(builtin.global_id)
            history: pa.Schema | None = None
            if prior is not None and prior.name == builtin.name and previous_version is not None:
                instructions = index.in_range(builtin.name, previous_version, release.version)
                mechanism = _merge(instructions) if instructions else None
                if mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE):
                    history = None
                elif digest == prior.fingerprint:
                    history = prior.history
                elif mechanism is Mechanism.EVOLUTION:
                    evolved = cache.evolve(prior.migration_history(), builtin.schema)
                    history = evolved if isinstance(evolved, pa.Schema) else None
            if history is None:
                history = cache.fresh(builtin.schema)
            states.append(
                CollectionState(builtin.global_id, builtin.name, digest, builtin.schema, history)
            )
        snapshots.append(CatalogSnapshot(release.version, tuple(states)))
        previous = {s.global_id: s for s in states}
        previous_version = release.version
    return snapshots


def snapshot_at(releases: Sequence[Release], version: str | Version) -> CatalogSnapshot:
    """The catalog state at ``version`` after upgrading through every earlier release in order.

    Each collection carries its schema history (migration type with tombstones): evolved through
    every release up to ``version`` that evolved it, restarted by a replacement or rewrite.
    """
    ordered = _ordered(releases)
    wanted = find_release(ordered, version).version
    upto = [r for r in ordered if r.version <= wanted]
    cache = _EvolutionCache()
    return _walk_histories(upto, [_InstructionIndex.of(r) for r in upto], cache)[-1]


def _ordered(releases: Iterable[Release]) -> list[Release]:
    ordered = sorted(releases, key=lambda r: r.version)
    for before, after in itertools.pairwise(ordered):
        if before.version == after.version:
            raise ReleaseError(
                f"two releases at version {after.version}", version=str(after.version)
            )
    return ordered


@attrs.frozen
class PathFailure:
    """One reason the upgrade path ``from_version -> to_version`` fails.

    ``reason`` is a stable id: ``missing-instruction``, ``incompatible-evolution`` (the error
    carries the schema rule, e.g. ``field-readded``), ``instruction-removed``, ``backport``,
    ``retain-data-replaced``, ``unknown-builtin`` or ``global-id-reassigned``. ``collection`` is
    the culprit ``schema.object``; ``error`` the refusal the planner would raise on that path.
    """

    from_version: Version
    to_version: Version
    reason: str
    collection: str | None
    error: CatalogError = attrs.field(eq=False)

    @property
    def message(self) -> str:
        """The human explanation."""
        return self.error.message

    @property
    def rule(self) -> str | None:
        """The schema rule broken, for ``incompatible-evolution``."""
        return getattr(self.error, "rule", None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description of this failure."""
        described = self.error.to_json()
        for key in ("message", "exit_code", "reason", "from_version", "to_version", "collections"):
            described.pop(key, None)
        return {
            "from": str(self.from_version),
            "to": str(self.to_version),
            "reason": self.reason,
            "collection": self.collection,
            "message": self.message,
            **described,
        }


@attrs.frozen
class ValidationReport:
    """The result of :func:`validate`: every path checked and every failure found."""

    releases: tuple[Version, ...]
    paths_checked: int
    failures: tuple[PathFailure, ...]

    @property
    def ok(self) -> bool:
        """True when every upgrade path works."""
        return not self.failures

    def failing_paths(self) -> list[tuple[Version, Version]]:
        """The distinct failing ``(from, to)`` pairs, in order."""
        return sorted({(f.from_version, f.to_version) for f in self.failures})

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (the ``validate --json`` output)."""
        return {
            "ok": self.ok,
            "releases": [str(v) for v in self.releases],
            "paths_checked": self.paths_checked,
            "failing_paths": len(self.failing_paths()),
            "failures": [f.to_json() for f in self.failures],
        }


def validate(releases: Iterable[Release]) -> ValidationReport:
    """Check every pair ``X < Y`` of ``releases`` as an upgrade path.

    For each path this runs the planner from the catalog state at ``X`` (histories as
    :func:`snapshot_at` builds them, the strictest history a shard at ``X`` can have) to ``Y``,
    and compares the instruction lists: an instruction of ``X`` missing from ``Y`` is
    ``instruction-removed``, or ``backport`` when ``X`` is a patch release, the instruction belongs
    to ``X``'s patch line and ``Y`` is a later release line. Fingerprints and ``evolve`` results are
    memoised, so the cost grows with the number of distinct schemas, not paths times builtins.
    """
    ordered = _ordered(releases)
    cache = _EvolutionCache()
    indexes = [_InstructionIndex.of(r) for r in ordered]
    fingerprints = [{b.global_id: cache.fingerprint(b.schema) for b in r.builtins} for r in ordered]
    snapshots = _walk_histories(ordered, indexes, cache)
    failures: list[PathFailure] = []
    for i, source in enumerate(snapshots):
        current = source.by_global_id()
        for j in range(i + 1, len(ordered)):
            _, problems = _build_plan(
                source,
                ordered[j],
                index=indexes[j],
                fingerprints=fingerprints[j],
                evolve_check=cache.check,
                current=current,
            )
            for problem in problems:
                failures.append(
                    PathFailure(
                        source.version,
                        ordered[j].version,
                        problem.reason,
                        problem.collection,
                        problem.error,
                    )
                )
            failures.extend(_removed_instructions(ordered[i], indexes[i], indexes[j]))
    failures.sort(key=lambda f: (f.from_version, f.to_version, f.reason, f.collection or ""))
    n = len(ordered)
    report = ValidationReport(tuple(r.version for r in ordered), n * (n - 1) // 2, tuple(failures))
    log.debug(
        "releases_validated",
        releases=n,
        paths=report.paths_checked,
        failures=len(report.failures),
    )
    return report


def _removed_instructions(
    source: Release, source_index: _InstructionIndex, target_index: _InstructionIndex
) -> list[PathFailure]:
    low, high = source.version, target_index.version
    failures = []
    for key in sorted(source_index.keys - target_index.keys, key=lambda k: (k[0], k[1])):
        version, name, kind, mechanism = key
        described = f"{version} {name} ({kind}) {mechanism.value}"
        backport = (
            low.is_patch and version.line == low.line and version.is_patch and high.line > low.line
        )
        if backport:
            reason = "backport"
            message = (
                f"patch release {low} carries instruction {described} that the later release "
                f"{high} lacks: backported migrations must be carried forward"
            )
        else:
            reason = "instruction-removed"
            message = f"release {high} removed instruction {described} that {low} has"
        error = PlanError(
            message,
            reason=reason,
            collections=[name],
            instruction=described,
            from_version=str(low),
            to_version=str(high),
            suggestion=f"keep {described} in the MIGRATIONS of {high} and every later release",
        )
        failures.append(PathFailure(low, high, reason, name, error))
    return failures
