"""The arrow engine: snapshot, compaction and copy in process with pyarrow."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs
import pyarrow as pa

from catalog.consensus import Fence
from catalog.pipeline.output import (
    PART_ROWS,
    STREAM_ROWS,
    SnapshotWritten,
    finish,
    open_output,
    write_part,
)
from catalog.pipeline.pacing import Pacer
from catalog.pipeline.rewrite import (
    CopyPlan,
    copy_shard,
    diff_delta,
    write_transformed,
)
from catalog.pipeline.transforms import Transform
from catalog.shard import (
    BatchRef,
    CompactionResult,
    Shard,
)


@attrs.frozen
class ArrowEngine:
    """The in-process engine: the shard module's own pyarrow paths."""

    name: str = "arrow"

    def snapshot(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
    ) -> pa.Table:
        table = shard.snapshot(as_of, reader_schema)
        return table if limit is None else table.slice(0, limit)

    def snapshot_chunks(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
        chunk_rows: int = STREAM_ROWS,
    ) -> Iterator[pa.Table]:
        table = self.snapshot(shard, as_of, reader_schema, limit=limit)
        for start in range(0, table.num_rows, chunk_rows):
            yield table.slice(start, chunk_rows)

    def write_snapshot(
        self,
        shard: Shard,
        output: str,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
    ) -> SnapshotWritten:
        """The snapshot as Parquet parts in the new directory ``output`` (pipeline.output)."""
        store = open_output(output)
        table = shard.snapshot(as_of, reader_schema)
        step = PART_ROWS
        parts = [write_part(store, table.slice(i, step)) for i in range(0, table.num_rows, step)]
        return finish(store, output, parts, table.num_rows)

    def compact(self, shard: Shard, *, fence: Fence | None = None) -> CompactionResult:
        """``Shard.compact``: flat schemas consolidate by sorting, nested ones by hashing."""
        return shard.compact(fence=fence)

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
        pacer: Pacer | None = None,
    ) -> int:
        def produce(plan: CopyPlan) -> pa.Table | list[BatchRef]:
            if plan.by_diff:  # the whole source against the target: in memory, as one batch
                return diff_delta(source, target, plan, transforms, new_schema, pacer=pacer)
            return write_transformed(source, target, plan, transforms, new_schema, pacer)

        return copy_shard(source, target, fence, produce, self.name, pacer)
