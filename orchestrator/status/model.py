"""The upgrade-status model: catalog, leader, processes, collections, entries, events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orchestrator.election import EpochInfo
from orchestrator.events import UpgradeEvent
from orchestrator.process_node import ProcessNode
from orchestrator.status.stage import upgrade_stage

#: One registered process, as its ephemeral ``processes/<id>`` node says (the one value).
ProcessStatus = ProcessNode


@attrs.frozen
class LeaderStatus:
    """The leader the epoch znode names, joined with its process node when it is registered."""

    epoch: EpochInfo
    process: ProcessStatus | None

    @property
    def id(self) -> str | None:
        return self.epoch.leader

    @property
    def registered(self) -> bool:
        """False when the leader's process is gone (crashed or stepped down, not yet replaced)."""
        return self.process is not None

    def to_json(self) -> dict[str, Any]:
        base = self.process.to_json() if self.process is not None else {"id": self.epoch.leader}
        return {
            **base,
            "id": self.epoch.leader,
            "deploy_generation": self.epoch.deploy_generation,
            "epoch": self.epoch.epoch,
            "session": self.epoch.session,
            "host": self.epoch.host or base.get("host"),
            "pid": self.epoch.pid if self.epoch.pid is not None else base.get("pid"),
            "taken_over_at": self.epoch.taken_over_at,
            "registered": self.registered,
        }


@attrs.frozen
class CatalogSummary:
    """The durable catalog's headline: ``Vc``, ``Gc``, and the fencing epoch."""

    version: str | None
    deploy_generation: int | None
    epoch: int | None
    promotion_target: int | None
    blob_uri: str | None = None
    updated_at: float | None = None
    collections: int = 0

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Finalization:
    """Whether the catalog's version is final, or its upgrade still reversible.

    ``state``: ``final``; ``pending`` (the release it came from may be promoted back until
    ``finalize_at``, or until ``finalize`` when that is None); ``finalizing`` (decided, the
    serving leader completes it). ``upgrade``: the pending upgrade's status JSON; ``finalized``:
    when the final version became final, and who decided (None for catalogs of releases that
    did not record it)."""

    state: str
    upgrade: Mapping[str, Any] | None = None
    finalized: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "upgrade": None if self.upgrade is None else dict(self.upgrade),
            "finalized": None if self.finalized is None else dict(self.finalized),
        }


@attrs.frozen
class CollectionStatus:
    """One builtin collection: where it lives now and its shard's current schema id."""

    global_id: str
    name: str
    shard_id: str
    schema_id: int | None
    mechanism: str | None = None  # from the focus process's plan; None when no plan is known

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class MigrationEntry:
    """A migration-shard entry ``(GlobalId, Version, DeployGeneration) -> ShardId``."""

    global_id: str
    version: str
    deploy_generation: int
    shard_id: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class UpgradeStatus:
    """Everything ``status`` shows, read in one pass at ``read_at``."""

    environment: str
    catalog: CatalogSummary
    bootstrapped: bool
    leader: LeaderStatus | None
    processes: tuple[ProcessStatus, ...]
    collections: tuple[CollectionStatus, ...]
    migration_entries: tuple[MigrationEntry, ...]
    pending_finalization: tuple[str, ...]
    events: tuple[UpgradeEvent, ...]
    read_at: float
    plan_source: str | None = None  # the process whose plan gave the collections' mechanisms
    warnings: tuple[str, ...] = ()  # parts that could not be read (shown, never fatal)
    # Nodes whose values are not what their writers write: {"key", "error"} (exit 1)
    errors: tuple[Mapping[str, str], ...] = ()
    finalization: Finalization | None = None  # None: not bootstrapped
    #: The ZooKeeper connection string it was read through (the commands it prints name it).
    zookeeper: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` document (docs/design-contract.md, plus extra fields), with
        where the upgrade is now (``upgrade``, :mod:`orchestrator.status.stage`)."""
        document = {
            "environment": self.environment,
            "zookeeper": self.zookeeper,
            "bootstrapped": self.bootstrapped,
            "read_at": self.read_at,
            "catalog": self.catalog.to_json(),
            "leader": None if self.leader is None else self.leader.to_json(),
            "processes": [p.to_json() for p in self.processes],
            "collections": [c.to_json() for c in self.collections],
            "migration_entries": [e.to_json() for e in self.migration_entries],
            "pending_finalization": list(self.pending_finalization),
            "finalization": None if self.finalization is None else self.finalization.to_json(),
            "events": [e.to_json() for e in self.events],
            "plan_source": self.plan_source,
            "warnings": list(self.warnings),
            "errors": [dict(e) for e in self.errors],
        }
        document["upgrade"] = upgrade_stage(document)
        return document
