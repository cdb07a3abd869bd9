"""Shard operations for a caller's own transaction (create, evolve), and bulk state reads."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pyarrow as pa

from catalog.consensus import (
    Consensus,
    Create,
    Op,
    SetData,
)
from catalog.errors import (
    ShardFinalizedError,
)
from catalog.schema import (
    evolve,
    migration_type,
)
from catalog.shard.state import Contraction, ShardState, shard_key


def create_op(shard_id: str, schema: pa.Schema) -> tuple[Op, ShardState]:
    """The op creating shard ``shard_id`` with first schema ``schema`` (for a caller's multi-op).

    The ``shards`` container must exist. Raises SchemaIncompatibleError for an invalid schema.
    The returned state carries version 0, the version the create gives the znode.
    """
    state = ShardState(shard_id=shard_id, schemas=(migration_type(schema),), version=0)
    return Create(shard_key(shard_id), state.encode()), state


def evolve_op(state: ShardState, schema: pa.Schema) -> tuple[Op | None, ShardState]:
    """The CAS op registering live ``schema`` on top of ``state`` (read at ``state.version``).

    Returns ``(None, state)`` when ``schema`` is already the latest (nothing to write).
    Raises SchemaIncompatibleError (checked against the whole history, tombstones included)
    and ShardFinalizedError for a finalized shard. The op is a ``SetData`` on the shard key at
    ``state.version``: put many into one fenced ``Consensus.commit`` to evolve many shards in
    one transaction; a VersionMismatchError names the shard that moved. The returned state
    carries the version the op gives the znode.
    """
    if state.finalized:
        raise _finalized(state)
    mtype = evolve(state.schema, schema)
    if mtype.equals(state.schema, check_metadata=True):
        return None, state
    new = attrs.evolve(state, schemas=(*state.schemas, mtype), version=state.version + 1)
    return SetData(state.key, new.encode(), state.version), new


def expand_op(
    state: ShardState, schema: pa.Schema, contraction: Contraction
) -> tuple[Op | None, ShardState]:
    """The op registering expansion ``schema`` and recording ``contraction`` with it.

    Refuses (SchemaIncompatibleError) unless both halves are valid evolutions: the contraction
    is checked against the history with the expansion in it, so nothing is written for an
    evolution whose second half would later be refused. ``(None, state)`` when both are there.
    """
    _, expanded = evolve_op(state, schema)
    evolve(expanded.schema, contraction.schema)
    if expanded.schema.equals(state.schema, check_metadata=True) and state.contraction == (
        contraction
    ):
        return None, state
    new = attrs.evolve(expanded, contraction=contraction, version=state.version + 1)
    return SetData(state.key, new.encode(), state.version), new


def contract_op(state: ShardState) -> tuple[Op | None, ShardState]:
    """The op registering ``state``'s recorded contraction and clearing the record."""
    if state.contraction is None:
        return None, state
    _, contracted = evolve_op(state, state.contraction.schema)
    new = attrs.evolve(contracted, contraction=None, version=state.version + 1)
    return SetData(state.key, new.encode(), state.version), new


def clear_contraction_op(state: ShardState) -> tuple[Op | None, ShardState]:
    """The op dropping a contraction record without registering it (an aborted upgrade's)."""
    if state.contraction is None:
        return None, state
    new = attrs.evolve(state, contraction=None, version=state.version + 1)
    return SetData(state.key, new.encode(), state.version), new


def read_states(consensus: Consensus, shard_ids: Sequence[str]) -> dict[str, ShardState | None]:
    """The states of many shards in one pipelined read (None for a shard that does not exist)."""
    found = consensus.get_many([shard_key(s) for s in shard_ids])
    out: dict[str, ShardState | None] = {}
    for shard_id in shard_ids:
        value = found[shard_key(shard_id)]
        if value is None:
            out[shard_id] = None
        else:
            out[shard_id] = ShardState.decode(value.value, value.version, value.key)
    return out


def _finalized(state: ShardState) -> ShardFinalizedError:
    what = "finalized" if state.finalized else "sealed"
    return ShardFinalizedError(
        f"shard {state.shard_id} is {what}: no more writes",
        shard_id=state.shard_id,
        reason=what,
    )
