"""Invariants of the durable state: one leader per epoch, read-only processes write nothing of
others', one replacement per key, referenced shards live, every newer release can start."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import structlog

from catalog.environment import (
    MIGRATION_SHARD_ID,
)
from catalog.errors import CatalogError
from catalog.release import (
    Release,
    Version,
    plan,
    plan_path,
)
from orchestrator.process_node import READY_STATES, ProcessState
from orchestrator.scenario.invariants.view import (
    DurableView,
    Violation,
    durable_snapshot,
)

log = structlog.get_logger(__name__)


@attrs.define
class DurableRules:
    """Each method checks one invariant on a :class:`DurableView` and returns its violations;
    it remembers what it needs across steps (each epoch's leader, plans already checked)."""

    releases: Sequence[Release]
    epoch_leaders: dict[int, str] = attrs.field(factory=dict)
    highest_epoch: int = 0
    _planned: dict[Any, list[Violation]] = attrs.field(factory=dict, init=False)
    _paths: dict[tuple[str, str], bool] = attrs.field(factory=dict, init=False)

    def single_leader(self, view: DurableView) -> list[Violation]:
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
                if node.is_leader
                and node.process_state is ProcessState.SERVING
                and node.epoch == number
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

    def read_only(self, before: DurableView, after: DurableView) -> list[Violation]:
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

    def agreement(self, view: DurableView) -> list[Violation]:
        found = []
        groups: dict[tuple[str, int], dict[str, dict[str, str]]] = collections.defaultdict(dict)
        for pid, node in view.processes.items():
            plan_ = node.plan
            if not node.in_states(READY_STATES) or not isinstance(plan_, Mapping):
                continue
            key = (node.version, node.deploy_generation)
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
            # One key may hold a shard per origin (made from successive catalogs), never two
            # made from one.
            by_origin: dict[object, set[str]] = collections.defaultdict(set)
            for shard_id in shard_ids:
                state = view.states.get(shard_id)
                by_origin[None if state is None else state.origin].add(shard_id)
            if any(len(same) > 1 for same in by_origin.values()):
                found.append(
                    Violation(
                        "replacement-agreement",
                        f"collection {gid} has {len(shard_ids)} live entries from one origin at "
                        f"({version}, {generation}): {shard_ids}",
                        {"global_id": gid, "version": version, "shards": shard_ids},
                    )
                )
        for (version, generation), members in sorted(groups.items()):
            gids = {gid for shards in members.values() for gid in shards}
            for gid in sorted(gids):
                named = {pid: shards.get(gid) for pid, shards in members.items()}
                distinct = {sid for sid in named.values() if sid is not None}
                entry = entries.get((version, generation, gid))
                if len(distinct) > 1 or (entry and distinct and not distinct <= set(entry)):
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

    def referenced(self, view: DurableView) -> list[Violation]:
        found = []
        catalog_shards = view.referenced_by_catalog()
        for shard_id in sorted(view.referenced()):
            state = view.states.get(shard_id)
            why = "the catalog" if shard_id in catalog_shards else "a live migration entry"
            if shard_id in view.previous_shards and shard_id not in catalog_shards:
                why = "the release a pending upgrade came from (not finalized yet)"
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

    def releases_start(self, view: DurableView) -> list[Violation]:
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
            snapshot = durable_snapshot(catalog, present)
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
