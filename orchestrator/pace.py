"""The operator's pace for a generation's long steps: paused or not, and a rows-per-second limit.

Layout below the environment root::

    pace/g<generation>   JSON {"paused": bool, "limit": rows per second | null | absent,
                               "changes": [{"at", "by", "change"}, ... the newest 20]}

``limit`` absent: the process's own ``--copy-rate``; null: no limit; a number: that limit.
Only the operator's commands (``throttle``, ``pause``, ``resume``) write it, each change one
compare-and-set, recorded with who, when and from where in ``changes``, as an event and a log
line. The sidecars of that generation watch it (:class:`PaceWatch`) and their long steps follow
it (:class:`catalog.pipeline.pacing.Pacer`). A process never writes it, so a pause stops no
other version from starting, and nothing but a long step reads it: promotion and fencing go on
whatever it says.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

import structlog
from kazoo.recipe.watchers import DataWatch

from catalog.consensus import Consensus, Create, SetData, encode_json
from catalog.environment import PACE_KEY
from catalog.pipeline.pacing import Pace
from catalog.retry import CasRetry
from orchestrator.events import record_event

__all__ = ["PaceWatch", "change_pace", "pace_key", "read_pace"]

log = structlog.get_logger(__name__)

#: Changes a pace node keeps (who paused, throttled or resumed, and when).
KEEP_CHANGES: Final = 20
#: ``limit`` when the node names none: the process's own ``--copy-rate``.
_OWN: Final = object()


def pace_key(generation: int) -> str:
    return f"{PACE_KEY}/g{generation}"


def _decode(data: Mapping[str, Any] | None, default_limit: float | None) -> Pace:
    if not data:
        return Pace(False, default_limit)
    limit = data.get("limit", _OWN)
    return Pace(bool(data.get("paused")), default_limit if limit is _OWN else limit)


def read_pace(consensus: Consensus, generation: int) -> tuple[Pace, list[dict[str, Any]]]:
    """The pace of ``generation`` (no limit of its own: None) and its recorded changes."""
    found = consensus.get_json(pace_key(generation))
    data = found[0] if found is not None and isinstance(found[0], dict) else {}
    return _decode(data, None), list(data.get("changes", []))


def change_pace(
    consensus: Consensus,
    generation: int,
    *,
    requested_by: str,
    paused: bool | None = None,
    limit: float | object | None = _OWN,
) -> Pace:
    """Set ``paused`` and/or ``limit`` (None: no limit) for ``generation``: one
    compare-and-set, recorded with ``requested_by``; the pace now."""
    change: dict[str, Any] = {}
    if paused is not None:
        change["paused"] = paused
    if limit is not _OWN:
        change["limit"] = limit

    def attempt() -> dict[str, Any]:
        found = consensus.get_json(pace_key(generation))
        data = dict(found[0]) if found is not None and isinstance(found[0], dict) else {}
        data.update(change)
        entry = {"at": time.time(), "by": requested_by, "change": change}
        data["changes"] = [*data.get("changes", []), entry][-KEEP_CHANGES:]
        value = encode_json(data)
        if found is None:
            consensus.ensure(PACE_KEY)
            consensus.commit([Create(pace_key(generation), value)])
        else:
            consensus.commit([SetData(pace_key(generation), value, found[1])])
        return data

    data = CasRetry()(attempt)  # a concurrent change: re-read, applied again
    kind = "paused" if paused else "resumed" if paused is False else "throttled"
    record_event(consensus, kind, deploy_generation=generation, requested_by=requested_by, **change)
    log.info("pace_changed", deploy_generation=generation, requested_by=requested_by, **change)
    return _decode(data, None)


class PaceWatch:
    """The pace of one generation as a ZooKeeper watch keeps it (``current`` is cheap: a long
    step asks after every batch). ``default_limit``: the process's ``--copy-rate``."""

    def __init__(self, consensus: Consensus, generation: int, default_limit: float | None) -> None:
        self._default = default_limit
        self._lock = threading.Lock()
        self._pace = Pace(False, default_limit)
        path = consensus.path(pace_key(generation))
        self._watch = DataWatch(consensus.client, path, self._changed)

    def current(self) -> Pace:
        with self._lock:
            return self._pace

    def _changed(self, data: bytes | None, _stat: Any) -> None:
        try:
            decoded = _decode(_json(data), self._default)
        except ValueError as exc:  # a value no command writes: keep going at the last pace
            log.warning("pace_unreadable", error=str(exc))
            return
        with self._lock:
            if decoded != self._pace:
                log.info("pace", paused=decoded.paused, limit=decoded.rows_per_second)
            self._pace = decoded


def _json(data: bytes | None) -> Mapping[str, Any] | None:
    if not data:
        return None
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"a pace is a JSON object, not {type(value).__name__}")
    return value
