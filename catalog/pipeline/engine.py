"""The engine interface and the entry points that pick an engine for a shard."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from catalog.blob import BlobStore
from catalog.blob.uri import agreed_uri
from catalog.consensus import Consensus, Fence
from catalog.environment import read_catalog
from catalog.errors import (
    BadInputError,
)
from catalog.pipeline.arrow import ArrowEngine
from catalog.pipeline.output import SnapshotWritten
from catalog.pipeline.pacing import Pacer
from catalog.pipeline.spark.config import SparkConfig, is_local_master
from catalog.pipeline.spark.engine import SparkEngine
from catalog.pipeline.spark.session import SparkSessionProvider, spark_provider
from catalog.pipeline.spark.types import spark_type
from catalog.pipeline.transforms import Transform
from catalog.pipeline.updates import estimated_bytes
from catalog.shard import (
    CompactionResult,
    Shard,
    ShardState,
)

ENGINES = ("arrow", "spark", "auto")


#: ``auto`` runs a job on a configured cluster master when the shard's data is estimated
#: above this many bytes (below it, starting Spark costs more than the job).
AUTO_CLUSTER_BYTES = 256 << 20


#: ``auto`` runs a job on Spark (even a local one) when the shard's data is estimated above
#: this fraction of the memory available: arrow would hold it all in this process.
AUTO_MEMORY_FRACTION = 0.25


class Engine(Protocol):
    """What both engines do; results are identical whichever runs them."""

    @property
    def name(self) -> str:
        """``arrow`` or ``spark``."""
        ...

    def snapshot(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
    ) -> pa.Table:
        """The shard as of ``as_of`` in ``reader_schema``, consolidated (``Shard.snapshot``);
        at most ``limit`` rows."""
        ...

    def snapshot_chunks(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
        chunk_rows: int = ...,
    ) -> Iterator[pa.Table]:
        """The same rows as :meth:`snapshot`, in chunks of about ``chunk_rows`` rows; on Spark
        they reach this process a partition at a time, never all at once."""
        ...

    def write_snapshot(
        self,
        shard: Shard,
        output: str,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
    ) -> SnapshotWritten:
        """The snapshot as Parquet parts in the new directory ``output`` (pipeline.output)."""
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
        pacer: Pacer | None = None,
    ) -> int:
        """See :func:`copy_transformed`."""
        ...


def engine_for(
    engine: str,
    shard: Shard | None = None,
    *,
    spark: SparkSessionProvider | None = None,
    config: SparkConfig | None = None,
) -> Engine:
    """The engine named ``engine`` (``arrow``, ``spark`` or ``auto``) for a job on ``shard``.

    ``auto`` picks Spark when the shard's estimated bytes exceed :data:`AUTO_CLUSTER_BYTES`
    and a cluster master is configured, or exceed :data:`AUTO_MEMORY_FRACTION` of the memory
    available here; arrow otherwise. Spark runs on ``spark``, else on the process's provider
    for ``config`` (master and ``--spark-conf``). Before any work, a local-path blob store
    with a cluster master is refused unless ``config.blob_shared`` (ConfigurationError), and
    so is a shard whose types Spark cannot hold (ShardError ``spark-unsupported-type``).
    """
    if engine not in ENGINES:
        raise BadInputError(
            f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}", engine=engine
        )
    config = config if config is not None else SparkConfig()
    provider = spark if spark is not None else spark_provider(config.master, dict(config.conf))
    state = shard.state() if shard is not None else None
    if engine == "auto":
        engine = "spark" if _large(state, provider.master) else "arrow"
    if engine == "arrow":
        return ArrowEngine()
    if shard is not None and state is not None:
        local = shard.blob.filesystem.type_name == "local"
        config.check_blob(shard.blob.uri, local, provider.master)
        for field in state.live_schema:
            spark_type(field.type, field.name)  # refuses what Spark cannot hold, by path
    return SparkEngine(provider)


def _large(state: ShardState | None, master: str) -> bool:
    if state is None:
        return False
    size = estimated_bytes(state)
    if not is_local_master(master) and size > AUTO_CLUSTER_BYTES:
        return True
    return size > AUTO_MEMORY_FRACTION * available_memory()


def available_memory() -> int:
    """Bytes of memory available to a new job here (``MemAvailable``, else physical)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError):
        return 4 << 30


def copy_transformed(
    source: Shard,
    target: Shard,
    transforms: Sequence[Callable[[pa.RecordBatch], pa.RecordBatch]],
    new_schema: pa.Schema,
    *,
    fence: Fence | None,
    engine: str = "auto",
    spark: SparkConfig | None = None,
    pacer: Pacer | None = None,
) -> int:
    """Copy the source updates the target has not seen yet, transformed; return the row count.

    Reads the source's updates with ``_ts`` in ``[target.upper, source.upper)`` (each batch
    migrated from its schema id to the source's latest live schema), runs ``transforms`` in order
    on their columns (``_ts``/``_diff`` carried alongside untouched), checks the result against
    ``new_schema`` (ShardError naming the transform otherwise) and compare-and-appends it to
    ``target`` moving its upper to the source's, fenced by ``fence``. Idempotent: when the target's
    upper already equals the source's it returns 0. Transforms must be deterministic and map each
    row to one row. ``engine`` is ``arrow``, ``spark`` or ``auto`` (by the source's size).
    ``pacer``: the copy is a long step (:mod:`catalog.pipeline.pacing`): its progress reported,
    its rate held, held while paused.
    """
    chosen = engine_for(engine, source, config=spark)
    return chosen.copy_transformed(source, target, transforms, new_schema, fence=fence, pacer=pacer)


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
    uri = agreed_uri(blob_uri, catalog.blob_uri)
    return Shard(consensus, BlobStore.from_uri(uri), ref.shard_id)
