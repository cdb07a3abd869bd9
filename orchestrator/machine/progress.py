"""Where a sidecar is: its state and phase, its plan, its error; each change published.

The process node (``processes/<id>``) shows these to every reader; :class:`Progress` keeps them
for the main thread, measures each migration phase (a histogram per phase) and calls
``publish`` (rewrite the process node) whenever the phase changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from catalog.pipeline.pacing import StepProgress
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.states import RESTING_PHASES, State

log = structlog.get_logger(__name__)


class Progress:
    """The observable state of one sidecar; changed on its main thread only."""

    def __init__(self, metrics: SidecarMetrics, publish: Callable[[], None]) -> None:
        self._metrics = metrics
        self._publish = publish
        self.state = State.STARTING
        self.phase: str | None = State.STARTING.value
        self.phase_since = time.time()
        self._phase_started = time.monotonic()
        self.plan: Mapping[str, Any] | None = None
        self.error: Mapping[str, Any] | None = None
        # While leading a migration: each phase entered and when (the upgrade history's).
        self._migration: list[tuple[str, float]] | None = None
        #: The long step under way (a REWRITE copy), as its pacer reports it.
        self.step: StepProgress | None = None
        self._changed = threading.Condition()

    def set_state(self, state: State, *, phase: str | None = None) -> None:
        """Enter ``state`` (and ``phase``, by default the state's own name); published."""
        changed = state is not self.state
        with self._changed:
            self.state = state
            self._changed.notify_all()
        self._metrics.set_state(state.value)
        self.enter_phase(phase or state.value)
        if changed:
            log.info("state", state=state.value)

    def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Whether ``done`` holds, once it does or ``timeout`` seconds passed (any thread);
        looked at again at each change of state and each :meth:`wake`."""
        with self._changed:
            return self._changed.wait_for(done, timeout)

    def wake(self) -> None:
        """Something a waiter of :meth:`wait_until` looks at changed."""
        with self._changed:
            self._changed.notify_all()

    def settle(self, state: State) -> None:
        """Take ``state`` without publishing it (a process that never registered)."""
        self.state = state

    def enter_phase(self, phase: str) -> None:
        now = time.monotonic()
        if self.phase is not None and self.phase not in RESTING_PHASES:
            self._metrics.observe_phase(self.phase, now - self._phase_started)
        if phase != self.phase:
            self.phase_since = time.time()
            self._metrics.enter_phase(phase, self.phase_since)
        self.phase = phase
        self._phase_started = now
        self._publish()

    def on_step(self, step: StepProgress | None) -> None:
        """The Pacer's report (at most once a second, and at each start, pause and end):
        published, and in the metrics."""
        self.step = step
        self._metrics.observe_step(step)
        self._publish()

    def publish(self) -> None:
        """Publish as it is (the process node is rewritten)."""
        self._publish()

    def on_phase(self, phase: str) -> None:
        """The MigrationContext hook: migrate reports each phase as it enters it."""
        if phase != self.phase:
            log.info("phase", phase=phase)
            self.enter_phase(phase)
            if self._migration is not None:
                self._migration.append((phase, time.time()))

    def begin_migration(self) -> None:
        """A takeover starts: phases are recorded from now for the upgrade history."""
        self._migration = [("taking over", time.time())]

    def end_migration(self) -> list[tuple[str, float]]:
        """The phases the migration entered, and when; recording stops."""
        entered, self._migration = self._migration or [], None
        return entered
