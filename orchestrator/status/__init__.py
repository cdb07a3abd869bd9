"""The upgrade status, read from ZooKeeper alone, and its JSON document.

:func:`read_status` answers "what is the upgrade status?" without asking any sidecar: it reads
the environment's catalog, epoch, promotion target, process nodes, shard states, finalization
queue and event log in two pipelined round trips (never one per collection), into the frozen
:class:`UpgradeStatus`. ``UpgradeStatus.to_json()`` is the ``status --json`` contract of
docs/design-contract.md (plus extra fields); :func:`orchestrator.render.status.render_table` is the
terminal view;
:func:`watch_status` drives ``status --watch`` from ZooKeeper watches with a 1 s refresh.

Fields relied on in nodes other modules write:

* ``processes/<id>``: the process-status JSON of the orchestrator contract (``id``, ``version``,
  ``deploy_generation``, ``mode``, ``state``, ``phase``, ``phase_since``, ``plan``, ``error``,
  ``host``, ``pid``, ``session``, ``epoch``, ``http``, ``heartbeat``, ``started_at``); missing
  fields read as null.
* ``shards/<shard_id>``: the shard state JSON; its ``schemas`` list (one entry per registered
  schema) gives the current schema id ``len(schemas) - 1``. ``schema_count`` (an int) is
  accepted too; anything else reads as an unknown (null) schema id.
* a process's ``plan`` (``CheckResult.summary()``): per-collection mechanisms are taken from a
  ``migrations`` or ``collections`` list of ``{"global_id", "name", "mechanism"}`` objects, or a
  ``collections`` mapping ``global_id -> {"mechanism": ...}``; other shapes are shown as is."""

from __future__ import annotations

from orchestrator.events import UpgradeEvent, read_events, record_event
from orchestrator.status.model import (
    CatalogSummary,
    CollectionStatus,
    LeaderStatus,
    MigrationEntry,
    ProcessStatus,
    UpgradeStatus,
)
from orchestrator.status.read import plan_mechanisms, read_status, schema_id_of
from orchestrator.status.watch import watch_status

__all__ = [
    "CatalogSummary",
    "CollectionStatus",
    "LeaderStatus",
    "MigrationEntry",
    "ProcessStatus",
    "UpgradeEvent",
    "UpgradeStatus",
    "plan_mechanisms",
    "read_events",
    "read_status",
    "record_event",
    "schema_id_of",
    "watch_status",
]
