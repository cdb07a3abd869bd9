"""Functions that run in Spark's Python workers (module-level, so they pickle by name)."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import types
import uuid
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from catalog.blob import BlobStore
from catalog.errors import (
    ShardError,
)
from catalog.pipeline.output import PART_ROWS, write_part
from catalog.pipeline.spark.types import is_sortable
from catalog.pipeline.transforms import Transform, apply_transforms
from catalog.schema.restore import restore_batch, restore_table
from catalog.shard import (
    TS,
    BatchRef,
    update_schema,
)

# A ShardError raised in a worker reaches the driver as text; this marker carries its data.
_ERROR_MARKER = "catalog-upgrade-error:"


def _worker_error(exc: ShardError) -> RuntimeError:
    return RuntimeError(_ERROR_MARKER + json.dumps(exc.to_json()))


def transform_partition(
    payload: bytes,
    source_schema: pa.Schema,
    new_schema: pa.Schema,
    spark_arrow: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the REWRITE copy: exact Arrow types in, the transforms, Spark's out."""
    from pyspark import cloudpickle

    transforms = cloudpickle.loads(payload)
    for batch in batches:
        if not batch.num_rows:
            continue
        exact = restore_batch(batch, source_schema)
        try:
            out = apply_transforms(exact, transforms, new_schema)
        except ShardError as exc:
            raise _worker_error(exc) from exc
        yield restore_batch(out, spark_arrow)


WRITTEN_SCHEMA = "name string, rows long, lower long, upper long, ordered boolean"
#: The rows a pyarrow scan distributes: one blob key each.
SCAN_KEYS_SCHEMA = "key string"


