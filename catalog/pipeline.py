"""The data pipeline: snapshot with lazy migration, compaction, and the REWRITE copy (DESIGN §7).

Every job exists on two engines behind one interface, :class:`Engine`:

* :class:`ArrowEngine` runs in process with pyarrow (the shard module's read path; compaction
  of flat schemas consolidates by sorting, ``catalog.consolidate``), for shards that fit in
  memory;
* :class:`SparkEngine` runs the same jobs as PySpark DataFrames over the same Parquet blobs (the
  blob store's URI; a local directory is read by absolute ``file://`` path), so shards larger
  than one machine's memory can be read, compacted and copied.

``engine="auto"`` picks Spark when a shard holds more than :data:`AUTO_SPARK_ROWS` rows. Both
engines give identical results: batches are migrated lazily from their own schema id to the
reader's schema (added fields as typed nulls, deleted fields dropped, at any depth), then
consolidated (identical ``(row, _ts)`` have their ``_diff`` summed, zeros dropped).

REWRITE (:func:`copy_transformed`): the target shard's ``upper`` records how far the source has
been copied, so a copy reads only the source updates with ``_ts`` in ``[target.upper,
source.upper)``, runs the release's transforms on them and compare-and-appends the result with
``expected_upper=target.upper, new_upper=source.upper``. Run read-only, it copies the source as
of its current upper; run again by the promoted leader (whose epoch fences the old writer), it
copies only the delta, so cutover costs the delta, not the shard. A lost append race re-reads and
copies what is still missing, so concurrent copies never duplicate a row.

Spark specifics (see :class:`SparkSessionProvider`): one session per process, quiet logs, UTC
session time zone, Arrow transfer on. Arrow types Spark lacks are mapped on the way in (unsigned
integers widen, ``_ts`` is read as ``decimal(20,0)`` and carried as a long) and restored exactly
on the way out, so a transform sees the same Arrow types on both engines. Spark cannot group by
map columns: consolidation groups such columns by their JSON text (``to_json``, injective for a
fixed schema and order-preserving like the arrow engine's value ids) and keeps the map itself
with ``first``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence
from catalog.consolidate import consolidate_sorted
from catalog.errors import (
    BadInputError,
    ConfigurationError,
    CorruptBlobError,
    ShardError,
    ShardFinalizedError,
)
from catalog.schema import check_reader, is_backward_compatible, migrate, migrate_batch
from catalog.shard import (
    DIFF,
    TS,
    BatchRef,
    CompactionResult,
    Shard,
    ShardState,
    consolidate,
    update_schema,
)
from catalog.state import read_catalog

__all__ = [
    "AUTO_SPARK_ROWS",
    "ENGINES",
    "SPARK_MASTER_ENV",
    "ArrowEngine",
    "CarryEvolutions",
    "Engine",
    "SparkEngine",
    "SparkSessionProvider",
    "StageProgress",
    "Transform",
    "apply_transforms",
    "collection_shard",
    "consolidate_frame",
    "consolidate_sorted",
    "copy_transformed",
    "engine_for",
    "java_version",
    "migrate_expression",
    "pyspark_version",
    "read_updates",
    "resolve_master",
    "restore_table",
    "spark_path",
    "spark_provider",
    "spark_type",
]

log = structlog.get_logger(__name__)

#: A REWRITE transformation (``catalog.release.Transform``): one batch to one batch, row for row.
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]

ENGINES = ("arrow", "spark", "auto")
#: ``auto`` runs a job on Spark when the shard holds more rows than this.
AUTO_SPARK_ROWS = 20_000_000
# A copy re-reads and retries when another process moved the target's upper first.
_COPY_ATTEMPTS = 20
# A Spark snapshot whose blobs vanished under it (compaction) re-reads this often.
_READ_ATTEMPTS = 5


class Engine(Protocol):
    """What both engines do; results are identical whichever runs them."""

    @property
    def name(self) -> str:
        """``arrow`` or ``spark``."""
        ...

    def snapshot(
        self, shard: Shard, as_of: int | None = None, reader_schema: pa.Schema | None = None
    ) -> pa.Table:
        """The shard as of ``as_of`` in ``reader_schema``, consolidated (``Shard.snapshot``)."""
        ...

    def compact(self, shard: Shard, *, fence: Fence | None = None) -> CompactionResult:
        """Merge every batch into the latest schema, consolidated (``Shard.compact``)."""
        ...

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
    ) -> int:
        """See :func:`copy_transformed`."""
        ...


# --- transforms -------------------------------------------------------------------------------


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
    if batch.schema.names != schema.names:
        raise ShardError(
            f"{what} returned columns {batch.schema.names}, the new schema has {schema.names}",
            reason="transform-output",
            transform=what,
            columns=batch.schema.names,
            expected=schema.names,
        )
    columns = []
    for field, column in zip(schema, batch.columns, strict=True):
        if column.type != field.type:
            raise ShardError(
                f"{what} returned column {field.name} as {column.type}, the new schema has "
                f"{field.type}",
                reason="transform-output",
                transform=what,
                column=field.name,
                type=str(column.type),
                expected=str(field.type),
            )
        if not field.nullable and column.null_count:
            raise ShardError(
                f"{what} returned nulls in non-nullable column {field.name}",
                reason="transform-output",
                transform=what,
                column=field.name,
            )
        # Equal types may still differ in list element names, which from_arrays rejects.
        columns.append(column if column.type.equals(field.type) else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@attrs.frozen
class CarryEvolutions:
    """A last transform that carries a REWRITE's output through the evolutions planned after it.

    One upgrade may merge a REWRITE of release X with EVOLUTIONs of later releases (0.10.0 ->
    0.15.0 rewrites ``mz_roles`` at 0.11.0 and adds ``attributes`` at 0.15.0): the user's
    transform produces X's columns while the plan's new schema is the latest. The orchestrator
    appends this transform only in that case, so a transform that merely forgets a column is
    still refused. Columns added later become typed nulls, deleted ones are dropped, nested
    additions are migrated; a required column nobody produced is refused.
    """

    schema: pa.Schema

    def __call__(self, data: pa.RecordBatch) -> pa.RecordBatch:
        what = "the evolutions planned after the rewrite"
        arrays = []
        for field in self.schema:
            if field.name in data.schema.names:
                column = data.column(field.name)
                if not column.type.equals(field.type) and is_backward_compatible(
                    column.type, field.type
                ):
                    column = migrate(column, column.type, field.type)
                arrays.append(column)
            elif field.nullable:
                arrays.append(pa.nulls(data.num_rows, field.type))
            else:
                raise ShardError(
                    f"the rewrite's output has no column {field.name}, which the new schema "
                    "requires and no later evolution adds",
                    reason="transform-output",
                    transform=what,
                    column=field.name,
                )
        return pa.RecordBatch.from_arrays(arrays, names=self.schema.names)


def apply_transforms(
    batch: pa.RecordBatch, transforms: Sequence[Transform], new_schema: pa.Schema
) -> pa.RecordBatch:
    """Run ``transforms`` in order on an update batch; ``_ts``/``_diff`` pass through untouched.

    ``batch`` holds the source's live columns plus ``_ts`` and ``_diff``; each transform gets a
    RecordBatch of the data columns only and must return one with as many rows. The last output
    must match ``new_schema`` (:func:`conform_batch`). Errors name the offending transform.
    """
    names = [n for n in batch.schema.names if n not in (TS, DIFF)]
    data = batch.select(names)
    for transform in transforms:
        what = transform_name(transform)
        rows = data.num_rows
        try:
            out = transform(data)
        except ShardError:  # already names what is wrong (CarryEvolutions)
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
    data = conform_batch(data, new_schema, last)
    return pa.RecordBatch.from_arrays(
        [*data.columns, batch.column(TS), batch.column(DIFF)],
        schema=pa.schema([*new_schema, batch.schema.field(TS), batch.schema.field(DIFF)]),
    )


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


# --- arrow engine -----------------------------------------------------------------------------


def _overlaps(ref: BatchRef, lower: int, upper: int) -> bool:
    return ref.lower < upper and ref.upper > lower


def read_updates(
    shard: Shard, state: ShardState, lower: int, upper: int, schema: pa.Schema | None = None
) -> pa.Table:
    """The shard's updates with ``lower <= _ts < upper``, unconsolidated, in ``schema``.

    ``schema`` defaults to the state's latest live schema; batches are read one schema id at a
    time (in parallel) and migrated from it. Batches entirely outside the range are not read.
    """
    target = state.live_schema if schema is None else schema
    groups: dict[int, list[BatchRef]] = {}
    for ref in shard.batches(state):
        if _overlaps(ref, lower, upper):
            groups.setdefault(ref.schema_id, []).append(ref)
    tables = []
    for schema_id, refs in sorted(groups.items()):
        table = shard.blob.get_batches(
            [r.key(shard.shard_id) for r in refs], expected_rows=[r.rows for r in refs]
        )
        if any(r.lower < lower or r.upper > upper for r in refs):
            ts = table.column(TS)
            keep = pc.and_(
                pc.greater_equal(ts, pa.scalar(lower, pa.uint64())),
                pc.less(ts, pa.scalar(upper, pa.uint64())),
            )
            table = table.filter(keep)
        tables.append(migrate_batch(table, state.live(schema_id), target))
    out_schema = _update_schema(target)
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables([t.select(out_schema.names) for t in tables]).cast(out_schema)


def _update_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus nullable ``_ts``/``_diff`` (what a copy passes to compare_and_append)."""
    return pa.schema([*schema, pa.field(TS, pa.uint64()), pa.field(DIFF, pa.int64())])


