"""The catalog's collections as a plan's starting point (schemas and fingerprints by GlobalId)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import pyarrow as pa

from catalog.release.manifest import Builtin, Release, reject_duplicates
from catalog.release.version import Version, to_version
from catalog.schema import migration_type


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

    version: Version = attrs.field(converter=to_version)
    collections: tuple[CollectionState, ...] = attrs.field(converter=_to_states)

    def __attrs_post_init__(self) -> None:
        reject_duplicates(self.version, [c.global_id for c in self.collections], "global_id")

    @classmethod
    def from_release(cls, release: Release) -> CatalogSnapshot:
        """The state of a catalog whose durable version is ``release`` (histories unknown)."""
        return cls(release.version, tuple(CollectionState.of(b) for b in release.builtins))

    def by_global_id(self) -> dict[str, CollectionState]:
        """Collections keyed by GlobalId."""
        return {c.global_id: c for c in self.collections}
