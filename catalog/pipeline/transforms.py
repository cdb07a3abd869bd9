"""REWRITE transforms: naming, conforming their output to the target schema, chaining them."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pyarrow as pa

from catalog.errors import (
    SchemaIncompatibleError,
    ShardError,
)
from catalog.release import Transform
from catalog.schema import migrate
from catalog.schema.conform import Mismatch, conform
from catalog.shard import (
    DIFF,
    TS,
)

#: A REWRITE transformation (``catalog.release.Transform``): one batch to one batch, row for row.


def transform_name(transform: Transform) -> str:
    """How errors name a transform: its module and qualified name."""
    module = getattr(transform, "__module__", None)
    name = getattr(transform, "__qualname__", None) or repr(transform)
    return f"{module}.{name}" if module else name


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, what: str) -> pa.RecordBatch:
    """``batch`` relabelled as exactly ``schema``, or ShardError (reason ``transform-output``).

    Column names and order must match and types must be equal (list element names aside); a
    column with nulls under a non-nullable field is refused. ``what`` names the producer.
    """
    columns = conform(batch.schema.names, batch.columns, schema)
    if isinstance(columns, Mismatch):
        raise ShardError(
            f"{what} returned {columns.text}",
            reason="transform-output",
            transform=what,
            **columns.details,
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@attrs.frozen
class EvolveTo:
    """A step of a REWRITE chain that evolves the rows to ``schema``, as a step-by-step upgrade
    would have: the evolutions planned before a rewrite (the transform then sees the schema its
    release was written against) or after the last one (its output reaches the new schema).

    Added fields become typed nulls, deleted ones are dropped, widened types cast, renamed
    fields follow their declared former names, at every depth (``catalog.schema.migrate``). A
    required field the rows do not have is refused: an evolution never supplies values. The
    orchestrator adds it only where the plan has evolutions (``PlannedMigration.rewrites``), so
    a transform that merely forgets a column is still refused.
    """

    schema: pa.Schema
    why: str = "the evolutions planned after the rewrite"

    def __call__(self, data: pa.RecordBatch) -> pa.RecordBatch:
        # A transform's output says little of nullability: the rows are taken as holding values
        # everywhere, and the nulls they do hold are checked against the schema after the move.
        source = pa.schema([_required(f) for f in data.schema], metadata=data.schema.metadata)
        try:
            moved = migrate(data, source, self.schema, projection=True)
        except SchemaIncompatibleError as exc:
            raise ShardError(
                f"the rows cannot be evolved to the schema of {self.why}: {exc.message}",
                reason="transform-output",
                transform=self.why,
                column=exc.path,
            ) from exc
        assert isinstance(moved, pa.RecordBatch)
        return conform_batch(moved, self.schema, self.why)


def _required(field: pa.Field) -> pa.Field:
    """``field`` declared non-nullable at every depth (names, types and metadata kept)."""
    dtype = field.type
    if pa.types.is_struct(dtype):
        dtype = pa.struct([_required(f) for f in dtype])
    elif pa.types.is_large_list(dtype):
        dtype = pa.large_list(_required(dtype.value_field))
    elif pa.types.is_list(dtype):
        dtype = pa.list_(_required(dtype.value_field))
    elif pa.types.is_map(dtype):
        dtype = pa.map_(dtype.key_field, _required(dtype.item_field))
    return field.with_type(dtype).with_nullable(False)


def apply_transforms(
    batch: pa.RecordBatch,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
    *,
    project: bool = False,
) -> pa.RecordBatch:
    """Run ``transforms`` in order on an update batch; ``_ts``/``_diff`` pass through untouched.

    ``batch`` holds the source's live columns plus ``_ts`` and ``_diff``; each transform gets a
    RecordBatch of the data columns only and must return one with as many rows. The last output
    must match ``new_schema`` (:func:`conform_batch`); with ``project`` it is first projected
    onto it (fields it lacks dropped, nullable ones it has not filled with nulls, renames
    followed back: the evolutions after a rewrite, undone for its inverse). Errors name the
    offending transform.
    """
    names = [n for n in batch.schema.names if n not in (TS, DIFF)]
    data = batch.select(names)
    for transform in transforms:
        what = transform_name(transform)
        rows = data.num_rows
        try:
            out = transform(data)
        except ShardError:  # already names what is wrong (EvolveTo)
            raise
        except Exception as exc:  # the user's code: report which transform failed and why
            raise ShardError(
                f"transform {what} failed: {type(exc).__name__}: {exc}",
                reason="transform-failed",
                transform=what,
            ) from exc
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else _empty_batch(out.schema)
        if not isinstance(out, pa.RecordBatch):
            raise ShardError(
                f"transform {what} returned {type(out).__name__}, not a pyarrow.RecordBatch",
                reason="transform-output",
                transform=what,
            )
        if out.num_rows != rows:
            raise ShardError(
                f"transform {what} returned {out.num_rows} rows for {rows}: a REWRITE transform "
                "maps each row to one row",
                reason="transform-output",
                transform=what,
                rows=out.num_rows,
                expected_rows=rows,
            )
        data = out
    last = transform_name(transforms[-1]) if transforms else "the identity transform"
    if project:
        try:
            moved = migrate(data, data.schema, new_schema, projection=True, newer=True)
        except SchemaIncompatibleError as exc:
            raise ShardError(
                f"transform {last} returned rows that do not project onto the schema: "
                f"{exc.message}",
                reason="transform-output",
                transform=last,
            ) from exc
        assert isinstance(moved, pa.RecordBatch)
        data = moved
    data = conform_batch(data, new_schema, last)
    return pa.RecordBatch.from_arrays(
        [*data.columns, batch.column(TS), batch.column(DIFF)],
        schema=pa.schema([*new_schema, batch.schema.field(TS), batch.schema.field(DIFF)]),
    )


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
