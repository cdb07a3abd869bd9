"""The data pipeline: snapshot with lazy migration, compaction, and the REWRITE copy.

Every job exists on two engines behind one interface, :class:`Engine`:

* :class:`ArrowEngine` runs in process with pyarrow (the shard module's read path; compaction
  of flat schemas consolidates by sorting, ``catalog.consolidate``), for shards that fit in
  memory;
* :class:`SparkEngine` runs the same jobs as PySpark DataFrames over the same Parquet blobs (the
  blob store's URI; a local directory is read by absolute ``file://`` path), so shards larger
  than one machine's memory can be read, compacted and copied.

``engine="auto"`` picks Spark by the shard's estimated bytes: above :data:`AUTO_CLUSTER_BYTES`
with a cluster master, or above :data:`AUTO_MEMORY_FRACTION` of the memory available. Both
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
with ``first``."""

from __future__ import annotations

from catalog.pipeline.arrow import ArrowEngine
from catalog.pipeline.engine import (
    AUTO_CLUSTER_BYTES,
    AUTO_MEMORY_FRACTION,
    ENGINES,
    Engine,
    collection_shard,
    copy_transformed,
    engine_for,
)
from catalog.pipeline.spark.config import (
    SPARK_MASTER_ENV,
    SparkConfig,
    parse_spark_conf,
    resolve_master,
)
from catalog.pipeline.spark.engine import SparkEngine
from catalog.pipeline.spark.expressions import consolidate_frame, migrate_expression, spark_path
from catalog.pipeline.spark.session import (
    SparkSessionProvider,
    StageProgress,
    java_version,
    pyspark_version,
    spark_provider,
)
from catalog.pipeline.spark.types import spark_type
from catalog.pipeline.transforms import EvolveTo, Transform, apply_transforms
from catalog.pipeline.updates import estimated_bytes, read_updates
from catalog.schema.restore import restore_table

__all__ = [
    "AUTO_CLUSTER_BYTES",
    "AUTO_MEMORY_FRACTION",
    "ENGINES",
    "SPARK_MASTER_ENV",
    "ArrowEngine",
    "Engine",
    "EvolveTo",
    "SparkConfig",
    "SparkEngine",
    "SparkSessionProvider",
    "StageProgress",
    "Transform",
    "apply_transforms",
    "collection_shard",
    "consolidate_frame",
    "copy_transformed",
    "engine_for",
    "estimated_bytes",
    "java_version",
    "migrate_expression",
    "parse_spark_conf",
    "pyspark_version",
    "read_updates",
    "resolve_master",
    "restore_table",
    "spark_path",
    "spark_provider",
    "spark_type",
]
