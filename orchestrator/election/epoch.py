"""The epoch record of the last takeover, and the leadership that holds its fence.

The record says who leads, for which generation, at which znode version; every durable write
a leader makes carries ``Check(epoch, version-at-its-takeover)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from catalog.consensus import (
    Consensus,
    Fence,
    Versioned,
    decoding,
)
from catalog.environment import (
    EPOCH_KEY,
)


@attrs.frozen
class Leadership:
    """What a leader holds; every durable write it makes carries ``fence``.

    ``guard`` (attached by :class:`LeaderElection`, called with the seconds it may wait for a
    suspended session to come back) raises ``ConnectionLostError`` while the session stays
    suspended (retryable: ``CasRetry`` waits) and ``FencedError`` once leadership is over; call
    :meth:`check` before each write. A hand-built Leadership has no guard.
    """

    process_id: str
    deploy_generation: int
    epoch: int
    fence: Fence
    guard: Callable[[float], object] | None = attrs.field(
        default=None, eq=False, repr=False, kw_only=True
    )

    def check(self, wait: float = 0.0) -> None:
        """Raise unless this leadership may write, waiting up to ``wait`` seconds for a
        suspended session to come back (no-op without a guard)."""
        if self.guard is not None:
            self.guard(wait)


@attrs.frozen
class EpochInfo:
    """The epoch znode: who took over last, for which generation, and at which znode version."""

    epoch: int
    leader: str | None
    deploy_generation: int
    session: str | None
    version: int
    host: str | None = None
    pid: int | None = None
    taken_over_at: float | None = None

    @classmethod
    def from_versioned(cls, found: Versioned) -> EpochInfo | None:
        """The epoch record (None for an empty node); CorruptStateError naming the key when
        the node holds something else."""
        data = found.json()
        if data is None:
            return None
        with decoding(found.key or EPOCH_KEY, "epoch record"):
            if not isinstance(data, dict):
                raise TypeError(f"expected an object, found {type(data).__name__}")
            return cls._of(data, found.version)

    @classmethod
    def _of(cls, data: dict[str, Any], version: int) -> EpochInfo:
        return cls(
            epoch=int(data.get("epoch", 0)),
            leader=data.get("leader"),
            deploy_generation=int(data.get("deploy_generation", 0)),
            session=data.get("session"),
            version=version,
            host=data.get("host"),
            pid=data.get("pid"),
            taken_over_at=data.get("taken_over_at"),
        )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def read_epoch(consensus: Consensus) -> EpochInfo | None:
    """The epoch znode, or None before the first takeover."""
    found = consensus.get(EPOCH_KEY)
    return None if found is None else EpochInfo.from_versioned(found)
