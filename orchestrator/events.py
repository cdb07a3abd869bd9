"""The environment's upgrade-event log: a short, persistent history status shows.

Layout below the environment root::

    events/e-<seq>    persistent sequential znodes, one per event, JSON
                      {"kind": "promoted", "at": <unix time>, ...fields}

Events are informational (bootstrap, ready, promoted, leader, fenced, finalized): nothing reads
them to decide anything, so writing one is best effort for callers and a lost race only matters
to trimming, which keeps the newest ``KEEP_EVENTS`` and tolerates concurrent trimmers.
``orchestrator.status`` re-exports :func:`record_event` and :func:`read_events`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.consensus import CONNECTION_ERRORS, Consensus, Create, Fence, encode_json
from catalog.environment import EVENTS_KEY
from catalog.errors import ConnectionLostError

__all__ = ["KEEP_EVENTS", "UpgradeEvent", "read_events", "record_event"]

log = structlog.get_logger(__name__)

KEEP_EVENTS = 200
# Trim only once this many extra events piled up, so most writes cost a single create.
_TRIM_SLACK = 20
_PREFIX = "e-"


@attrs.frozen
class UpgradeEvent:
    """One entry of the log, oldest first when listed."""

    seq: int
    kind: str
    at: float
    fields: Mapping[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "at": self.at, **self.fields}


def record_event(
    consensus: Consensus, kind: str, *, fence: Fence | None = None, **fields: Any
) -> str:
    """Append an event ``kind`` with ``fields`` (JSON values); returns its key.

    With ``fence``, the event is written in the same transaction as the epoch check, so a
    superseded leader cannot log in the new leader's name.
    """
    value = encode_json({"kind": kind, "at": time.time(), **fields})
    consensus.ensure(EVENTS_KEY)
    (created,) = consensus.commit(
        [Create(f"{EVENTS_KEY}/{_PREFIX}", value, sequence=True)], fence=fence
    )
    key = consensus.key_of(str(created))
    _trim(consensus)
    log.debug("event_recorded", kind=kind, key=key)
    return key


def read_events(consensus: Consensus, limit: int = 20) -> list[UpgradeEvent]:
    """The newest ``limit`` events, oldest first, read in one pipelined pass."""
    names = _sorted_names(consensus.children(EVENTS_KEY))[-limit:] if limit > 0 else []
    found = consensus.get_many([f"{EVENTS_KEY}/{name}" for name in names])
    events: list[UpgradeEvent] = []
    for name in names:
        versioned = found.get(f"{EVENTS_KEY}/{name}")
        if versioned is None:  # trimmed between listing and reading
            continue
        data = versioned.json()
        if not isinstance(data, dict):
            continue
        fields = {k: v for k, v in data.items() if k not in {"kind", "at"}}
        events.append(
            UpgradeEvent(
                seq=_seq(name),
                kind=str(data.get("kind", "unknown")),
                at=float(data.get("at", 0.0)),
                fields=fields,
            )
        )
    return events


def _seq(name: str) -> int:
    digits = name[len(_PREFIX) :]
    return int(digits) if digits.isdigit() else -1


def _sorted_names(names: list[str]) -> list[str]:
    return sorted((n for n in names if n.startswith(_PREFIX)), key=_seq)


def _trim(consensus: Consensus) -> None:
    names = _sorted_names(consensus.children(EVENTS_KEY))
    if len(names) <= KEEP_EVENTS + _TRIM_SLACK:
        return
    client = consensus.client
    # Pipelined deletes; a concurrent trimmer may have removed some already (NoNode is fine).
    pending = [
        client.delete_async(consensus.path(f"{EVENTS_KEY}/{name}"))
        for name in names[: len(names) - KEEP_EVENTS]
    ]
    try:
        for result in pending:
            try:
                result.get()
            except NoNodeError:
                continue
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer trimming events") from exc
