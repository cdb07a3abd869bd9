"""Election values: a leader's fence, the epoch record, election events; reading the epoch and
promotion target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from catalog.consensus import (
    Consensus,
    Fence,
    Versioned,
    decoding,
)
from catalog.environment import (
    ELECTION_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
)

CANDIDATE_PREFIX: Final = "n_"


# ElectionEvent kinds. Watches: promotion, epoch, catalog, candidates. Session: suspended,
# resumed, lost (a follower's session expired; it re-joins), rejoined. Leadership ends:
# leadership_lost (session expired), superseded (newer epoch or promotion), stepped_down.
EVENT_KINDS: Final = frozenset(
    {
        "promotion",
        "epoch",
        "catalog",
        "candidates",
        "suspended",
        "resumed",
        "lost",
        "rejoined",
        "leadership_lost",
        "superseded",
        "stepped_down",
    }
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


@attrs.frozen
class ElectionEvent:
    """A change ``on_change`` hears about; fields not concerned by ``kind`` are None."""

    kind: str = attrs.field(validator=attrs.validators.in_(EVENT_KINDS))
    is_leader: bool = False
    promotion: int | None = None
    epoch: EpochInfo | None = None
    catalog_version: str | None = None
    catalog_generation: int | None = None
    candidates: tuple[str, ...] = ()
    reason: str | None = None


def candidate_key(deploy_generation: int) -> str:
    return f"{ELECTION_KEY}/{deploy_generation}"


def read_epoch(consensus: Consensus) -> EpochInfo | None:
    """The epoch znode, or None before the first takeover."""
    found = consensus.get(EPOCH_KEY)
    return None if found is None else EpochInfo.from_versioned(found)


def _generation_in(found: Versioned | None, what: str) -> int | None:
    """The ``deploy_generation`` a node holds (None: absent or empty); CorruptStateError naming
    the node when it holds something else."""
    if found is None or not found.value:
        return None
    data = found.json()
    with decoding(found.key, what):
        return int(data["deploy_generation"])


def promotion_of(found: Versioned | None) -> int | None:
    return _generation_in(found, "promotion target")


def generation_of_catalog(found: Versioned | None) -> int | None:
    return _generation_in(found, "catalog")


def read_promotion(consensus: Consensus) -> int | None:
    """The promotion target generation, or None when nothing was promoted yet."""
    return promotion_of(consensus.get(PROMOTION_KEY))
