"""The process's clock against ZooKeeper's: measured at each status write, bounded for leading.

Every decision that compares times written by different processes (finalization, blob and
orphan grace) takes ZooKeeper's clock (the ``mtime`` of a fresh write), so no host's clock
decides. The times a process writes for people (an event's ``at``, a pending upgrade's
``since``) are still its own clock's. Like CockroachDB's ``--max-offset``, a process whose
clock differs from ZooKeeper's by more than :data:`MAX_CLOCK_OFFSET_SECONDS` refuses to take
over, stays read-only and says so in its process node (``clock_offset``), which ``status``, the
page and the fleet show. It leads again once its clock agrees (NTP caught up).

The offset is measured on each write of the process node: ZooKeeper stamps the write with its
leader's clock, which lies between the local times before and after the round trip, so
``offset = (before + after) / 2 - mtime`` with an uncertainty of half the round trip (and the
millisecond of ``mtime``). The process refuses only when the offset exceeds the bound by more
than that uncertainty: a slow round trip never makes a sound clock look wrong.
"""

from __future__ import annotations

import contextlib
import math
from typing import Final

import attrs

from catalog.consensus import Consensus, Create, Fence, SetData
from catalog.environment import GC_KEY
from catalog.errors import VersionMismatchError

__all__ = ["MAX_CLOCK_OFFSET_SECONDS", "ClockOffset", "clock_warning", "zookeeper_now"]

#: How far a process's clock may differ from ZooKeeper's and the process still lead.
MAX_CLOCK_OFFSET_SECONDS: Final = 2.0
#: The node a leader touches to read ZooKeeper's time (kept by the garbage sweep).
CLOCK_KEY: Final = f"{GC_KEY}/clock"


def zookeeper_now(consensus: Consensus, fence: Fence | None) -> float:
    """ZooKeeper's time, in seconds: the ``mtime`` of ``gc/clock`` after touching it (a leader's
    write, fenced when ``fence`` is given)."""
    consensus.ensure(GC_KEY)
    if not consensus.exists(CLOCK_KEY):
        with contextlib.suppress(VersionMismatchError):  # another leader created it
            consensus.commit([Create(CLOCK_KEY, b"")], fence=fence)
    (stat,) = consensus.commit([SetData(CLOCK_KEY, b"", -1)], fence=fence)
    return float(stat.mtime) / 1000.0


@attrs.define
class ClockOffset:
    """The newest measurement: seconds the local clock runs ahead of ZooKeeper's (negative:
    behind), and its uncertainty; None before the first."""

    offset: float | None = None
    uncertainty: float = math.inf

    def observe(self, before: float, after: float, zookeeper_mtime_ms: int) -> None:
        """A write sent at local time ``before``, answered at ``after``, stamped
        ``zookeeper_mtime_ms`` by ZooKeeper."""
        self.offset = (before + after) / 2 - zookeeper_mtime_ms / 1000.0
        self.uncertainty = (after - before) / 2 + 0.001

    @property
    def too_far(self) -> bool:
        """Whether the clock is known to differ by more than the bound (refuse to lead)."""
        return self.offset is not None and (
            abs(self.offset) - self.uncertainty > MAX_CLOCK_OFFSET_SECONDS
        )

    def published(self) -> float | None:
        """The offset as the process node holds it (milliseconds are enough)."""
        return None if self.offset is None else round(self.offset, 3)


def clock_warning(process_id: str, offset: float | None) -> str | None:
    """What ``status`` says of a process whose published offset is past the bound."""
    if offset is None or abs(offset) <= MAX_CLOCK_OFFSET_SECONDS:
        return None
    way = "ahead of" if offset > 0 else "behind"
    return (
        f"{process_id}'s clock runs {abs(offset):.1f} s {way} ZooKeeper's (the bound is "
        f"{MAX_CLOCK_OFFSET_SECONDS:g} s): it refuses to lead until the host's clock is "
        "synchronized (check NTP on that host)"
    )