def transform_table(
    table: pa.Table, transforms: Sequence[Transform], new_schema: pa.Schema
) -> pa.Table:
    """:func:`apply_transforms` over every batch of ``table``."""
    batches = [
        apply_transforms(b, transforms, new_schema) for b in table.to_batches() if b.num_rows
    ]
    return pa.Table.from_batches(batches, schema=_update_schema(new_schema))


class _SourceMoved(Exception):
    """A Spark read failed and the source state moved meanwhile (its batches were replaced)."""


@attrs.frozen
class _CopyPlan:
    """One attempt of a copy: the frontiers read and whether times are still distinguishable."""

    source: ShardState
    target: ShardState

    @property
    def lower(self) -> int:
        return self.target.upper

    @property
    def upper(self) -> int:
        return self.source.upper

    @property
    def by_diff(self) -> bool:
        """True when compaction may have advanced copied source times to the target's upper.

        Compaction moves times below ``since`` to ``since``: once ``since >= lower``, rows
        already copied may carry a time at or above ``lower``, so the delta cannot be selected
        by time: it is the transformed source minus what the target holds.
        """
        return self.lower > 0 and self.source.since >= self.lower


def _plan_copy(source: Shard, target: Shard) -> _CopyPlan | None:
    """The next copy attempt, or None when the target has seen all of the source."""
    plan = _CopyPlan(source=source.state(), target=target.state())
    if plan.lower > plan.upper:
        raise ShardError(
            f"shard {target.shard_id} is ahead of its source {source.shard_id} "
            f"({plan.lower} > {plan.upper}): it is not a copy of it",
            reason="target-ahead",
            shard_id=target.shard_id,
            source=source.shard_id,
            upper=plan.lower,
            source_upper=plan.upper,
        )
    return None if plan.lower == plan.upper else plan


