"""REWRITE transforms of the example release history.

Each takes one batch in the collection's old schema and returns it in the new schema. Columns
they do not know (``_ts``, ``_diff`` and the rest of the row) pass through untouched, so the same
function runs on a bare row batch and on a shard's update batch, on arrow and through Spark's
``mapInArrow``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

UTC_MS = pa.timestamp("ms", tz="UTC")


def _with_column(batch: pa.RecordBatch, field: pa.Field, values: pa.Array) -> pa.RecordBatch:
    index = batch.schema.get_field_index(field.name)
    arrays = list(batch.columns)
    fields = list(batch.schema)
    arrays[index] = values
    fields[index] = field
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, batch.schema.metadata))


def role_ids_to_strings(batch: pa.RecordBatch) -> pa.RecordBatch:
    """mz_catalog.mz_roles 0.11.0: numeric role ids become user ids, ``7`` -> ``'u7'``."""
    ids = pc.binary_join_element_wise("u", pc.cast(batch.column("id"), pa.string()), "")
    return _with_column(batch, pa.field("id", pa.string(), nullable=False), ids)


def role_ids_to_numbers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The inverse of :func:`role_ids_to_strings` (a rollback of 0.11.0): ``'u7'`` -> ``7``.

    An id of another shape has no number: the cast fails, and the rollback is refused naming
    this transform before anything is written."""
    ids = pc.cast(pc.utf8_slice_codeunits(batch.column("id"), 1), pa.int64())
    return _with_column(batch, pa.field("id", pa.int64(), nullable=False), ids)


def lowercase_object_types(batch: pa.RecordBatch) -> pa.RecordBatch:
    """mz_internal.mz_comments 0.13.0: object types are normalised to lower case (same schema)."""
    field = batch.schema.field("object_type")
    return _with_column(batch, field, pc.utf8_lower(batch.column("object_type")))


def millis_to_timestamp(batch: pa.RecordBatch) -> pa.RecordBatch:
    """mz_internal.mz_session_history 0.14.0: epoch milliseconds become a UTC timestamp."""
    values = pc.cast(batch.column("connected_at"), UTC_MS)
    return _with_column(batch, pa.field("connected_at", UTC_MS, nullable=False), values)


def signed_sizes(batch: pa.RecordBatch) -> pa.RecordBatch:
    """mz_internal.mz_storage_usage_by_shard 1.0.0: sizes become signed, like every other size."""
    values = pc.cast(batch.column("size_bytes"), pa.int64())
    return _with_column(batch, pa.field("size_bytes", pa.int64(), nullable=False), values)
