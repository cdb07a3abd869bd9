"""The rows invariant: an acknowledged row is never lost, an unknown outcome lands at most once."""

from __future__ import annotations

import collections
import copy
from collections.abc import Sequence

import attrs
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.errors import CatalogError
from catalog.release import (
    Mechanism,
    Release,
    Version,
    plan_path,
)
from catalog.shard import DIFF, Shard, ShardState
from orchestrator.scenario.invariants.view import (
    DurableView,
    TrackedRows,
    Violation,
)

log = structlog.get_logger(__name__)


@attrs.define
class RowRules:
    """Checks the tracked rows against what every collection reads."""

    consensus: Consensus
    blob: BlobStore
    releases: Sequence[Release]
    tracked: dict[str, TrackedRows]
    _catalog_seen: tuple[str, int] | None = attrs.field(default=None, init=False)
    # Per upgraded version, what each collection it replaced or rewrote held before it (None:
    # nothing tracked then), for a rollback to restore.
    _before: dict[str, dict[str, TrackedRows | None]] = attrs.field(factory=dict, init=False)

    def rows(self, view: DurableView) -> list[Violation]:
        catalog = view.catalog
        if catalog is None:
            return []
        if self._catalog_seen is not None:
            self.moved(self._catalog_seen[0], catalog.version)
        self._catalog_seen = (catalog.version, catalog.deploy_generation)
        found = []
        by_name = catalog.by_name()
        for name, tracked in sorted(self.tracked.items()):
            ref = by_name.get(name)
            if ref is None:
                continue
            state = view.states.get(ref.shard_id)
            if state is None or state.finalized:
                continue  # referenced-not-finalized reports it
            present = self._tokens(Shard(self.consensus, self.blob, ref.shard_id), state, tracked)
            missing = sorted(t for t, n in tracked.acked.items() if present[t] < n)
            doubled = sorted(
                t
                for t, n in present.items()
                if n > tracked.acked.get(t, 0) + (1 if t in tracked.uncertain else 0)
            )
            if missing or doubled:
                found.append(
                    Violation(
                        "rows-never-lost",
                        f"collection {name} (shard {ref.shard_id}): "
                        + (
                            f"{len(missing)} acknowledged row(s) lost {missing[:5]}"
                            if missing
                            else ""
                        )
                        + ("; " if missing and doubled else "")
                        + (
                            f"{len(doubled)} row(s) nobody wrote or written twice {doubled[:5]}"
                            if doubled
                            else ""
                        ),
                        {"collection": name, "missing": missing[:20], "unexpected": doubled[:20]},
                    )
                )
        return found

    def moved(self, old: str, new: str) -> None:
        """The catalog moved from version ``old`` to ``new`` (an upgrade, or a rollback):
        what each collection must hold changes with it. A walk that saw it happen says so at
        once (its later checks then see no move)."""
        if old == new:
            return
        if Version.parse(new) < Version.parse(old):
            self._roll_back(old, new)
        else:
            self._forget_replaced(old, new)
        self._catalog_seen = (new, -1)

    def _tokens(
        self, shard: Shard, state: ShardState, tracked: TrackedRows
    ) -> collections.Counter[str]:
        if state.upper == 0:
            return collections.Counter()
        table = shard.snapshot_of(state)
        if tracked.token_column not in table.column_names:
            return collections.Counter()
        tokens = table.column(tracked.token_column).to_pylist()
        diffs = table.column(DIFF).to_pylist()
        counts: collections.Counter[str] = collections.Counter()
        for token, diff in zip(tokens, diffs, strict=True):
            counts[str(token)] += int(diff)
        return counts

    def _forget_replaced(self, old_version: str, new_version: str) -> None:
        """A replacement between the versions dropped the collection's rows: expect none."""
        try:
            merged = plan_path(self.releases, old_version, new_version)
        except CatalogError:
            return
        self._before[new_version] = {
            m.name: copy.deepcopy(self.tracked[m.name]) if m.name in self.tracked else None
            for m in merged.migrations
            if m.mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE)
        }
        for migration in merged.migrations:
            if migration.mechanism is Mechanism.REPLACEMENT and migration.name in self.tracked:
                tracked = self.tracked[migration.name]
                tracked.acked.clear()
                tracked.uncertain.clear()
        for removed in merged.removed_builtins:
            self.tracked.pop(removed.name, None)

    def _roll_back(self, version: str, previous: str) -> None:
        """``version`` was rolled back to ``previous``: each collection it replaced or rewrote
        reads its old shard again, with the rows written under ``version`` carried back where
        its release declares an inverse (the walk passes it) and discarded elsewhere; the rows of
        collections ``version`` added are discarded (the walk names them)."""
        from orchestrator.migrate.rollback import inverse_chain

        before = self._before.pop(version, {})
        try:
            merged = plan_path(self.releases, previous, version)
        except CatalogError:
            return
        release = next(r for r in self.releases if str(r.version) == version)
        for added in merged.new_builtins:  # ``previous`` has no place for them: discarded
            self.tracked.pop(added.name, None)
        for migration in merged.migrations:
            name = migration.name
            if name not in before or name not in self.tracked:
                continue
            carried = inverse_chain(release, name, Version.parse(previous)) is not None
            now, then = self.tracked[name], before[name]
            if then is None:  # first written after the upgrade: carried back, or discarded
                if not carried:
                    del self.tracked[name]
            elif not carried:
                self.tracked[name] = then
            elif migration.mechanism is Mechanism.REPLACEMENT:
                then.acked.update(now.acked)
                then.uncertain.update(now.uncertain)
                self.tracked[name] = then
