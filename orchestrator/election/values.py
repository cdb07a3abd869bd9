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
    decode_json,
    decoding,
    encode_json,
)
from catalog.environment import (
    CATALOG_KEY,
    ELECTION_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
    CatalogState,
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


@attrs.frozen
class Promotion:
    """The promotion node: the generation asked to lead, who asked and when, and the target it
    replaced. The one codec of ``promotion`` (the CLI, the HTTP promote and a bootstrapping
    takeover write it; the election, ``promote --wait``, status and the history read it)."""

    deploy_generation: int
    requested_by: str | None = None
    requested_at: float | None = None
    previous: int | None = None

    @classmethod
    def decode(cls, data: bytes | None, key: str = PROMOTION_KEY) -> Promotion | None:
        """The promotion stored at ``key`` (None: nothing promoted yet, an empty node);
        CorruptStateError naming the key when it holds something else."""
        if not data:
            return None
        value = decode_json(data, key)
        with decoding(key, "promotion target"):
            if not isinstance(value, dict):
                raise TypeError(f"expected an object, found {type(value).__name__}")
            previous = value.get("previous")
            return cls(
                deploy_generation=int(value["deploy_generation"]),
                requested_by=value.get("requested_by"),
                requested_at=value.get("requested_at"),
                previous=None if previous is None else int(previous),
            )

    @classmethod
    def of(cls, found: Versioned | None) -> Promotion | None:
        """:meth:`decode` of a node read with its version (None: absent or empty)."""
        return None if found is None else cls.decode(found.value, found.key or PROMOTION_KEY)

    def encode(self) -> bytes:
        return encode_json(attrs.asdict(self))


def promotion_of(found: Versioned | None) -> int | None:
    """The promoted generation a read node holds (None: nothing promoted yet)."""
    promotion = Promotion.of(found)
    return None if promotion is None else promotion.deploy_generation


def generation_of_catalog(found: Versioned | None) -> int | None:
    """The generation of a read catalog node (None: absent or empty); decoded by
    :meth:`CatalogState.decode`, the catalog's one codec."""
    if found is None or not found.value:
        return None
    return CatalogState.decode(found.value, found.key or CATALOG_KEY).deploy_generation


def read_promotion_request(consensus: Consensus) -> Promotion | None:
    """The promotion node, or None when nothing was promoted yet."""
    return Promotion.of(consensus.get(PROMOTION_KEY))


def read_promotion(consensus: Consensus) -> int | None:
    """The promotion target generation, or None when nothing was promoted yet."""
    return promotion_of(consensus.get(PROMOTION_KEY))
