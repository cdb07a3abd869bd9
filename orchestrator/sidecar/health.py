"""The sidecar's health against its durable state: work deferred while ZooKeeper does not
answer, and a process that cannot decode a node it needs leaves its state instead of dying.

A node that is not what its writer writes (an operator's mistake, a bug, a foreign writer) is a
:class:`~catalog.errors.CorruptStateError` naming its key. The process then steps back to
``checking`` (phase ``durable state unreadable``): ``/readyz`` answers 503 with the key, the error
is in its process node and ``status``, a leader takes no appends and makes no writes, and it
keeps watching: every heartbeat and every watched change re-reads. It still steps down when a
newer generation is promoted or the epoch moves (fencing needs neither the catalog nor the bad
node), and once the node reads again it returns to where it was.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from catalog.errors import ConnectionLostError, CorruptStateError
from orchestrator.sidecar.core import SidecarCore
from orchestrator.sidecar.states import State

log = structlog.get_logger(__name__)

PHASE_UNREADABLE = "durable state unreadable"


class SidecarHealth(SidecarCore):
    """Defers work while disconnected; degrades and recovers around unreadable durable state."""

    def _deferring(self, action: Callable[[], None]) -> None:
        """Run ``action``; when ZooKeeper does not answer, retry it once reconnected; when a
        durable node cannot be decoded, degrade until ``action`` succeeds again."""
        try:
            action()
        except ConnectionLostError as exc:
            self._pending = True
            self._log.warning("deferred_until_reconnected", reason=exc.message)
        except CorruptStateError as exc:
            self._degrade(exc, action.__name__)

    def _degrade(self, exc: CorruptStateError, by: str) -> None:
        """Leave the current state for ``checking`` until ``by`` (the action that could not
        read ``exc``'s node) succeeds again; the next heartbeat looks again."""
        first = self._unreadable is None
        if first:
            self._resume_state = self._state
        if first or self._unreadable is None or self._unreadable.message != exc.message:
            self._log.error("durable_state_unreadable", key=exc.key, message=exc.message)
        self._unreadable = exc
        self._degraded_by = by
        self._error = exc.to_json()
        self._check = None  # a follower re-checks from the repaired state
        self._set_state(State.CHECKING, phase=PHASE_UNREADABLE)

    def _recover(self, by: str) -> None:
        """``by`` read everything it needs again: back to serving (a leader) or to what the
        re-check that just ran decided (a follower)."""
        if self._unreadable is None or self._degraded_by != by:
            return
        key = self._unreadable.key
        self._unreadable = None
        self._resume_state = None
        self._error = None
        self._log.info("durable_state_readable", key=key)
        if self._leadership is not None and self._state is State.CHECKING:
            self._set_state(State.SERVING)
        else:
            self._write_status()