def _diff_delta(
    source: Shard,
    target: Shard,
    plan: _CopyPlan,
    transforms: Sequence[Transform],
    new_schema: pa.Schema,
) -> pa.Table:
    """The delta as ``transform(source) - target``, all at time ``upper - 1`` (see by_diff)."""
    at = pa.scalar(plan.upper - 1, pa.uint64())
    full = transform_table(read_updates(source, plan.source, 0, plan.upper), transforms, new_schema)
    held = read_updates(target, plan.target, 0, plan.lower, new_schema)
    held = held.set_column(held.schema.get_field_index(DIFF), DIFF, pc.negate(held.column(DIFF)))
    both = pa.concat_tables([full, held.cast(full.schema)])
    both = both.set_column(both.schema.get_field_index(TS), TS, pa.repeat(at, both.num_rows))
    return consolidate(both)


def _copy(
    source: Shard,
    target: Shard,
    fence: Fence | None,
    produce: Callable[[_CopyPlan], pa.Table],
    engine: str,
) -> int:
    """The copy loop both engines share: plan, produce the delta, compare-and-append, repeat.

    A lost append race (another copier of the same version and generation moved the target
    first) re-plans from the new upper, so each source update lands exactly once.
    """
    for _ in range(_COPY_ATTEMPTS):
        plan = _plan_copy(source, target)
        if plan is None:
            return 0
        try:
            out = produce(plan)
        except (CorruptBlobError, _SourceMoved) as exc:
            # Compaction replaced the batches under the read: plan again from the new state.
            vanished = isinstance(exc, _SourceMoved) or exc.details.get("reason") == "missing"
            if not vanished or source.state().version == plan.source.version:
                raise
            log.info("rewrite_source_moved", source=source.shard_id, target=target.shard_id)
            continue
        result = target.compare_and_append(out, plan.lower, plan.upper, fence=fence)
        log.info(
            "rewrite_append",
            engine=engine,
            source=source.shard_id,
            target=target.shard_id,
            lower=plan.lower,
            upper=plan.upper,
            rows=out.num_rows,
            by_diff=plan.by_diff,
            ok=result.ok,
        )
        if result.ok:
            return out.num_rows
    raise ShardError(
        f"copying {source.shard_id} into {target.shard_id} kept losing append races",
        reason="contended",
        shard_id=target.shard_id,
        source=source.shard_id,
    )


@attrs.frozen
class ArrowEngine:
    """The in-process engine: the shard module's own pyarrow paths."""

    name: str = "arrow"

    def snapshot(
        self, shard: Shard, as_of: int | None = None, reader_schema: pa.Schema | None = None
    ) -> pa.Table:
        return shard.snapshot(as_of, reader_schema)

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
    ) -> int:
        def produce(plan: _CopyPlan) -> pa.Table:
            if plan.by_diff:
                return _diff_delta(source, target, plan, transforms, new_schema)
            updates = read_updates(source, plan.source, plan.lower, plan.upper)
            return transform_table(updates, transforms, new_schema)

        return _copy(source, target, fence, produce, self.name)


# --- Spark: session ---------------------------------------------------------------------------

#: The environment variable naming a Spark master (``--spark-master`` wins over it).
SPARK_MASTER_ENV = "SPARK_MASTER"
MIN_JAVA = 17
MIN_PYSPARK = (4, 0)

_LOG4J_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""
# PySpark warns about pandas 3 on every Arrow UDF; we never hand Spark pandas objects.
_PANDAS_WARNING = "PySpark does not yet fully support pandas"
_JAVA_VERSION_RE = re.compile(r'version "(?P<version>[^"]+)"')


def default_master() -> str:
    """``local[N]`` with N the machine's cores (what ``local[*]`` means, spelled out in logs)."""
    return f"local[{os.cpu_count() or 2}]"


def resolve_master(master: str | None = None) -> str:
    """``master``, else ``$SPARK_MASTER``, else :func:`default_master`."""
    return master or os.environ.get(SPARK_MASTER_ENV) or default_master()


