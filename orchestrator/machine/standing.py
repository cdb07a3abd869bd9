"""Whether a sidecar stands in the election: it joins once ready to lead, and steps out while
its clock disagrees with ZooKeeper's.

A process whose clock is too far from ZooKeeper's (:mod:`orchestrator.clock`) must not lead:
it leaves the election, so that it never stands first and blocks a sound candidate, and joins
again, at the back, once its clock agrees (NTP caught up). The machine asks at every
evaluation, before it joins.
"""

from __future__ import annotations

from typing import Any

from orchestrator import election as election_mod
from orchestrator.clock import MAX_CLOCK_OFFSET_SECONDS, ClockOffset

__all__ = ["Standing"]


class Standing:
    """One process's place in its generation's election, and its clock's veto."""

    def __init__(self, election: election_mod.LeaderElection, clock: ClockOffset, log: Any):
        self._election = election
        self._clock = clock
        self._log = log
        self._joined = False
        #: Whether the last evaluation declined to lead for the clock.
        self.clock_refused = False

    def join(self) -> None:
        """Join the election once (its watches drive re-evaluation from then on)."""
        if self._election.candidate is None and not self._joined:
            self._election.start()
            self._joined = True

    def refuses_for_clock(self) -> bool:
        """Whether the clock is too far from ZooKeeper's to lead now: then the process leaves
        the election (said once), and joins again once it agrees."""
        clock = self._clock
        if not clock.too_far:
            if self.clock_refused:
                self._log.info("clock_agrees", offset=clock.offset)
            self.clock_refused = False
            return False
        if not self.clock_refused:
            self._log.warning(
                "clock_refuses_to_lead",
                offset=clock.offset,
                bound=MAX_CLOCK_OFFSET_SECONDS,
                fix="synchronize the host's clock (NTP); it leads once the clock agrees",
            )
        self.clock_refused = True
        if self._joined:
            self._election.step_down()
            self._joined = False
        return True
