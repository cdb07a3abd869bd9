"""Release manifests, fingerprints, migration plans and exhaustive validation of upgrade paths.

A *release* is one product version's definition: its builtin collections and its full
``MIGRATIONS`` list, written as plain Python and loaded by file path or ``module:ATTR`` the way
Alembic loads revision scripts. Everything except the loader is pure logic over values, like
Alembic's ``RevisionMap``: no ZooKeeper, no blobs, no Spark.

* :mod:`.version` -- semantic versions (semver 2.0 precedence; build metadata is refused);
* :mod:`.manifest` -- :class:`Release`, :class:`Builtin`, :class:`Migration`, :class:`Mechanism`;
* :mod:`.loader` -- loading a release file, module or directory;
* :mod:`.snapshot` -- the catalog's collections as a plan's starting point;
* :mod:`.planning` and :mod:`.problems` -- :func:`plan` merges one upgrade's instructions into one
  :class:`PlannedMigration` per collection, refusing with the first problem found;
* :mod:`.validation` -- :func:`validate` checks every pair ``X < Y`` of a history as a path.

Conventions: builtin kinds are the closed set :data:`KINDS`; mechanisms merge by precedence
``rewrite > replacement > evolution``; instructions are matched to builtins by name, builtins to
catalog collections by GlobalId. An in-range instruction naming a builtin of neither end of the
path is ignored (the builtin was added and removed in between) unless it is an instruction of the
target release itself, which must always name one of the target's builtins."""

from __future__ import annotations

from catalog.release.loader import find_release, load_release, load_release_dir
from catalog.release.manifest import (
    KINDS,
    RELEASE_ATTRIBUTE,
    Builtin,
    Mechanism,
    Migration,
    Release,
    Transform,
)
from catalog.release.planning import Plan, PlannedMigration, SchemaDiff, plan
from catalog.release.snapshot import CatalogSnapshot, CollectionState
from catalog.release.validation import (
    PathFailure,
    ValidationReport,
    plan_path,
    snapshot_at,
    validate,
)
from catalog.release.version import Version

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
