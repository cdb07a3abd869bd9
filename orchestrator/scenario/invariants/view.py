"""The durable state invariants are checked on, read in one pass; violations and tracked rows."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    PENDING_KEY,
    PROMOTION_KEY,
    SHARDS_KEY,
    CatalogState,
    read_catalog,
)
from catalog.migration import MigrationEntry, MigrationShard
from catalog.pending import read_pending
from catalog.release import (
    CatalogSnapshot,
    CollectionState,
)
from catalog.schema import fingerprint
from catalog.shard import ShardState, body_key, read_states, shard_key
from orchestrator.process_node import ProcessNode, ProcessState, read_processes

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


def _heads(consensus: Consensus) -> list[int]:
    """The versions of the catalog and of the migration shard's halves (-1: absent)."""
    found = consensus.get_many(
        [CATALOG_KEY, PENDING_KEY, shard_key(MIGRATION_SHARD_ID), body_key(MIGRATION_SHARD_ID)]
    )
    return [-1 if v is None else v.version for v in found.values()]


@attrs.frozen
class DurableView:
    """One read of everything the invariants look at."""

    catalog: CatalogState | None
    catalog_version: int | None
    epoch: Mapping[str, Any] | None
    promotion: Mapping[str, Any] | None
    processes: Mapping[str, ProcessNode]
    states: Mapping[str, ShardState | None]  # every shard under shards/
    entries: tuple[MigrationEntry, ...]
    finalize_queue: tuple[str, ...]
    # The shards the release a pending upgrade came from needs (empty: the version is final).
    previous_shards: frozenset[str] = frozenset()

    @property
    def epoch_number(self) -> int | None:
        return int(self.epoch["epoch"]) if self.epoch else None

    def referenced_by_catalog(self) -> set[str]:
        return self.catalog.shard_ids() if self.catalog is not None else set()

    def referenced(self) -> set[str]:
        return (
            self.referenced_by_catalog()
            | {e.shard_id for e in self.entries}
            | {MIGRATION_SHARD_ID}
            | self.previous_shards
        )

    @classmethod
    def read(cls, consensus: Consensus, blob: BlobStore, attempts: int = 10) -> DurableView:
        """A view consistent across the catalog and the migration shard: the reads are
        repeated until neither changed while the shards were read, so a shard created and
        named by an entry between two reads, or finalized after a catalog switch, is never
        taken for a violation. After ``attempts`` the last view is returned as it is."""
        for _ in range(max(1, attempts)):
            before = _heads(consensus)
            view = cls._read_parts(consensus, blob)
            if _heads(consensus) == before:
                break
        return view

    @classmethod
    def _read_parts(cls, consensus: Consensus, blob: BlobStore) -> DurableView:
        found = read_catalog(consensus)
        heads = consensus.get_many([EPOCH_KEY, PROMOTION_KEY])
        read = read_processes(consensus)
        read.raise_unreadable()  # the invariants read only what its writers wrote
        processes = dict(read.nodes)
        shard_ids = consensus.children(SHARDS_KEY)
        states = read_states(consensus, shard_ids) if shard_ids else {}
        entries: tuple[MigrationEntry, ...] = ()
        if states.get(MIGRATION_SHARD_ID) is not None:
            entries = tuple(MigrationShard(consensus, blob).entries())
        epoch = heads[EPOCH_KEY]
        promotion = heads[PROMOTION_KEY]
        pending = read_pending(consensus)
        return cls(
            previous_shards=frozenset(pending[0].protected_shards() if pending else ()),
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
            (node.version, node.deploy_generation)
            for node in self.processes.values()
            if not node.is_leader
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


def is_quiescent(view: DurableView) -> bool:
    """The epoch's leader serves its generation, which is the promotion target; nobody migrates."""
    epoch, promotion = view.epoch, view.promotion
    if epoch is None or promotion is None:
        return False
    leader = view.processes.get(str(epoch.get("leader")))
    return (
        leader is not None
        and leader.process_state is ProcessState.SERVING
        and leader.epoch == epoch.get("epoch")
        and promotion.get("deploy_generation") == epoch.get("deploy_generation")
        and not any(
            node.process_state is ProcessState.MIGRATING for node in view.processes.values()
        )
    )


def _znode_version(state: ShardState | None) -> list[int] | None:
    return None if state is None else list(state.revision)


@attrs.define
class TrackedRows:
    """Acknowledged rows of one collection, identified by a token column."""

    collection: str
    token_column: str
    acked: collections.Counter[str] = attrs.field(factory=collections.Counter)
    # Writes whose outcome is unknown (an error after the request was sent): may or may not land.
    uncertain: set[str] = attrs.field(factory=set)


def durable_snapshot(catalog: CatalogState, states: Mapping[str, ShardState]) -> CatalogSnapshot:
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


def describe(found: Sequence[Violation]) -> str:
    return "; ".join(str(v) for v in found)
