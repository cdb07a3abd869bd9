"""Safety invariants of an upgrade environment, checked from its durable state.

:class:`InvariantChecker` reads ZooKeeper (and the blob store) directly through ``catalog``
(consensus, state, shard, migration), never through the processes it checks, after every step
of a scenario or a simulated walk. Each invariant has a stable id:

``single-leader``
    an epoch names one leader forever; epochs never go back; at most one process node claims to
    serve as leader of the current epoch, and it is the one the epoch names.
``no-stale-write``
    a write acknowledged by a process that was no longer the epoch's leader when the write was
    sent (a zombie) -- reported by the caller through :meth:`InvariantChecker.stale_write`.
``read-only-writes-nothing``
    across a step without a takeover, nothing durable changes outside the keys read-only
    processes own: the catalog, the epoch, the promotion target, the states
    of shards the catalog references, and migration-shard entries other than their own
    ``(version, generation)``.
``replacement-agreement``
    processes of one ``(version, generation)`` that are ready name the same replacement shard
    per collection, that shard is the migration shard's one entry for it, and once that
    ``(version, generation)`` is the catalog's, the catalog names those shards.
``rows-never-lost``
    every acknowledged row of a collection is in the collection's current shard exactly once
    (rewrites transform rows, they never drop or duplicate them), unless a replacement dropped
    the collection's data since; no row appears that nobody wrote.
``releases-can-start``
    every release of the history not older than the catalog version, whose upgrade path from
    the catalog version the history itself allows, plans cleanly against the durable state
    (the catalog, fingerprints and every shard's whole schema history).
``referenced-not-finalized``
    shards named by the catalog or by a live migration entry exist and are not finalized; the
    catalog's shards are not sealed either.
``unreferenced-cleaned``
    (final check, after the leader's finalizer ran) every shard nobody references is finalized.

The plan of ``releases-can-start`` is rebuilt here from shard states rather than by calling the
orchestrator's own helper: an invariant must not share the code it checks.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import (
    EPOCH_KEY,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    PROCESSES_KEY,
    PROMOTION_KEY,
    SHARDS_KEY,
    CatalogState,
    read_catalog,
)
from catalog.errors import CatalogError
from catalog.migration import MigrationEntry, MigrationShard
from catalog.release import (
    CatalogSnapshot,
    CollectionState,
    Mechanism,
    Release,
    Version,
    plan,
    plan_path,
)
from catalog.schema import fingerprint
from catalog.shard import DIFF, Shard, ShardState, read_states

__all__ = [
    "INVARIANTS",
    "DurableView",
    "InvariantChecker",
    "TrackedRows",
    "Violation",
    "describe",
]

log = structlog.get_logger(__name__)

INVARIANTS = (
    "single-leader",
    "no-stale-write",
    "read-only-writes-nothing",
    "replacement-agreement",
    "rows-never-lost",
    "releases-can-start",
    "referenced-not-finalized",
    "unreferenced-cleaned",
)


@attrs.frozen
class Violation:
    """An invariant that did not hold, with what was seen."""

    invariant: str
    message: str
    details: Mapping[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "message": self.message, **self.details}

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message}"


@attrs.frozen
class DurableView:
    """One read of everything the invariants look at."""

    catalog: CatalogState | None
    catalog_version: int | None
    epoch: Mapping[str, Any] | None
    promotion: Mapping[str, Any] | None
    processes: Mapping[str, Mapping[str, Any]]
    states: Mapping[str, ShardState | None]  # every shard under shards/
    entries: tuple[MigrationEntry, ...]
    finalize_queue: tuple[str, ...]

    @property
    def epoch_number(self) -> int | None:
        return int(self.epoch["epoch"]) if self.epoch else None

    def referenced_by_catalog(self) -> set[str]:
        return self.catalog.shard_ids() if self.catalog is not None else set()

    def referenced(self) -> set[str]:
        return (
            self.referenced_by_catalog() | {e.shard_id for e in self.entries} | {MIGRATION_SHARD_ID}
        )

    @classmethod
    def read(cls, consensus: Consensus, blob: BlobStore) -> DurableView:
        found = read_catalog(consensus)
        heads = consensus.get_many([EPOCH_KEY, PROMOTION_KEY])
        names = consensus.children(PROCESSES_KEY)
        nodes = consensus.get_many([f"{PROCESSES_KEY}/{n}" for n in names])
        processes = {}
        for name in names:
            node = nodes[f"{PROCESSES_KEY}/{name}"]
            value = node.json() if node is not None and node.value else None
            if isinstance(value, dict):
                processes[name] = value
        shard_ids = consensus.children(SHARDS_KEY)
        states = read_states(consensus, shard_ids) if shard_ids else {}
        entries: tuple[MigrationEntry, ...] = ()
        if states.get(MIGRATION_SHARD_ID) is not None:
            entries = tuple(MigrationShard(consensus, blob).entries())
        epoch = heads[EPOCH_KEY]
        promotion = heads[PROMOTION_KEY]
        return cls(
            catalog=found[0] if found else None,
            catalog_version=found[1] if found else None,
            epoch=epoch.json() if epoch is not None and epoch.value else None,
            promotion=promotion.json() if promotion is not None and promotion.value else None,
            processes=processes,
            states=states,
            entries=entries,
            finalize_queue=tuple(consensus.children(FINALIZE_KEY)),
        )

    def read_only_keys(self) -> set[tuple[str, int]]:
        """``(version, generation)`` of every read-only process registered."""
        return {
            (str(node.get("version")), int(node.get("deploy_generation", -1)))
            for node in self.processes.values()
            if node.get("mode") != "leader"
        }

    def foreign_digest(self, own_keys: set[tuple[str, int]]) -> dict[str, Any]:
        """What read-only processes keyed ``own_keys`` must never change."""
        catalog_shards = sorted(self.referenced_by_catalog())
        return {
            "catalog": (
                None if self.catalog is None else (self.catalog.to_json(), self.catalog_version)
            ),
            "epoch": self.epoch,
            "promotion": self.promotion,
            "shards": {sid: _znode_version(self.states.get(sid)) for sid in catalog_shards},
            "entries": sorted(
                (e.global_id, e.version, e.deploy_generation, e.shard_id)
                for e in self.entries
                if (str(e.version), int(e.deploy_generation)) not in own_keys
            ),
        }


def _quiescent(view: DurableView) -> bool:
    """The epoch's leader serves its generation, which is the promotion target; nobody migrates."""
    epoch, promotion = view.epoch, view.promotion
    if epoch is None or promotion is None:
        return False
    leader = view.processes.get(str(epoch.get("leader")))
    return (
        leader is not None
        and leader.get("state") == "serving"
        and leader.get("epoch") == epoch.get("epoch")
        and promotion.get("deploy_generation") == epoch.get("deploy_generation")
        and not any(node.get("state") == "migrating" for node in view.processes.values())
    )


