"""The sidecar: the long-running process of one release at one deploy generation.

State machine (the ``state`` of the process node; it runs on the process's main thread)::

    starting --connect, register--> checking --check_read_only--> ready
    ready --promotion of own generation (or bootstrap, or --auto-promote)--> migrating
    migrating --migrate_as_leader--> serving          (leader; finalizer and orphan
                                                       collection run periodically)
    ready/checking --catalog version, generation or epoch changed--> checking (re-plan)
    any --newer generation promoted or in the catalog, epoch moved--> fenced   (exit 3)
    any --migration refused--> failed                                         (exit 4)

ZooKeeper layout it writes (keys relative to the environment root; see ``catalog.environment``)::

    processes/<id>      ephemeral JSON: the live status below, rewritten on every state or phase
                        change and every ``heartbeat_interval`` seconds
    events/e-<seq>      ready, bootstrap, migrated, finalized, orphans_queued, fenced, failed
                        (orchestrator.events)

Threads: kazoo's state listener, election callbacks, HTTP handlers and signal handlers never
change the state; they put a message in the inbox (a ``SimpleQueue``, safe from signal handlers)
and the main thread acts on it. Data-plane requests (``/append``, ``/read``, ``/status``) run on
HTTP threads: they only read the state and use ZooKeeper through the thread-safe kazoo client.

Exit codes are those of docs/design-contract.md: 0 after SIGTERM/SIGINT, 2 bad configuration
(nothing written), 3 fenced, 4 migration refused, 1 anything unexpected."""

from __future__ import annotations

from orchestrator.machine.config import (
    SidecarConfig,
    default_process_id,
    resolve_blob_uri,
)
from orchestrator.machine.states import State
from orchestrator.sidecar.process import Sidecar, run_sidecar

__all__ = [
    "Sidecar",
    "SidecarConfig",
    "State",
    "default_process_id",
    "resolve_blob_uri",
    "run_sidecar",
]
