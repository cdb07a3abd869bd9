"""Values under null parents: consolidation by hashing flattens structs (parent nulls merged
into the children), and Parquet refuses a null in a non-nullable field even under a null
parent, so a compaction of such rows failed until the values were put back."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import catalog.schema as cs
from catalog.consolidate.by_hashing import consolidate_hashed
from catalog.schema.restore import fill_hidden_nulls
from catalog.shard import DIFF, TS

A = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
OLD = pa.schema([pa.field("s", A), pa.field("m", pa.map_(pa.string(), pa.int64()))])
NEW = pa.schema([pa.field("s", pa.struct([*A, pa.field("f2", pa.float64())])), OLD.field("m")])


def stored_then_migrated() -> pa.Table:
    """A row with a null struct, written to Parquet and read back, then migrated (a field
    added to the struct) as a compaction reads it."""
    rows = pa.Table.from_pylist([{"s": None, "m": None}, {"s": {"a": 1, "b": "x"}, "m": []}], OLD)
    rows = rows.append_column(TS, pa.array([0, 0], pa.uint64()))
    rows = rows.append_column(DIFF, pa.array([1, 1], pa.int64()))
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    buffer.seek(0)
    return cs.migrate_batch(pq.read_table(buffer), OLD, NEW)


def test_a_hash_consolidated_table_writes_to_parquet_once_filled() -> None:
    merged = consolidate_hashed(stored_then_migrated())
    with pytest.raises(pa.ArrowInvalid, match="non-nullable"):
        pq.write_table(merged, io.BytesIO())  # what compaction hit
    filled = fill_hidden_nulls(merged)
    pq.write_table(filled, io.BytesIO())
    assert filled.to_pylist() == merged.to_pylist()  # the same rows: only hidden values differ
    assert fill_hidden_nulls(filled.select([TS, DIFF])).num_columns == 2
