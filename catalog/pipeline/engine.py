"""The engine interface and the entry points that pick an engine for a shard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import pyarrow as pa

from catalog.blob import BlobStore, agreed_uri
from catalog.consensus import Consensus, Fence
from catalog.environment import read_catalog
from catalog.errors import (
    BadInputError,
)
from catalog.pipeline.arrow import ArrowEngine
from catalog.pipeline.spark.engine import SparkEngine
from catalog.pipeline.spark.session import SparkSessionProvider, spark_provider
from catalog.pipeline.transforms import Transform
from catalog.shard import (
    CompactionResult,
    Shard,
)

ENGINES = ("arrow", "spark", "auto")


#: ``auto`` runs a job on Spark when the shard holds more rows than this.
AUTO_SPARK_ROWS = 20_000_000


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