def _znode_version(state: ShardState | None) -> int | None:
    return None if state is None else state.version


@attrs.define
class TrackedRows:
    """Acknowledged rows of one collection, identified by a token column."""

    collection: str
    token_column: str
    acked: collections.Counter[str] = attrs.field(factory=collections.Counter)
    # Writes whose outcome is unknown (an error after the request was sent): may or may not land.
    uncertain: set[str] = attrs.field(factory=set)


def _durable_snapshot(catalog: CatalogState, states: Mapping[str, ShardState]) -> CatalogSnapshot:
    """The catalog as a plan sees it: each collection's cataloged schema and full history."""
    out = []
    for ref in catalog.collections.values():
        state = states[ref.shard_id]
        schema = state.live_schema if ref.schema is None else ref.schema
        for schema_id in range(len(state.schemas) - 1, -1, -1):
            if ref.schema is None and fingerprint(state.live(schema_id)) == ref.fingerprint:
                schema = state.live(schema_id)
                break
        out.append(CollectionState(ref.global_id, ref.name, ref.fingerprint, schema, state.schema))
    return CatalogSnapshot(version=catalog.version, collections=tuple(out))


@attrs.define
class InvariantChecker:
    """Checks the invariants of one environment after every step; counts checks and catches."""

    consensus: Consensus
    blob: BlobStore
    releases: Sequence[Release]
    epoch_leaders: dict[int, str] = attrs.field(factory=dict)
    highest_epoch: int = 0
    tracked: dict[str, TrackedRows] = attrs.field(factory=dict)
    checks: collections.Counter[str] = attrs.field(factory=collections.Counter)
    caught: collections.Counter[str] = attrs.field(factory=collections.Counter)
    _last: DurableView | None = attrs.field(default=None, init=False)
    _catalog_seen: tuple[str, int] | None = attrs.field(default=None, init=False)
    _planned: dict[Any, list[Violation]] = attrs.field(factory=dict, init=False)
    _paths: dict[tuple[str, str], bool] = attrs.field(factory=dict, init=False)

    # -- input from the caller -----------------------------------------------------------------

    def track(self, collection: str, token_column: str) -> TrackedRows:
        return self.tracked.setdefault(collection, TrackedRows(collection, token_column))

    def acknowledged(self, collection: str, tokens: Iterable[str]) -> None:
        self.tracked[collection].acked.update(tokens)

    def unknown_outcome(self, collection: str, tokens: Iterable[str]) -> None:
        self.tracked[collection].uncertain.update(tokens)

    def stale_write(self, process: str, leader: str | None, answer: str) -> Violation:
        """A write acknowledged by ``process`` while the epoch named ``leader``."""
        violation = Violation(
            "no-stale-write",
            f"{process} acknowledged a write while {leader} led the current epoch: {answer}",
            {"process": process, "leader": leader},
        )
        self._count("no-stale-write", [violation])
        return violation

    def no_stale_write_checked(self) -> None:
        self._count("no-stale-write", [])

    # -- checking ---------------------------------------------------------------------------------

    def view(self) -> DurableView:
        return DurableView.read(self.consensus, self.blob)

    def _count(self, invariant: str, found: list[Violation]) -> list[Violation]:
        self.checks[invariant] += 1
        if found:
            self.caught[invariant] += len(found)
        return found

    def check(self, *, writes_expected: bool, rows: bool = True) -> list[Violation]:
        """Every invariant but the final cleanup, after one step.

        ``writes_expected``: the step itself makes leaders write (append, promote, a fault that
        forces a takeover...). Otherwise, when the environment was quiescent before and after
        the step (the epoch's leader serving, nobody migrating, no takeover in between), nothing
        outside read-only processes' own keys may have changed.
        """
        view = self.view()
        found: list[Violation] = []
        found += self._count("single-leader", self._single_leader(view))
        before = self._last
        if (
            not writes_expected
            and before is not None
            and _quiescent(before)
            and _quiescent(view)
            and before.epoch_number == view.epoch_number
        ):
            found += self._count("read-only-writes-nothing", self._read_only(before, view))
        found += self._count("replacement-agreement", self._agreement(view))
        found += self._count("referenced-not-finalized", self._referenced(view))
        found += self._count("releases-can-start", self._releases_start(view))
        if rows:
            found += self._count("rows-never-lost", self._rows(view))
        self._last = view
        for violation in found:
            log.warning(
                "invariant_violated", invariant=violation.invariant, message=violation.message
            )
        return found

    def check_cleanup(self, timeout: float = 30.0) -> list[Violation]:
        """After the finalizer drained the queue: every unreferenced shard is finalized."""
        self._wait_queue_empty(timeout)
        view = self.view()
        found = []
        for shard_id, state in sorted(view.states.items()):
            if shard_id in view.referenced() or state is None:
                continue
            if not state.finalized:
                queued = shard_id in view.finalize_queue
                found.append(
                    Violation(
                        "unreferenced-cleaned",
                        f"shard {shard_id} is referenced by neither the catalog nor a migration "
                        f"entry, yet not finalized{' (still queued)' if queued else ''}",
                        {"shard_id": shard_id, "queued": queued, "upper": state.upper},
                    )
                )
        return self._count("unreferenced-cleaned", found)

    def _wait_queue_empty(self, timeout: float) -> None:
        changed = threading.Event()
        deadline = time.monotonic() + timeout
        path = self.consensus.path(FINALIZE_KEY)
        while True:
            changed.clear()
            try:
                queued = self.consensus.client.get_children(path, watch=lambda _e: changed.set())
            except NoNodeError:
                return
            remaining = deadline - time.monotonic()
            if not queued or remaining <= 0:
                return
            changed.wait(min(remaining, 1.0))

    # -- the invariants ---------------------------------------------------------------------------

    def _single_leader(self, view: DurableView) -> list[Violation]:
        found = []
        epoch = view.epoch
        if epoch is not None:
            number, leader = int(epoch["epoch"]), str(epoch.get("leader"))
            known = self.epoch_leaders.setdefault(number, leader)
            if known != leader:
                found.append(
                    Violation(
                        "single-leader",
                        f"epoch {number} named leader {known}, now {leader}",
                        {"epoch": number, "leaders": [known, leader]},
                    )
                )
            if number < self.highest_epoch:
                found.append(
                    Violation(
                        "single-leader",
                        f"the epoch went back from {self.highest_epoch} to {number}",
                        {"epoch": number, "highest": self.highest_epoch},
                    )
                )
            self.highest_epoch = max(self.highest_epoch, number)
            serving = sorted(
                pid
                for pid, node in view.processes.items()
                if node.get("mode") == "leader"
                and node.get("state") == "serving"
                and node.get("epoch") == number
            )
            if len(serving) > 1 or (serving and serving != [leader]):
                found.append(
                    Violation(
                        "single-leader",
                        f"processes {serving} serve as leaders of epoch {number}, which names "
                        f"{leader}",
                        {"epoch": number, "serving": serving, "leader": leader},
                    )
                )
        return found

    def _read_only(self, before: DurableView, after: DurableView) -> list[Violation]:
        own_keys = before.read_only_keys() | after.read_only_keys()
        old = before.foreign_digest(own_keys)
        new = after.foreign_digest(own_keys)
        changed = sorted(key for key in old if old[key] != new[key])
        if not changed:
            return []
        if changed == ["shards"]:
            moved = sorted(
                sid
                for sid in set(old["shards"]) | set(new["shards"])
                if old["shards"].get(sid) != new["shards"].get(sid)
            )
            what = f"states of catalog shards {moved[:5]}"
        else:
            what = ", ".join(changed)
        return [
            Violation(
                "read-only-writes-nothing",
                f"a step with only read-only processes at work changed {what}",
                {"changed": changed, "own_keys": sorted(own_keys)},
            )
        ]

    def _agreement(self, view: DurableView) -> list[Violation]:
        found = []
        groups: dict[tuple[str, int], dict[str, dict[str, str]]] = collections.defaultdict(dict)
        for pid, node in view.processes.items():
            plan_ = node.get("plan")
            if node.get("state") not in ("ready", "serving") or not isinstance(plan_, Mapping):
                continue
            key = (str(node.get("version")), int(node.get("deploy_generation", -1)))
            shards = {
                str(m["global_id"]): str(m["shard_id"])
                for m in plan_.get("migrations") or ()
                if isinstance(m, Mapping) and m.get("shard_id")
            }
            groups[key][pid] = shards
        entries: dict[tuple[str, int, str], list[str]] = collections.defaultdict(list)
        for e in view.entries:
            entries[(str(e.version), int(e.deploy_generation), e.global_id)].append(e.shard_id)
        for (version, generation, gid), shard_ids in sorted(entries.items()):
            if len(set(shard_ids)) > 1:
                found.append(
                    Violation(
                        "replacement-agreement",
                        f"collection {gid} has {len(shard_ids)} live entries at ({version}, "
                        f"{generation}): {shard_ids}",
                        {"global_id": gid, "version": version, "shards": shard_ids},
                    )
                )
        for (version, generation), members in sorted(groups.items()):
            gids = {gid for shards in members.values() for gid in shards}
            for gid in sorted(gids):
                named = {pid: shards.get(gid) for pid, shards in members.items()}
                distinct = {sid for sid in named.values() if sid is not None}
                entry = entries.get((version, generation, gid))
                if len(distinct) > 1 or (entry and distinct and distinct != set(entry)):
                    found.append(
                        Violation(
                            "replacement-agreement",
                            f"processes of ({version}, {generation}) disagree on the replacement "
                            f"shard of {gid}: {named}, migration shard {entry}",
                            {"global_id": gid, "processes": named, "entries": entry},
                        )
                    )
        catalog = view.catalog
        if catalog is not None:
            for (version, generation, gid), shard_ids in sorted(entries.items()):
                ref = catalog.collections.get(gid)
                if (
                    version == catalog.version
                    and generation == catalog.deploy_generation
                    and ref is not None
                    and ref.shard_id not in shard_ids
                ):
                    found.append(
                        Violation(
                            "replacement-agreement",
                            f"the catalog at ({version}, {generation}) names shard {ref.shard_id} "
                            f"for {gid}, but its entry names {shard_ids}",
                            {"global_id": gid, "catalog": ref.shard_id, "entries": shard_ids},
                        )
                    )
        return found

    def _referenced(self, view: DurableView) -> list[Violation]:
        found = []
        catalog_shards = view.referenced_by_catalog()
        for shard_id in sorted(view.referenced()):
            state = view.states.get(shard_id)
            why = "the catalog" if shard_id in catalog_shards else "a live migration entry"
            if shard_id == MIGRATION_SHARD_ID:
                if state is None and view.catalog is None:
                    continue
                why = "everyone (the migration shard)"
            if state is None:
                found.append(
                    Violation(
                        "referenced-not-finalized",
                        f"shard {shard_id}, referenced by {why}, does not exist",
                        {"shard_id": shard_id},
                    )
                )
            elif state.finalized or (shard_id in catalog_shards and state.sealed):
                found.append(
                    Violation(
                        "referenced-not-finalized",
                        f"shard {shard_id}, referenced by {why}, is "
                        f"{'finalized' if state.finalized else 'sealed'}",
                        {"shard_id": shard_id, "finalized": state.finalized},
                    )
                )
        return found

    def _releases_start(self, view: DurableView) -> list[Violation]:
        catalog = view.catalog
        if catalog is None:
            return []
        states = {sid: view.states.get(sid) for sid in catalog.shard_ids()}
        key = (
            view.catalog_version,
            tuple(sorted((sid, s.version if s else -1) for sid, s in states.items())),
        )
        if key in self._planned:
            return self._planned[key]
        found = []
        present = {sid: s for sid, s in states.items() if s is not None}
        if len(present) == len(states):
            snapshot = _durable_snapshot(catalog, present)
            current = Version.parse(catalog.version)
            for release in self.releases:
                if release.version < current or not self._path_valid(catalog.version, release):
                    continue
                try:
                    plan(snapshot, release)
                except CatalogError as exc:
                    found.append(
                        Violation(
                            "releases-can-start",
                            f"release {release.version} cannot start against the durable state "
                            f"at {catalog.version}: {exc.message}",
                            {"release": str(release.version), "error": exc.to_json()},
                        )
                    )
        self._planned[key] = found
        return found

    def _path_valid(self, from_version: str, release: Release) -> bool:
        """Whether the history itself allows ``from_version -> release`` (a broken release of a
        broken history cannot start anywhere; that is validate's finding, not the state's)."""
        key = (from_version, str(release.version))
        if key not in self._paths:
            try:
                plan_path(self.releases, from_version, release.version)
            except CatalogError:
                self._paths[key] = False
            else:
                self._paths[key] = True
        return self._paths[key]

    def _rows(self, view: DurableView) -> list[Violation]:
        catalog = view.catalog
        if catalog is None:
            return []
        seen = (catalog.version, catalog.deploy_generation)
        if self._catalog_seen is not None and self._catalog_seen[0] != catalog.version:
            self._forget_replaced(self._catalog_seen[0], catalog.version)
        self._catalog_seen = seen
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
        for migration in merged.migrations:
            if migration.mechanism is Mechanism.REPLACEMENT and migration.name in self.tracked:
                tracked = self.tracked[migration.name]
                tracked.acked.clear()
                tracked.uncertain.clear()
        for removed in merged.removed_builtins:
            self.tracked.pop(removed.name, None)

    def summary(self) -> dict[str, Any]:
        return {
            name: {"checks": self.checks.get(name, 0), "caught": self.caught.get(name, 0)}
            for name in INVARIANTS
        }


def describe(found: Sequence[Violation]) -> str:
    return "; ".join(str(v) for v in found)
