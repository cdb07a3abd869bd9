"""The pending upgrade: an environment upgraded but not finalized (docs/design-upgrade.md).

The leader that switches the catalog from release Vp to release V writes, in the same
transaction, the ``pending`` node: where the catalog came from (the whole previous catalog, so a
rollback can restore it), each collection V replaced (its shard before and after, and the
replacement's upper at the switch: rows at or past it are V's own writes) and when the upgrade
finalizes by itself, if it does. While the node exists:

* the release Vp (and only it) may be promoted again: the *rollback*
  (``orchestrator.migrate.rollback``);
* nothing Vp needs is finalized, contracted or retired: its shards stay readable and writable
  by it, its schemas registered and kept.

*Finalization* first marks the node ``finalizing`` (one compare-and-set: from then on no rollback
is admitted), then registers the contractions and deletes the node
(``orchestrator.migrate.finalization``). Its absence means the catalog's version is final.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from catalog.consensus import (
    CONNECTION_ERRORS,
    Consensus,
    Create,
    Op,
    SetData,
    decode_json,
    decoding,
    encode_json,
)
from catalog.environment import PENDING_KEY, CatalogState, resolve_kept
from catalog.errors import ConnectionLostError

__all__ = [
    "FORMAT",
    "Finalizing",
    "PendingUpgrade",
    "ReplacedCollection",
    "pending_write_op",
    "read_pending",
]

FORMAT: Final = 1


@attrs.frozen
class ReplacedCollection:
    """A collection the pending upgrade moved to a replacement shard."""

    global_id: str
    name: str
    from_shard: str
    to_shard: str
    #: The replacement's upper at the switch: its updates at or past it are the upgrade's own.
    upper: int
    #: The upgrade's release declares an inverse transform for it (rows can be carried back).
    inverse: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "from_shard": self.from_shard,
            "to_shard": self.to_shard,
            "upper": self.upper,
            "inverse": self.inverse,
        }

    @classmethod
    def from_json(cls, global_id: str, data: Mapping[str, Any]) -> ReplacedCollection:
        return cls(
            global_id=global_id,
            name=str(data["name"]),
            from_shard=str(data["from_shard"]),
            to_shard=str(data["to_shard"]),
            upper=int(data["upper"]),
            inverse=bool(data.get("inverse", False)),
        )


@attrs.frozen
class Finalizing:
    """The decision to finalize: who took it, when and why (``operator``, ``timer``,
    ``promotion of V``, ``immediately``)."""

    requested_by: str
    requested_at: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(hash=False)
class PendingUpgrade:
    """An upgrade to ``version`` at ``deploy_generation`` from ``from_version`` (at
    ``from_generation``), switched at ``since`` and not final yet."""

    version: str
    deploy_generation: int
    from_version: str
    from_generation: int
    since: float
    previous: CatalogState
    replaced: Mapping[str, ReplacedCollection] = attrs.field(factory=dict)
    #: When the serving leader finalizes it by itself (None: only ``finalize`` does).
    finalize_at: float | None = None
    finalizing: Finalizing | None = None

    def protected_shards(self) -> set[str]:
        """Shards the previous release needs while the upgrade is pending."""
        return self.previous.shard_ids()

    def _head(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "from_version": self.from_version,
            "from_generation": self.from_generation,
            "since": self.since,
            "finalize_at": self.finalize_at,
            "finalizing": None if self.finalizing is None else self.finalizing.to_json(),
        }

    def status_json(self) -> dict[str, Any]:
        """What status shows (no catalog: that is the previous release's business)."""
        return {**self._head(), "replaced": sorted(r.name for r in self.replaced.values())}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            **self._head(),
            "replaced": {gid: r.to_json() for gid, r in sorted(self.replaced.items())},
            "previous": self.previous.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingUpgrade:
        if int(data.get("format", FORMAT)) > FORMAT:
            raise ValueError(f"format {data['format']} is newer than this release knows")
        finalizing = data.get("finalizing")
        at = data.get("finalize_at")
        return cls(
            version=str(data["version"]),
            deploy_generation=int(data["deploy_generation"]),
            from_version=str(data["from_version"]),
            from_generation=int(data["from_generation"]),
            since=float(data["since"]),
            finalize_at=None if at is None else float(at),
            finalizing=None if finalizing is None else Finalizing(**finalizing),
            replaced={
                gid: ReplacedCollection.from_json(gid, r) for gid, r in data["replaced"].items()
            },
            previous=CatalogState.from_json(data["previous"]),
        )

    def encode(self) -> bytes:
        return encode_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes) -> PendingUpgrade:
        value = decode_json(data, PENDING_KEY)
        with decoding(PENDING_KEY, "pending upgrade"):
            if not isinstance(value, Mapping):
                raise TypeError(f"expected an object, found {type(value).__name__}")
            return cls.from_json(value)


def read_pending(
    consensus: Consensus, *, schemas: bool = False
) -> tuple[PendingUpgrade, int] | None:
    """The pending upgrade and its znode version; None when the catalog's version is final.

    ``schemas``: resolve the schemas the previous catalog keeps (what a rollback restores)."""
    found = consensus.get(PENDING_KEY)
    if found is None or not found.value:
        return None
    pending = PendingUpgrade.decode(found.value)
    if schemas:
        pending = attrs.evolve(pending, previous=resolve_kept(consensus, pending.previous))
    return pending, found.version


def switched_at(consensus: Consensus) -> float | None:
    """When the pending upgrade was switched to, on ZooKeeper's clock (its node's ``ctime``,
    in seconds); None when none is pending. Decisions that compare times written by different
    processes take it, never ``since`` (the switching leader's own clock)."""
    try:
        stat = consensus.client.exists(consensus.path(PENDING_KEY))
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError(f"ZooKeeper did not answer for {PENDING_KEY}") from exc
    return None if stat is None else float(stat.ctime) / 1000.0


def pending_write_op(pending: PendingUpgrade, expected_version: int) -> Op:
    """The op that writes ``pending`` over the version read (-1: created by the switch)."""
    if expected_version < 0:
        return Create(PENDING_KEY, pending.encode())
    return SetData(PENDING_KEY, pending.encode(), expected_version)