def java_version() -> str:
    """The version of the Java Spark will start (``$JAVA_HOME/bin/java``, else ``java``).

    Raises ConfigurationError when there is none or it is older than :data:`MIN_JAVA`.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    fix = f"install Java {MIN_JAVA} or newer and put it on PATH (or set JAVA_HOME)"
    if java is None or not Path(java).exists():
        raise ConfigurationError(f"Spark needs Java, none was found: {fix}", suggestion=fix)
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigurationError(f"{java} -version failed: {exc}", java=java) from exc
    found = _JAVA_VERSION_RE.search(done.stderr + done.stdout)
    if found is None:
        raise ConfigurationError(f"cannot tell the version of {java}", java=java, suggestion=fix)
    version = found.group("version")
    parts = version.split(".")
    major = int(parts[1] if parts[0] == "1" and len(parts) > 1 else re.sub(r"\D.*", "", parts[0]))
    if major < MIN_JAVA:
        raise ConfigurationError(
            f"Spark needs Java {MIN_JAVA}+, {java} is {version}: {fix}",
            java=java,
            version=version,
            suggestion=fix,
        )
    return version


def pyspark_version() -> str:
    """The installed PySpark version; ConfigurationError when missing or older than 4.0."""
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigurationError(
            "the spark engine needs PySpark: pip install 'pyspark[sql]>=4.0'"
        ) from exc
    version = str(pyspark.__version__)
    numbers = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if numbers < MIN_PYSPARK:
        raise ConfigurationError(
            f"the spark engine needs PySpark 4.0+, found {version}",
            version=version,
            suggestion="pip install 'pyspark[sql]>=4.0'",
        )
    return version


@attrs.frozen
class StageProgress:
    """Tasks of the running Spark stages: what a progress bar shows for a Spark job."""

    stages: int
    tasks: int
    completed: int


@attrs.define
class SparkSessionProvider:
    """Starts the process's one SparkSession on first use and hands it out (thread-safe).

    Spark allows one SparkContext per process, so pass one provider around (or use
    :func:`spark_provider`, which caches one per master). Configuration is for small local
    runs unless ``conf`` says otherwise: UI off, logs at ERROR through a log4j2 file written
    at start, 4 shuffle partitions, Arrow transfer on, UTC session time zone.
    """

    master: str = attrs.field(factory=resolve_master)
    app_name: str = "catalog-upgrade"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    conf: Mapping[str, str] = attrs.field(factory=dict)
    _session: Any = attrs.field(default=None, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)
    _log_dir: Path | None = attrs.field(default=None, init=False, repr=False)

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> Any:
        """The SparkSession (``pyspark.sql.SparkSession``), started on first call."""
        with self._lock:
            if self._session is None:
                self._session = self._start()
            return self._session

    def _start(self) -> Any:
        java = java_version()
        version = pyspark_version()
        from pyspark.sql import SparkSession

        # Python workers must run this interpreter: it has pyarrow and the catalog package.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
        self._log_dir = Path(tempfile.mkdtemp(prefix="catalog-upgrade-spark-"))
        log4j = self._log_dir / "log4j2.properties"
        log4j.write_text(_LOG4J_PROPERTIES)
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": self.driver_memory,
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.local.dir": str(self._log_dir),
            **self.conf,
        }
        builder = SparkSession.builder.master(self.master).appName(self.app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        started = time.perf_counter()
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        actual = session.sparkContext.master
        if actual != self.master:
            raise ConfigurationError(
                f"this process already runs Spark on {actual}, not {self.master}: "
                "one SparkSession per process",
                master=self.master,
                running=actual,
            )
        log.info(
            "spark_started",
            master=self.master,
            spark=version,
            java=java,
            seconds=round(time.perf_counter() - started, 2),
        )
        return session

    def stop(self) -> None:
        """Stop the session (tests and benchmarks; a CLI process just exits)."""
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None
            if self._log_dir is not None:
                shutil.rmtree(self._log_dir, ignore_errors=True)
                self._log_dir = None

    def stage_progress(self) -> StageProgress | None:
        """Tasks of the active stages, or None when Spark is not running or idle."""
        session = self._session
        if session is None:
            return None
        tracker = session.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        infos = [i for i in infos if i is not None]
        if not infos:
            return None
        return StageProgress(
            stages=len(infos),
            tasks=sum(i.numTasks for i in infos),
            completed=sum(i.numCompletedTasks for i in infos),
        )


@functools.cache
def spark_provider(master: str | None = None) -> SparkSessionProvider:
    """The process's provider for ``master`` (resolved by :func:`resolve_master`).

    Cached so that every caller of one process shares one session (Spark allows only one
    SparkContext per process anyway); the cache is the only process-wide state here.
    """
    return SparkSessionProvider(master=resolve_master(master))


# --- Spark: types -----------------------------------------------------------------------------


def _unsupported(dtype: pa.DataType, path: str) -> ShardError:
    return ShardError(
        f"the spark engine cannot process column {path} of type {dtype}: use the arrow engine",
        reason="spark-unsupported-type",
        path=path,
        type=str(dtype),
    )


def spark_type(dtype: pa.DataType, path: str = "") -> Any:
    """The Spark SQL type Spark reads a Parquet column of Arrow type ``dtype`` as.

    Unsigned integers widen (uint64 becomes ``decimal(20,0)``), large variants become the
    plain ones; ShardError (reason ``spark-unsupported-type``) for types Spark cannot read.
    """
    from pyspark.sql import types as T

    simple = {
        pa.bool_(): T.BooleanType(),
        pa.int8(): T.ByteType(),
        pa.int16(): T.ShortType(),
        pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(),
        pa.uint8(): T.ShortType(),
        pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(),
        pa.uint64(): T.DecimalType(20, 0),
        pa.float32(): T.FloatType(),
        pa.float64(): T.DoubleType(),
        pa.string(): T.StringType(),
        pa.large_string(): T.StringType(),
        pa.binary(): T.BinaryType(),
        pa.large_binary(): T.BinaryType(),
        pa.date32(): T.DateType(),
    }
    if dtype in simple:
        return simple[dtype]
    if pa.types.is_timestamp(dtype) and dtype.unit != "ns":
        return T.TimestampType() if dtype.tz else T.TimestampNTZType()
    if pa.types.is_decimal128(dtype):
        return T.DecimalType(dtype.precision, dtype.scale)
    if pa.types.is_struct(dtype):
        if dtype.num_fields == 0:
            raise _unsupported(dtype, path)
        return T.StructType(
            [
                T.StructField(f.name, spark_type(f.type, _join(path, f.name)), True)
                for f in dtype.fields
            ]
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return T.ArrayType(spark_type(dtype.value_type, _join(path, "items")), True)
    if pa.types.is_map(dtype):
        return T.MapType(
            spark_type(dtype.key_type, _join(path, "key")),
            spark_type(dtype.item_type, _join(path, "value")),
            True,
        )
    raise _unsupported(dtype, path)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an update schema (``_ts`` as a long: see :func:`_read_schema`)."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [T.StructField(TS, T.LongType(), True), T.StructField(DIFF, T.LongType(), True)]
    return T.StructType(fields)


def _read_schema(schema: pa.Schema) -> Any:
    """What Spark reads a stored batch of live ``schema`` as: ``_ts`` is a uint64 there."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [
        T.StructField(TS, T.DecimalType(20, 0), True),
        T.StructField(DIFF, T.LongType(), True),
    ]
    return T.StructType(fields)


