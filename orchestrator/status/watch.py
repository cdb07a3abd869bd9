"""Following the upgrade status with ZooKeeper watches (no polling)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import NoNodeError

from catalog.consensus import CONNECTION_ERRORS, Consensus
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    EVENTS_KEY,
    FINALIZE_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
)
from catalog.errors import ConnectionLostError
from orchestrator.process_node import process_key
from orchestrator.status.model import UpgradeStatus
from orchestrator.status.read import DEFAULT_EVENTS, read_status


def _arm_watches(consensus: Consensus, changed: threading.Event) -> None:
    """One-shot watches on everything status shows (except shard states), set pipelined."""
    client = consensus.client

    def fire(_event: object) -> None:
        changed.set()

    pending = [
        client.exists_async(consensus.path(key), watch=fire)
        for key in (CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY)
    ]
    listings = [
        client.get_children_async(consensus.path(key), watch=fire)
        for key in (PROCESSES_KEY, FINALIZE_KEY, EVENTS_KEY)
    ]
    names: list[str] = []
    logs: list[str] = []
    try:
        for result in pending:
            result.get()
        for key, result in zip((PROCESSES_KEY, FINALIZE_KEY, EVENTS_KEY), listings, strict=True):
            try:
                listed = result.get()
            except NoNodeError:
                client.exists(consensus.path(key), watch=fire)
                continue
            if key == PROCESSES_KEY:
                names = list(listed)
            elif key == EVENTS_KEY:  # the read-only processes' own logs
                logs = [f"{EVENTS_KEY}/{name}" for name in listed if not name.startswith("e-")]
        for result in [
            *(client.exists_async(consensus.path(process_key(name)), watch=fire) for name in names),
            *(client.get_children_async(consensus.path(key), watch=fire) for key in logs),
        ]:
            with contextlib.suppress(NoNodeError):
                result.get()
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer setting status watches") from exc


def watch_status(
    consensus: Consensus,
    on_status: Callable[[UpgradeStatus], None],
    stop: threading.Event,
    *,
    refresh: float = 1.0,
    events: int = DEFAULT_EVENTS,
) -> None:
    """Call ``on_status`` with a fresh status on every change (watches) and every ``refresh`` s.

    Runs until ``stop`` is set. The timed refresh keeps "since" ages and heartbeats current.
    """
    changed = threading.Event()
    while not stop.is_set():
        changed.clear()
        _arm_watches(consensus, changed)
        on_status(read_status(consensus, events=events))
        deadline = time.monotonic() + refresh
        while not stop.is_set() and not changed.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            changed.wait(min(remaining, 0.1))
