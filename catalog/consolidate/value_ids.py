"""Value ids: a nested column as dense int64 ids, equal values with equal ids.

Arrow can neither sort nor group on nested columns (structs, lists, maps), nor on dictionary
or extension types. Consolidation replaces each such key column by its *value ids*, built
bottom-up and vectorized: primitive leaves are dictionary-encoded, a struct pairs its validity
with each child's ids, a list becomes the binary string of its elements' ids. A null is a
value of its own.

:class:`StandIns` uses them to consolidate a table with nested keys by the flat algorithms
(a sort of one numeric key, mostly): the nested columns stand in as their ids, and once the
rows are consolidated each id is given back the value of a row that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import ShardError

__all__ = ["StandIns", "value_ids"]


def _dense_ids(values: pa.Array) -> pa.Array:
    """Dense int64 ids of the distinct values of a non-nested array (null is a value)."""
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    return encoded.indices.cast(pa.int64())


def _pair_ids(left: pa.Array, right: pa.Array) -> pa.Array:
    """Dense ids of the pairs ``(left, right)``; both are dense, so the product cannot overflow."""
    width = (pc.max(right).as_py() or 0) + 1
    return _dense_ids(pc.add(pc.multiply(left, width), right))


def value_ids(values: pa.Array) -> pa.Array:
    """Dense int64 ids with ``id[i] == id[j]`` exactly when ``values[i] == values[j]``.

    Built bottom-up and vectorized: leaves are dictionary-encoded, a struct pairs its validity
    with each child's ids, a list becomes the binary string of its elements' ids.
    """
    dtype = values.type
    if isinstance(dtype, pa.ExtensionType):
        return value_ids(values.storage)
    if pa.types.is_dictionary(dtype):
        return value_ids(values.dictionary_decode())
    if pa.types.is_struct(dtype):
        ids = pc.cast(values.is_null(), pa.int64())
        for child in values.flatten():  # parent nulls merged in, slice offset applied
            ids = _pair_ids(ids, value_ids(child))
        return _dense_ids(ids)
    if pa.types.is_fixed_size_list(dtype):
        size = dtype.list_size
        children = values.values.slice(values.offset * size, len(values) * size)
        starts = pa.array(np.arange(len(values) + 1, dtype=np.int64) * size)
        return _sequence_ids(values, starts, children)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return _sequence_ids(values, values.offsets, values.values)
    if pa.types.is_union(dtype) or pa.types.is_nested(dtype):
        raise ShardError(
            f"cannot consolidate rows of type {dtype}", reason="unsupported-type", type=str(dtype)
        )
    return _dense_ids(values)


def _sequence_ids(values: pa.Array, offsets: pa.Array, children: pa.Array) -> pa.Array:
    child_ids = value_ids(children) if len(children) else pa.array([], pa.int64())
    if child_ids.offset:
        child_ids = pa.concat_arrays([child_ids])
    data = child_ids.buffers()[1] or pa.py_buffer(b"")
    byte_offsets = pc.multiply(offsets.cast(pa.int64()), 8)
    if byte_offsets.offset:
        byte_offsets = pa.concat_arrays([byte_offsets])
    strings = pa.Array.from_buffers(
        pa.large_binary(), len(values), [None, byte_offsets.buffers()[1], data]
    )
    # A null list's offsets may span garbage: every null must get the same id.
    if values.null_count:
        strings = pc.if_else(values.is_valid(), strings, pa.scalar(None, pa.large_binary()))
    return _dense_ids(strings)


@attrs.frozen
class StandIns:
    """A table whose nested key columns stand in as their value ids (:attr:`table`), and
    the way back (:meth:`restored`)."""

    original: pa.Table
    table: pa.Table
    #: For each stood-in column, a row of ``original`` holding each id's value.
    holders: dict[str, np.ndarray]

    @classmethod
    def of(cls, table: pa.Table, names: Sequence[str]) -> StandIns:
        """``table`` with the columns ``names`` replaced by their value ids (int64)."""
        proxy, holders = table, {}
        for name in names:
            ids = value_ids(table.column(name).combine_chunks())
            found = ids.to_numpy(zero_copy_only=False)
            holder = np.empty(int(found.max()) + 1 if len(found) else 0, dtype=np.int64)
            holder[found] = np.arange(len(found), dtype=np.int64)  # any holder will do
            holders[name] = holder
            index = proxy.schema.get_field_index(name)
            proxy = proxy.set_column(index, pa.field(name, pa.int64()), ids)
        return cls(table, proxy, holders)

    def restored(self, consolidated: pa.Table) -> pa.Table:
        """``consolidated`` (rows of :attr:`table`) with each id given back its value."""
        out = consolidated
        for name, holder in self.holders.items():
            ids = out.column(name).to_numpy()
            index = out.schema.get_field_index(name)
            values = self.original.column(name).take(pa.array(holder[ids]))
            out = out.set_column(index, self.original.schema.field(name), values)
        return out
