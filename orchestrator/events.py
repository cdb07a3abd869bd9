"""The environment's upgrade-event log: a short, persistent history status shows.

Layout below the environment root::

    events/e-<seq>                      leaders' and operators' events (promoted, leader,
                                        migrated, finalized...): persistent, sequential, JSON
                                        {"kind": "promoted", "at": <unix time>, ...fields}
    events/v<version>-g<gen>/e-<seq>    events of the read-only processes of (version, gen)
                                        (ready, fenced, failed): under a key of their own

A read-only process writes only below its own ``(version, generation)`` key and trims only
there, so it never touches anything another process wrote (the read-only rule); the leader
removes the keys of the generations it retracts. Events are informational: nothing reads them
to decide anything, so writing one is best effort for callers; each log keeps its newest
``KEEP_EVENTS`` and tolerates concurrent trimmers. :func:`read_events` merges all logs by time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog
from kazoo.exceptions import NoNodeError

from catalog.consensus import CONNECTION_ERRORS, Consensus, Create, Delete, Fence, Op, encode_json
from catalog.environment import EVENTS_KEY
from catalog.errors import ConnectionLostError

__all__ = [
    "KEEP_EVENTS",
    "UpgradeEvent",
    "drop_events_of",
    "own_key",
    "read_events",
    "record_event",
]

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


def own_key(version: str, generation: int) -> str:
    """The events key of the read-only processes of ``(version, generation)``."""
    return f"{EVENTS_KEY}/v{version}-g{generation}"


def record_event(
    consensus: Consensus,
    kind: str,
    *,
    fence: Fence | None = None,
    owner: tuple[str, int] | None = None,
    **fields: Any,
) -> str:
    """Append an event ``kind`` with ``fields`` (JSON values); returns its key.

    With ``fence``, the event is written in the same transaction as the epoch check, so a
    superseded leader cannot log in the new leader's name. With ``owner`` (a read-only
    process's ``(version, generation)``), it goes to that key's own log.
    """
    value = encode_json({"kind": kind, "at": time.time(), **fields})
    log_key = EVENTS_KEY if owner is None else own_key(*owner)
    consensus.ensure(EVENTS_KEY, *(() if owner is None else (log_key,)))
    (created,) = consensus.commit(
        [Create(f"{log_key}/{_PREFIX}", value, sequence=True)], fence=fence
    )
    key = consensus.key_of(str(created))
    _trim(consensus, log_key)
    log.debug("event_recorded", kind=kind, key=key)
    return key


def drop_events_of(
    consensus: Consensus, owners: Iterable[tuple[str, int]], *, fence: Fence
) -> None:
    """Remove the logs of retracted ``(version, generation)`` keys (the leader's cleanup)."""
    ops: list[Op] = []
    for owner in sorted(set(owners)):
        key = own_key(*owner)
        ops += [Delete(f"{key}/{name}") for name in consensus.children(key)]
        if consensus.exists(key):
            ops.append(Delete(key))
    consensus.commit_chunked(ops, fence=fence)


def read_events(consensus: Consensus, limit: int = 20) -> list[UpgradeEvent]:
    """The newest ``limit`` events of every log, oldest first, read in pipelined passes."""
    if limit <= 0:
        return []
    top = consensus.children(EVENTS_KEY)
    logs = [name for name in top if not name.startswith(_PREFIX)]
    listed = {EVENTS_KEY: top}
    listed.update(zip(
        (f"{EVENTS_KEY}/{name}" for name in logs),
        _children_many(consensus, [f"{EVENTS_KEY}/{name}" for name in logs]),
        strict=True,
    ))  # fmt: skip
    keys = [
        f"{log_key}/{name}"
        for log_key, names in listed.items()
        for name in _sorted_names(names)[-limit:]
    ]
    found = consensus.get_many(keys)
    events: list[UpgradeEvent] = []
    for key in keys:
        versioned = found.get(key)
        if versioned is None:  # trimmed between listing and reading
            continue
        data = versioned.json()
        if not isinstance(data, dict):
            continue
        fields = {k: v for k, v in data.items() if k not in {"kind", "at"}}
        events.append(
            UpgradeEvent(
                seq=_seq(key.rsplit("/", 1)[-1]),
                kind=str(data.get("kind", "unknown")),
                at=float(data.get("at", 0.0)),
                fields=fields,
            )
        )
    events.sort(key=lambda event: (event.at, event.seq))
    return events[-limit:]


def _children_many(consensus: Consensus, keys: list[str]) -> list[list[str]]:
    client = consensus.client
    pending = [client.get_children_async(consensus.path(key)) for key in keys]
    out: list[list[str]] = []
    try:
        for result in pending:
            try:
                out.append(list(result.get()))
            except NoNodeError:
                out.append([])
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer listing events") from exc
    return out


def _seq(name: str) -> int:
    digits = name[len(_PREFIX) :]
    return int(digits) if digits.isdigit() else -1


def _sorted_names(names: list[str]) -> list[str]:
    return sorted((n for n in names if n.startswith(_PREFIX)), key=_seq)


def _trim(consensus: Consensus, log_key: str) -> None:
    names = _sorted_names(consensus.children(log_key))
    if len(names) <= KEEP_EVENTS + _TRIM_SLACK:
        return
    client = consensus.client
    # Pipelined deletes; a concurrent trimmer may have removed some already (NoNode is fine).
    pending = [
        client.delete_async(consensus.path(f"{log_key}/{name}"))
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
