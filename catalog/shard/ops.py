"""Shard operations for a caller's own transaction (create, evolve), and bulk state reads.

A registration changes only a state's head (:mod:`catalog.shard.stored`): its op is a
``SetData`` of the head, a few KB whatever the number of batches the shard lists."""

from __future__ import annotations

import attrs
import pyarrow as pa

from catalog.consensus import (
    Create,
    Op,
)
from catalog.errors import (
    ShardFinalizedError,
)
from catalog.schema import (
    evolve,
    migration_type,
)
from catalog.schema.ids import has_ids, ids_like, needs_ids, number
from catalog.shard.origin import Origin
from catalog.shard.state import Contraction, ShardState, shard_key
from catalog.shard.stored import change_ops, read_states

__all__ = [
    "clear_contraction_op",
    "contract_op",
    "create_op",
    "evolve_op",
    "expand_op",
    "read_states",
]


def _head_op(old: ShardState, new: ShardState) -> tuple[Op | None, ShardState]:
    ops, new = change_ops(old, new)
    assert len(ops) == 1, "a registration changes only the head"
    return ops[0], new


def create_op(
    shard_id: str, schema: pa.Schema, origin: Origin | None = None
) -> tuple[Op, ShardState]:
    """The op creating shard ``shard_id`` with first schema ``schema`` (for a caller's multi-op);
    a prepared replacement shard records its ``origin``.

    The ``shards`` container must exist. Raises SchemaIncompatibleError for an invalid schema.
    The returned state carries version 0, the version the create gives the znode.
    """
    state = ShardState(
        shard_id=shard_id, schemas=(migration_type(schema),), origin=origin, version=0
    )
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
        raise finalized_error(state)
    before = state
    if needs_ids(schema) and not has_ids(state.schema):
        # The first rename numbers the shard's fields, in every schema it registered: data of
        # any of them then reads by id (a name alone was the identity until now).
        numbered = number(state.schema)
        renumbered = tuple(ids_like(s, numbered) for s in state.schemas[:-1])
        state = attrs.evolve(state, schemas=(*renumbered, numbered))
    mtype = evolve(state.schema, schema)
    if mtype.equals(state.schema, check_metadata=True):
        return None, before
    return _head_op(before, attrs.evolve(state, schemas=(*state.schemas, mtype)))


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
    return _head_op(state, attrs.evolve(expanded, contraction=contraction))


def contract_op(state: ShardState) -> tuple[Op | None, ShardState]:
    """The op registering ``state``'s recorded contraction and clearing the record."""
    if state.contraction is None:
        return None, state
    _, contracted = evolve_op(state, state.contraction.schema)
    return _head_op(state, attrs.evolve(contracted, contraction=None))


def clear_contraction_op(state: ShardState) -> tuple[Op | None, ShardState]:
    """The op dropping a contraction record without registering it (an aborted upgrade's)."""
    if state.contraction is None:
        return None, state
    return _head_op(state, attrs.evolve(state, contraction=None))


def finalized_error(state: ShardState) -> ShardFinalizedError:
    what = "finalized" if state.finalized else "sealed"
    return ShardFinalizedError(
        f"shard {state.shard_id} is {what}: no more writes",
        shard_id=state.shard_id,
        reason=what,
    )