def _relaxed(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every nested field nullable (map keys aside): a target casts can reach."""
    if pa.types.is_struct(dtype):
        return pa.struct([pa.field(f.name, _relaxed(f.type)) for f in dtype.fields])
    if pa.types.is_large_list(dtype):
        return pa.large_list(pa.field(dtype.value_field.name, _relaxed(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(pa.field(dtype.value_field.name, _relaxed(dtype.value_type)))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_type, pa.field(dtype.item_field.name, _relaxed(dtype.item_type)))
    return dtype


def _restore_column(
    column: pa.Array | pa.ChunkedArray, dtype: pa.DataType
) -> pa.Array | pa.ChunkedArray:
    if column.type.equals(dtype):
        return column
    relaxed = _relaxed(dtype)
    cast = column.cast(relaxed)
    if relaxed.equals(dtype):
        return cast
    # Nullability lives in the type only: a view relabels without touching the data.
    if isinstance(cast, pa.ChunkedArray):
        return pa.chunked_array([chunk.view(dtype) for chunk in cast.chunks], type=dtype)
    return cast.view(dtype)


def restore_table(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """Spark's Arrow output (columns by name) as exactly ``schema``: unsigned integers, large
    types, timestamp units and nested nullability are restored."""
    columns = [_restore_column(table.column(f.name), f.type) for f in schema]
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([pa.RecordBatch.from_arrays(columns, schema=schema)])
    return pa.Table.from_arrays(columns, schema=schema)


def _restore_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [_restore_column(batch.column(f.name), f.type) for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _contains_map(dtype: pa.DataType) -> bool:
    if pa.types.is_map(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(_contains_map(f.type) for f in dtype.fields)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _contains_map(dtype.value_type)
    return False


def _is_sortable(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type) for f in schema)


# --- Spark: expressions -----------------------------------------------------------------------


def _col(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _null_of(dtype: pa.DataType, path: str) -> Any:
    from pyspark.sql import functions as F

    return F.lit(None).cast(spark_type(dtype, path))


def migrate_expression(column: Any, source: pa.DataType, target: pa.DataType, path: str) -> Any:
    """A Spark expression migrating ``column`` of live type ``source`` to ``target``.

    The Spark twin of ``catalog.schema.migrate``: struct fields matched by name (added ones as
    typed nulls, deleted ones dropped, reader projections reordered), lists and map values
    migrated element-wise with ``transform`` and ``transform_values``, null parents kept null.
    The rules themselves were checked before (shard history, :func:`check_reader`).
    """
    from pyspark.sql import functions as F

    if source.equals(target) or _relaxed(source).equals(_relaxed(target)):
        return column
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        children = []
        for field in target.fields:
            child_path = _join(path, field.name)
            index = source.get_field_index(field.name)
            if index < 0:
                children.append(_null_of(field.type, child_path).alias(field.name))
            else:
                child = column.getField(field.name)
                migrated = migrate_expression(
                    child, source.field(index).type, field.type, child_path
                )
                children.append(migrated.alias(field.name))
        return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*children))
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(source) for f in lists) and any(f(target) for f in lists):
        items = _join(path, "items")
        return F.transform(
            column, lambda e: migrate_expression(e, source.value_type, target.value_type, items)
        )
    if pa.types.is_map(source) and pa.types.is_map(target):
        values = _join(path, "value")
        return F.transform_values(
            column, lambda _k, v: migrate_expression(v, source.item_type, target.item_type, values)
        )
    return column


def consolidate_frame(frame: Any, schema: pa.Schema) -> Any:
    """Sum ``_diff`` over identical ``(columns of schema..., _ts)``, drop zeros (Spark).

    Spark cannot group by maps (or structs and arrays holding one): such a column is grouped by
    ``to_json`` of it, which is injective for a fixed type, and kept with ``first``.
    """
    from pyspark.sql import functions as F

    keys, kept = [], []
    for index, field in enumerate(schema):
        if _contains_map(field.type):
            keys.append(F.to_json(F.struct(_col(field.name).alias("v"))).alias(f"__key{index}"))
            kept.append(F.first(_col(field.name)).alias(field.name))
        else:
            keys.append(_col(field.name))
    keys.append(_col(TS))
    grouped = frame.groupBy(*keys).agg(F.sum(_col(DIFF)).alias(DIFF), *kept)
    grouped = grouped.where(_col(DIFF) != 0)
    return grouped.select(*[_col(f.name) for f in schema], _col(TS), _col(DIFF))


def spark_path(blob: BlobStore, key: str) -> str:
    """The path Spark opens for blob ``key``: a ``file://`` URI for a local store, else the
    store's URI (``s3://`` spelled ``s3a://``, query parameters dropped) joined with the key."""
    if blob.filesystem.type_name == "local":
        return Path(blob.path(key)).as_uri()
    base = blob.uri.split("?", 1)[0].rstrip("/")
    if base.startswith("s3://"):
        base = "s3a://" + base[len("s3://") :]
    return f"{base}/{key}"


# --- Spark: worker functions (run in Python workers; module-level so they pickle by name) -------

# A ShardError raised in a worker reaches the driver as text; this marker carries its data.
_ERROR_MARKER = "catalog-upgrade-error:"


def _worker_error(exc: ShardError) -> RuntimeError:
    return RuntimeError(_ERROR_MARKER + json.dumps(exc.to_json()))


def _transform_partition(
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
        exact = _restore_batch(batch, source_schema)
        try:
            out = apply_transforms(exact, transforms, new_schema)
        except ShardError as exc:
            raise _worker_error(exc) from exc
        yield _restore_batch(out, spark_arrow)


_WRITTEN_SCHEMA = "name string, rows long, lower long, upper long, ordered boolean"


def _write_partition(
    uri: str,
    shard_id: str,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of Spark compaction: one partition becomes one stored batch.

    Sorted by every column when they are all sortable, like ``Shard.compact``; yields the
    batch's entry (name, rows, time bounds, ordered) for the driver's commit.
    """
    parts = [b for b in batches if b.num_rows]
    if not parts:
        return
    table = restore_table(pa.Table.from_batches(parts), schema)
    ordered = _is_sortable(schema)
    if ordered:
        table = table.sort_by([(n, "ascending") for n in table.column_names])
    bounds = pc.min_max(table.column(TS))
    name = uuid.uuid4().hex
    ref = BatchRef(name, 0, table.num_rows, 0, 0)
    BlobStore.from_uri(uri).put_batch(ref.key(shard_id), table)
    yield pa.RecordBatch.from_pydict(
        {
            "name": [name],
            "rows": [table.num_rows],
            "lower": [int(bounds["min"].as_py())],
            "upper": [int(bounds["max"].as_py()) + 1],
            "ordered": [ordered],
        }
    )


def _pickle_transforms(transforms: Sequence[Transform]) -> bytes:
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


def _raise_worker_error(exc: BaseException) -> None:
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


# --- Spark: engine ----------------------------------------------------------------------------


def _finalized(state: ShardState) -> ShardFinalizedError:
    return ShardFinalizedError(
        f"shard {state.shard_id} is finalized", shard_id=state.shard_id, reason="finalized"
    )


def _snapshot_time(state: ShardState, as_of: int | None) -> int | None:
    """``as_of`` checked against the frontiers like ``Shard.snapshot`` (None: empty shard)."""
    if as_of is None:
        return None if state.upper == 0 else state.upper - 1
    if as_of >= state.upper:
        raise ShardError(
            f"as_of {as_of} not yet complete: upper is {state.upper}",
            shard_id=state.shard_id,
            reason="not-complete",
            as_of=as_of,
            upper=state.upper,
        )
    if as_of < state.since:
        raise ShardError(
            f"as_of {as_of} is below since {state.since}: those times were compacted",
            shard_id=state.shard_id,
            reason="compacted",
            as_of=as_of,
            since=state.since,
        )
    return as_of


@attrs.define
class SparkEngine:
    """The PySpark engine: the same jobs as DataFrames over the same Parquet blobs."""

    provider: SparkSessionProvider = attrs.field(factory=spark_provider)
    name: str = "spark"

    @property
    def spark(self) -> Any:
        return self.provider.session()

    # -- reads ------------------------------------------------------------------------------

    def updates_frame(
        self, shard: Shard, state: ShardState, refs: Sequence[BatchRef], schema: pa.Schema
    ) -> Any:
        """The updates of batches ``refs`` as one DataFrame in ``schema`` (+ ``_ts``, ``_diff``).

        One Parquet scan per schema id, each migrated lazily with :func:`migrate_expression`,
        unioned by name. ``_ts`` is a long.
        """

        groups: dict[int, list[BatchRef]] = {}
        for ref in refs:
            groups.setdefault(ref.schema_id, []).append(ref)
        frames = []
        for schema_id, group in sorted(groups.items()):
            live = state.live(schema_id)
            paths = [spark_path(shard.blob, r.key(shard.shard_id)) for r in group]
            scan = self.spark.read.schema(_read_schema(live)).parquet(*paths)
            columns = []
            for field in schema:
                index = live.get_field_index(field.name)
                if index < 0:
                    columns.append(_null_of(field.type, field.name).alias(field.name))
                else:
                    source = live.field(index).type
                    expr = migrate_expression(_col(field.name), source, field.type, field.name)
                    columns.append(expr.alias(field.name))
            columns += [_col(TS).cast("long").alias(TS), _col(DIFF)]
            frames.append(scan.select(*columns))
        if not frames:
            return self.spark.createDataFrame([], spark_schema(schema))
        return functools.reduce(lambda a, b: a.unionByName(b), frames)

    def snapshot_frame(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        state: ShardState | None = None,
    ) -> tuple[Any, pa.Schema]:
        """The shard as of ``as_of`` as a lazy DataFrame, with the schema of its data columns.

        Same checks as ``Shard.snapshot``: reader fencing (:func:`check_reader`), ``as_of``
        within ``[since, upper)``, finalized shards refused. The DataFrame reads blobs when it
        runs: hold ``shard.lease()`` meanwhile to keep finalization away.
        """
        from pyspark.sql import functions as F

        state = shard.state() if state is None else state
        if state.finalized:
            raise _finalized(state)
        if reader_schema is None:
            reader = state.live_schema
        else:
            check_reader(state.schema, reader_schema)
            reader = reader_schema
        time = _snapshot_time(state, as_of)
        if time is None:
            return self.spark.createDataFrame([], spark_schema(reader)), reader
        refs = [b for b in shard.batches(state) if b.lower <= time]
        frame = self.updates_frame(shard, state, refs, reader)
        frame = frame.where(_col(TS) <= time).withColumn(TS, F.lit(time).cast("long"))
        return consolidate_frame(frame, reader), reader

    def snapshot(
        self, shard: Shard, as_of: int | None = None, reader_schema: pa.Schema | None = None
    ) -> pa.Table:
        """``Shard.snapshot`` computed by Spark: the same rows and exactly the same schema."""
        for _ in range(_READ_ATTEMPTS):
            state = shard.state()
            frame, reader = self.snapshot_frame(shard, as_of, reader_schema, state=state)
            try:
                return restore_table(self._collect(frame), update_schema(reader))
            except _spark_errors() as exc:
                if shard.state().version == state.version:
                    raise
                log.info("spark_snapshot_state_moved", shard=shard.shard_id, error=str(exc)[:200])
        raise ShardError(
            f"shard {shard.shard_id} kept changing under a Spark snapshot",
            shard_id=shard.shard_id,
            reason="contended",
        )

    def _collect(self, frame: Any) -> pa.Table:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
            try:
                return frame.toArrow()
            except _spark_errors() as exc:
                _raise_worker_error(exc)
                raise

    # -- compaction -------------------------------------------------------------------------

    def compact(self, shard: Shard, *, fence: Fence | None = None) -> CompactionResult:
        """``Shard.compact`` on Spark: every batch migrated to the latest schema, times below
        since advanced, consolidated, written by the workers (one batch per partition, sorted
        when sortable), then committed with ``Shard.commit_compaction``.

        Outputs of a failed job are orphans that ``Shard.gc_orphans`` removes.
        """
        from pyspark.sql import functions as F

        state = shard.state()
        if state.finalized:
            raise _finalized(state)
        inputs = shard.batches(state)
        if not inputs:
            return CompactionResult(True, 0, None, state)
        target = state.live_schema
        frame = self.updates_frame(shard, state, inputs, target)
        if state.since > 0:
            frame = frame.withColumn(TS, F.greatest(_col(TS), F.lit(state.since).cast("long")))
        frame = consolidate_frame(frame, target)
        writer = functools.partial(
            _write_partition, shard.blob.uri, shard.shard_id, update_schema(target)
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
            written = frame.mapInArrow(writer, _WRITTEN_SCHEMA).collect()
        outputs = sorted(
            (
                BatchRef(
                    r["name"],
                    state.schema_id,
                    r["rows"],
                    r["lower"],
                    r["upper"],
                    ordered=r["ordered"],
                    consolidated=True,  # groups never straddle partitions
                )
                for r in written
            ),
            key=lambda b: (b.lower, b.name),
        )
        result = shard.commit_compaction(state, inputs, outputs, fence=fence)
        if result.applied:
            log.info(
                "spark_compacted",
                shard=shard.shard_id,
                inputs=len(inputs),
                outputs=len(outputs),
                rows=sum(b.rows for b in outputs),
            )
        return result

    # -- rewrite ----------------------------------------------------------------------------

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
    ) -> int:
        payload = _pickle_transforms(transforms)
        out_schema = _update_schema(new_schema)

        def produce(plan: _CopyPlan) -> pa.Table:
            if plan.by_diff:
                # Rare (compaction advanced copied times): the diff needs the whole target
                # in memory anyway, so it runs on arrow.
                return _diff_delta(source, target, plan, transforms, new_schema)
            live = plan.source.live_schema
            refs = [b for b in source.batches(plan.source) if _overlaps(b, plan.lower, plan.upper)]
            frame = self.updates_frame(source, plan.source, refs, live)
            frame = frame.where((_col(TS) >= plan.lower) & (_col(TS) < plan.upper))
            spark_out = spark_schema(new_schema)
            spark_arrow = _spark_arrow_schema(spark_out)
            body = functools.partial(
                _transform_partition, payload, _update_schema(live), new_schema, spark_arrow
            )
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
                mapped = frame.mapInArrow(body, spark_out)
            try:
                return restore_table(self._collect(mapped), out_schema)
            except _spark_errors() as exc:
                if source.state().version != plan.source.version:
                    raise _SourceMoved() from exc
                raise

        return _copy(source, target, fence, produce, self.name)


def _spark_arrow_schema(struct: Any) -> pa.Schema:
    """The Arrow schema Spark expects from mapInArrow for Spark schema ``struct``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")


def _spark_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a failed Spark job raises in the driver."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JJavaError)


# --- entry points -----------------------------------------------------------------------------


def engine_for(
    engine: str, shard: Shard | None = None, *, spark: SparkSessionProvider | None = None
) -> Engine:
    """The engine named ``engine`` (``arrow``, ``spark`` or ``auto``).

    ``auto`` picks Spark when ``shard`` holds more than :data:`AUTO_SPARK_ROWS` stored rows,
    arrow otherwise. ``spark`` defaults to the process's :func:`spark_provider`.
    """
    if engine not in ENGINES:
        raise BadInputError(
            f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}", engine=engine
        )
    if engine == "auto":
        rows = shard.state().row_count if shard is not None else 0
        engine = "spark" if rows > AUTO_SPARK_ROWS else "arrow"
    if engine == "arrow":
        return ArrowEngine()
    return SparkEngine(spark if spark is not None else spark_provider())


def copy_transformed(
    source: Shard,
    target: Shard,
    transforms: Sequence[Callable[[pa.RecordBatch], pa.RecordBatch]],
    new_schema: pa.Schema,
    *,
    fence: Fence | None,
    engine: str = "auto",
) -> int:
    """Copy the source updates the target has not seen yet, transformed; return the row count.

    Reads the source's updates with ``_ts`` in ``[target.upper, source.upper)`` (each batch
    migrated from its schema id to the source's latest live schema), runs ``transforms`` in order
    on their columns (``_ts``/``_diff`` carried alongside untouched), checks the result against
    ``new_schema`` (ShardError naming the transform otherwise) and compare-and-appends it to
    ``target`` moving its upper to the source's, fenced by ``fence``. Idempotent: when the target's
    upper already equals the source's it returns 0. Transforms must be deterministic and map each
    row to one row. ``engine`` is ``arrow``, ``spark`` or ``auto`` (by the source's size).
    """
    chosen = engine_for(engine, source)
    return chosen.copy_transformed(source, target, transforms, new_schema, fence=fence)


def _normal_uri(uri: str) -> str:
    return str(Path(uri).expanduser().resolve()) if "://" not in uri else uri.rstrip("/")


def collection_shard(consensus: Consensus, collection: str, blob_uri: str | None = None) -> Shard:
    """The shard the environment's catalog names for ``collection`` (``SCHEMA.NAME``).

    The blob store is the one the environment recorded at bootstrap; ``blob_uri`` may repeat it
    but not differ (ConfigurationError). BadInputError when the environment has no catalog yet
    or no such collection (``collection`` and the ``known`` names in its data).
    """
    found = read_catalog(consensus)
    if found is None:
        raise BadInputError(
            f"environment {consensus.root} has no catalog yet: start a sidecar to bootstrap it",
            reason="not-bootstrapped",
            root=consensus.root,
        )
    catalog, _version = found
    by_name = catalog.by_name()
    ref = by_name.get(collection)
    if ref is None:
        raise BadInputError(
            f"unknown collection {collection!r} (name it SCHEMA.NAME)",
            reason="unknown-collection",
            collection=collection,
            known=sorted(by_name)[:50],
        )
    if blob_uri is not None and _normal_uri(blob_uri) != _normal_uri(catalog.blob_uri):
        raise ConfigurationError(
            f"blob URI {blob_uri} differs from {catalog.blob_uri}, which the environment recorded",
            blob_uri=blob_uri,
            recorded=catalog.blob_uri,
        )
    return Shard(consensus, BlobStore.from_uri(catalog.blob_uri), ref.shard_id)
