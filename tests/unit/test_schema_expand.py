"""Expansion, the first half of an evolution, as properties over allowed evolution chains."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given

from catalog import schema as cs
from catalog.schema.expand import expansion
from unit.test_schema_properties import SETTINGS, chains


def _keeps(old: pa.DataType, expanded: pa.DataType) -> bool:
    """Every field of ``old`` is in ``expanded`` with its nullability, in its order, at any
    depth (list elements and map values included); ``expanded`` may only add fields."""
    if pa.types.is_struct(old):
        names = [old.field(i).name for i in range(old.num_fields)]
        got = [expanded.field(i).name for i in range(expanded.num_fields)]
        if got[: len(names)] != names:
            return False
        return all(
            old.field(i).nullable == expanded.field(i).nullable
            and _keeps(old.field(i).type, expanded.field(i).type)
            for i in range(len(names))
        )
    if pa.types.is_list(old) or pa.types.is_large_list(old):
        return old.value_field.nullable == expanded.value_field.nullable and _keeps(
            old.value_type, expanded.value_type
        )
    if pa.types.is_map(old):
        return old.item_field.nullable == expanded.item_field.nullable and _keeps(
            old.item_type, expanded.item_type
        )
    return bool(old.equals(expanded))


@SETTINGS
@given(chain=chains(max_steps=3))
def test_expansion_then_contraction_is_a_valid_evolution(chain: list[pa.Schema]) -> None:
    """From any schema to any later one of an allowed chain: the expansion evolves the first,
    keeps every field of it as it was, and the later schema evolves the expansion."""
    old, new = chain[0], chain[-1]
    expanded = expansion(old, new)
    assert _keeps(pa.struct(list(old)), pa.struct(list(expanded)))
    history = cs.evolve(cs.migration_type(old), expanded)
    assert cs.live_schema(cs.evolve(history, new)) == new
    assert cs.is_backward_compatible(old, expanded)


def test_expansion_of_a_deletion_and_a_relaxation_changes_nothing() -> None:
    old = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string())])
    new = pa.schema([pa.field("a", pa.int64(), nullable=True)])
    assert expansion(old, new).equals(old)
