"""A sidecar that cannot decode a node it needs leaves its state instead of dying.

A node that is not what its writer writes (an operator's mistake, a bug, a foreign writer) is a
:class:`~catalog.errors.CorruptStateError` naming its key. The process then steps back to
``checking`` (phase ``durable state unreadable``): ``/readyz`` answers 503 with the key, the error
is in its process node and ``status``, a leader takes no appends and makes no writes, and it
keeps watching: every heartbeat and every watched change re-reads. It still steps down when a
newer generation is promoted or the epoch moves (fencing needs neither the catalog nor the bad
node), and once the node reads again it returns to where it was.
"""

from __future__ import annotations

import structlog

from catalog.errors import CorruptStateError
from orchestrator.machine.progress import Progress
from orchestrator.machine.states import State

log = structlog.get_logger(__name__)

PHASE_UNREADABLE = "durable state unreadable"


class Health:
    """Which durable node cannot be read, by which action, and the state it interrupted."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.unreadable: CorruptStateError | None = None
        #: The state the process left for ``checking`` (it resumes that work once readable).
        self.resume_state: State | None = None
        self._degraded_by: str | None = None

    def interrupted(self, state: State) -> bool:
        """The process is in ``state``, or left it only because a node could not be read."""
        return state in (self._progress.state, self.resume_state)

    def degrade(self, exc: CorruptStateError, by: str) -> None:
        """Leave the current state for ``checking`` until ``by`` (the action that could not
        read ``exc``'s node) succeeds again; the next heartbeat looks again."""
        first = self.unreadable is None
        if first:
            self.resume_state = self._progress.state
        if first or self.unreadable is None or self.unreadable.message != exc.message:
            log.error("durable_state_unreadable", key=exc.key, message=exc.message)
        self.unreadable = exc
        self._degraded_by = by
        self._progress.error = exc.to_json()
        self._progress.set_state(State.CHECKING, phase=PHASE_UNREADABLE)

    def recover(self, by: str, *, leading: bool) -> None:
        """``by`` read everything it needs again: back to serving (a leader) or to what the
        re-check that just ran decided (a follower)."""
        if self.unreadable is None or self._degraded_by != by:
            return
        key = self.unreadable.key
        self.forget()
        self._progress.error = None
        log.info("durable_state_readable", key=key)
        if leading and self._progress.state is State.CHECKING:
            self._progress.set_state(State.SERVING)
        else:
            self._progress.publish()

    def forget(self) -> None:
        """Leadership ended: what it was degraded from no longer resumes."""
        self.unreadable = None
        self.resume_state = None
