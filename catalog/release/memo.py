"""The per-validation memo: fingerprints, fresh histories and ``evolve`` results, each computed
once however many upgrade paths ask (catalog.release.validation)."""

from __future__ import annotations

import pyarrow as pa

from catalog.errors import SchemaIncompatibleError
from catalog.release.manifest import Builtin
from catalog.release.planning import CollectionState
from catalog.schema import evolve, fingerprint, migration_type
from catalog.schema.ids import declared_renames, field_paths

__all__ = ["EvolutionCache"]


class EvolutionCache:
    """Per-validation memo of fingerprints, fresh histories and ``evolve`` results.

    Schemas are keyed by identity (releases share schema objects, and every schema keyed here is
    held by the memo itself, so an id is never reused while cached) and then by fingerprint, so
    equal schemas declared twice still hit the memo.
    """

    __slots__ = ("_evolved", "_fingerprints", "_fresh", "_paths", "_renames")

    def __init__(self) -> None:
        self._fingerprints: dict[int, tuple[pa.Schema, str]] = {}
        self._renames: dict[int, tuple[pa.Schema, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
        self._paths: dict[int, tuple[pa.Schema, frozenset[str]]] = {}
        self._fresh: dict[str, pa.Schema] = {}
        self._evolved: dict[
            tuple[int, str, tuple[object, ...]],
            tuple[pa.Schema, pa.Schema | SchemaIncompatibleError],
        ] = {}

    def fingerprint(self, schema: pa.Schema) -> str:
        """The fingerprint of ``schema``, computed once per schema object."""
        hit = self._fingerprints.get(id(schema))
        if hit is None:
            hit = (schema, fingerprint(schema))
            self._fingerprints[id(schema)] = hit
        return hit[1]

    def renames(self, schema: pa.Schema) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The renames ``schema`` declares, computed once per schema object."""
        hit = self._renames.get(id(schema))
        if hit is None:
            hit = self._renames[id(schema)] = (schema, declared_renames(schema))
        return hit[1]

    def paths(self, schema: pa.Schema) -> frozenset[str]:
        """The dotted paths of ``schema``'s fields, computed once per schema object."""
        hit = self._paths.get(id(schema))
        if hit is None:
            hit = self._paths[id(schema)] = (schema, field_paths(schema))
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
        # The declared renames too: a fingerprint ignores metadata, and two schemas equal but
        # for a declaration evolve differently (a rename, or a deletion and an addition).
        key = (id(history), self.fingerprint(schema), self.renames(schema))
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
