"""How a shard state is stored: one znode (format 1), or a head and a body (format 2).

A schema registration, a seal or a contraction record changes the schemas and flags; an append,
a compaction or a move of ``since`` changes the batches, frontiers and write ledger. In format 1
both live in ``shards/<id>``, so registering a schema on a shard of 500 inline batches rewrites
~30 KB and a leader registering on hundreds of shards sends megabytes. Format 2 keeps the head
(schemas, ``sealed``, ``finalized``, contraction) in ``shards/<id>`` and the body (batches,
roll-ups, ``upper``, ``since``, ledger) in ``shards/<id>/batches``:

* a write that changes one half writes only it (a registration: the head; an append: the body);
* a write that changes both, or the flags, writes both in one transaction and gives them a new
  ``link``; a seal or a finalization therefore also moves the body, so an append (a CAS on the
  body alone) cannot land after one;
* a reader reads the head, then the body, pipelined on one session (so the body is at least as
  new); a body whose link differs, or that was written knowing more schemas than the head
  lists, belongs to a later write of both halves or a later registration: the reader reads
  again. Any other pair is a state that existed (only registrations came between);
* a shard is created in format 1 (it has no batches, one op in the creator's transaction) and
  split by the first write of its body; a format 1 state is read as before and stays one znode
  while only its head changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from catalog.consensus import (
    Consensus,
    Create,
    Delete,
    Op,
    SetData,
    Versioned,
    decode_json,
    decoding,
)
from catalog.errors import CorruptStateError, ShardError
from catalog.shard.ledger import WriteLedger
from catalog.shard.listing import BatchListing, RollupRef
from catalog.shard.origin import Origin
from catalog.shard.state import (
    NEWEST_FORMAT,
    SPLIT_FORMATS,
    Contraction,
    ShardState,
    body_key,
    schemas_equal,
    shard_key,
)

# Reads torn by concurrent writes of both halves are repeated this often before giving up.
_READ_ATTEMPTS = 20


class Torn(Exception):
    """The head and body read belong to different writes of both: read again."""


def decode_stored(head: Versioned, body: Versioned | None) -> ShardState | None:
    """The state stored as ``head`` (and ``body``); None when it was deleted in between."""
    raw = decode_json(head.value, head.key)
    if not isinstance(raw, dict) or raw.get("format", 1) not in SPLIT_FORMATS:
        if (
            isinstance(raw, dict)
            and isinstance(raw.get("format"), int)
            and (raw["format"] > NEWEST_FORMAT)
        ):
            raise CorruptStateError(
                f"{head.key} holds a shard state of format {raw['format']}, written by a newer "
                "catalog-upgrade: upgrade this process",
                key=head.key,
                reason="newer-format",
            )
        with decoding(head.key, "shard state"):
            return ShardState._from_json(raw, head.version)  # parsed once, not twice
    if body is None:
        return None  # both halves are deleted together: the head read was just before that
    with decoding(head.key, "shard state head"):
        schemas = ShardState.decode_schemas(raw["schemas"])
        link = int(raw["link"])
        header = dict(
            shard_id=raw["shard_id"],
            schemas=schemas,
            sealed=bool(raw["sealed"]),
            finalized=bool(raw["finalized"]),
            contraction=Contraction.from_json(raw.get("contraction")),
            origin=Origin.from_json(raw.get("origin")),
        )
    data = decode_json(body.value, body.key)
    with decoding(body.key, "shard state body"):
        if int(data["link"]) != link or int(data["schemas"]) > len(schemas):
            raise Torn()
        upper = int(data["upper"])
        return ShardState(
            **header,
            batches=BatchListing(data["batches"]),
            rollups=tuple(RollupRef.from_json(r) for r in data["rollups"]),
            upper=upper,
            since=int(data["since"]),
            writes=WriteLedger.from_json(data.get("writes"), upper),
            version=head.version,
            body_version=body.version,
            link=link,
        )


def read_states(consensus: Consensus, shard_ids: Sequence[str]) -> dict[str, ShardState | None]:
    """The states of many shards in one pipelined read (None for a shard that does not exist)."""
    return {
        s: None if found is None else found[0]
        for s, found in read_stored(consensus, shard_ids).items()
    }


def read_stored(
    consensus: Consensus, shard_ids: Sequence[str]
) -> dict[str, tuple[ShardState, Versioned] | None]:
    """:func:`read_states`, each with its head as read (its creation and modification times on
    ZooKeeper's clock)."""
    out: dict[str, tuple[ShardState, Versioned] | None] = {}
    pending = list(dict.fromkeys(shard_ids))
    for _ in range(_READ_ATTEMPTS):
        keys = [k for s in pending for k in (shard_key(s), body_key(s))]
        found = consensus.get_many(keys) if keys else {}
        torn = []
        for shard_id in pending:
            head = found[shard_key(shard_id)]
            try:
                state = None if head is None else decode_stored(head, found[body_key(shard_id)])
                out[shard_id] = None if state is None or head is None else (state, head)
            except Torn:
                torn.append(shard_id)
        if not torn:
            return {s: out[s] for s in shard_ids}
        pending = torn
    raise ShardError(
        f"shard states of {pending} kept changing under {_READ_ATTEMPTS} reads",
        shard_id=pending[0],
        reason="busy",
    )


def _head_changed(old: ShardState, new: ShardState) -> bool:
    return (
        old.contraction != new.contraction
        or (old.schemas is not new.schemas and not schemas_equal(old.schemas, new.schemas))
        or _flags_changed(old, new)
    )


def _flags_changed(old: ShardState, new: ShardState) -> bool:
    return old.sealed != new.sealed or old.finalized != new.finalized


def _body_changed(old: ShardState, new: ShardState) -> bool:
    return (
        old.upper != new.upper
        or old.since != new.since
        or old.batches is not new.batches
        or old.rollups != new.rollups
        or old.writes != new.writes
    )


def change_ops(old: ShardState, new: ShardState) -> tuple[list[Op], ShardState]:
    """The version-checked ops that turn ``old`` (as read) into ``new``, and ``new`` carrying
    the versions they give. No ops when nothing changed."""
    head, body = _head_changed(old, new), _body_changed(old, new)
    if not head and not body:
        return [], old
    if not old.split:
        if not body:  # a registration on a whole state: it stays whole
            new = attrs.evolve(new, version=old.version + 1, body_version=-1)
            return [SetData(old.key, new.encode(), old.version)], new
        new = attrs.evolve(new, version=old.version + 1, body_version=0, link=old.link + 1)
        return [
            SetData(old.key, new.encode_head(), old.version),
            Create(body_key(old.shard_id), new.encode_body()),
        ], new
    if (head and body) or _flags_changed(old, new):
        new = attrs.evolve(
            new,
            version=old.version + 1,
            body_version=old.body_version + 1,
            link=old.link + 1,
        )
        return [
            SetData(old.key, new.encode_head(), old.version),
            SetData(body_key(old.shard_id), new.encode_body(), old.body_version),
        ], new
    new = attrs.evolve(new, version=old.version, body_version=old.body_version, link=old.link)
    if head:
        new = attrs.evolve(new, version=old.version + 1)
        return [SetData(old.key, new.encode_head(), old.version)], new
    new = attrs.evolve(new, body_version=old.body_version + 1)
    return [SetData(body_key(old.shard_id), new.encode_body(), old.body_version)], new


def delete_ops(state: ShardState) -> list[Op]:
    """The ops deleting ``state``'s znodes (both halves at once), version-checked."""
    ops: list[Op] = []
    if state.split:
        ops.append(Delete(body_key(state.shard_id), state.body_version))
    ops.append(Delete(state.key, state.version))
    return ops