def scan_partition(
    uri: str, spark_arrow: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a scan that Spark's Hadoop file system cannot do (an object store
    without its connector): each key's Parquet file read by pyarrow here, in ``spark_arrow``
    (the Arrow form of what Spark's own scan would give), a row group's worth at a time."""
    store = BlobStore.from_uri(uri)
    for batch in batches:
        for key in batch.column("key").to_pylist():
            table = store.get_batch(key, columns=spark_arrow.names)
            yield from restore_table(table, spark_arrow).to_batches(max_chunksize=ROW_GROUP_ROWS)


# Spark compaction writes a row group per this many rows (what a task holds at a time).
ROW_GROUP_ROWS = 131_072


def write_partition(
    uri: str,
    shard_id: str,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of Spark compaction: one partition becomes one stored batch.

    Spark sorted the partition already when every column is sortable (``ordered``); the rows
    are written a row group at a time as they arrive, so a task never holds its partition.
    Yields the batch's entry (name, rows, time bounds, ordered) for the driver's commit.
    """
    parts = iter(_in_parts(batches, ROW_GROUP_ROWS))
    first = next(parts, None)
    if first is None:
        return
    name = uuid.uuid4().hex
    rows, lows, highs = [], [], []

    def tables() -> Iterator[pa.Table]:
        for part in itertools.chain([first], parts):
            table = restore_table(pa.Table.from_batches(part), schema)
            bounds = pc.min_max(table.column(TS))
            rows.append(table.num_rows)
            lows.append(int(bounds["min"].as_py()))
            highs.append(int(bounds["max"].as_py()))
            yield table

    store = BlobStore.from_uri(uri)
    store.put_tables(BatchRef(name, 0, 0, 0, 0).key(shard_id), schema, tables())
    yield _entry(name, sum(rows), min(lows), max(highs) + 1, is_sortable(schema))


def _entry(name: str, rows: int, lower: int, upper: int, ordered: bool) -> pa.RecordBatch:
    """A written batch's entry for the driver's commit (``WRITTEN_SCHEMA``)."""
    return pa.RecordBatch.from_pydict(
        {"name": [name], "rows": [rows], "lower": [lower], "upper": [upper], "ordered": [ordered]}
    )


def _write_batch(store: BlobStore, shard_id: str, table: pa.Table, ordered: bool) -> pa.RecordBatch:
    """Write ``table`` as a new batch file of ``shard_id``; its entry (``WRITTEN_SCHEMA``)."""
    bounds = pc.min_max(table.column(TS))
    name = uuid.uuid4().hex
    store.put_batch(BatchRef(name, 0, table.num_rows, 0, 0).key(shard_id), table)
    low, high = int(bounds["min"].as_py()), int(bounds["max"].as_py())
    return _entry(name, table.num_rows, low, high + 1, ordered)


def transform_write_partition(
    payload: bytes,
    source_schema: pa.Schema,
    new_schema: pa.Schema,
    uri: str,
    shard_id: str,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the REWRITE copy on executors: exact Arrow types in, the transforms,
    the target's batch files written here (one per ``PART_ROWS`` rows); yields each
    file's entry (name, rows, time bounds) for the driver's one compare-and-append."""
    from pyspark import cloudpickle

    transforms = cloudpickle.loads(payload)
    stored = update_schema(new_schema)
    store = BlobStore.from_uri(uri)

    def transformed() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                try:
                    exact = restore_batch(batch, source_schema)
                    yield apply_transforms(exact, transforms, new_schema)
                except ShardError as exc:
                    raise _worker_error(exc) from exc

    for part in _in_parts(transformed()):
        table = restore_table(pa.Table.from_batches(part), stored)
        yield _write_batch(store, shard_id, table, False)


PARTS_SCHEMA = "name string, rows long"


def _in_parts(
    batches: Iterable[pa.RecordBatch], part_rows: int = PART_ROWS
) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` (empty ones dropped) grouped into lists of about ``part_rows`` rows, so a
    task holds one part's rows at a time, not its whole partition."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= part_rows:
            yield pending
            pending, rows = [], 0
    if pending:
        yield pending


def write_snapshot_partition(
    uri: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of ``read --output``: a partition's rows in exact types, written as
    part files of at most about ``PART_ROWS`` rows into the output directory ``uri``."""
    store = BlobStore.from_uri(uri)
    for part in _in_parts(batches):
        table = restore_table(pa.Table.from_batches(part), schema)
        name = write_part(store, table)
        yield pa.RecordBatch.from_pydict({"name": [name], "rows": [table.num_rows]})


CHUNK_SCHEMA = "chunk binary"


def ipc_partition(
    schema: pa.Schema, part_rows: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a streamed snapshot: a partition's rows in exact types, as Arrow IPC
    streams of about ``part_rows`` rows each, one per output row (the driver fetches them a
    partition at a time and decodes them without a type conversion)."""
    for part in _in_parts(batches, part_rows):
        table = restore_table(pa.Table.from_batches(part), schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        yield pa.RecordBatch.from_pydict({"chunk": [sink.getvalue().to_pybytes()]})


def pickle_transforms(transforms: Sequence[Transform]) -> bytes:
    """The transforms pickled for Spark workers, by value where workers could not import them.

    Release files are imported from their directory, which workers do not have on their path,
    so their modules are pickled by value; installed packages are pickled by name.
    """
    from pyspark import cloudpickle

    modules = []
    for transform in transforms:
        module = sys.modules.get(getattr(transform, "__module__", "") or "")
        if module is not None and _needs_pickling_by_value(module):
            modules.append(module)
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return bytes(cloudpickle.dumps(list(transforms)))
    finally:
        for module in modules:
            with contextlib.suppress(ValueError):
                cloudpickle.unregister_pickle_by_value(module)


def _needs_pickling_by_value(module: types.ModuleType) -> bool:
    if module.__name__ == "__main__" or module.__name__.split(".")[0] in {
        "catalog",
        "orchestrator",
    }:
        return False
    filename = getattr(module, "__file__", None)
    if not filename:
        return False
    return not any(part in filename for part in ("site-packages", "dist-packages"))


def raise_worker_error(exc: BaseException) -> None:
    """Re-raise a ShardError a worker reported, with its data, if ``exc`` carries one."""
    text = str(exc)
    start = text.find(_ERROR_MARKER)
    if start < 0:
        return
    decoder = json.JSONDecoder()
    try:
        data, _ = decoder.raw_decode(text[start + len(_ERROR_MARKER) :])
    except ValueError:
        return
    data.pop("error", None)
    data.pop("exit_code", None)
    message = data.pop("message", "a Spark worker failed")
    raise ShardError(message, **data) from exc
