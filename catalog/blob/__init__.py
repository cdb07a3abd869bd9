"""Blob storage for shard batches and rollups: a directory, or an object store.

:mod:`~catalog.blob.store` (``BlobStore``) over ``pyarrow.fs``; :mod:`~catalog.blob.faults`
sorts a store's failures into the project's errors; :mod:`~catalog.blob.uri` says what a blob
URI may carry; :mod:`~catalog.blob.s3` opens an ``s3://`` store with bounded timeouts;
:mod:`~catalog.blob.cache` keeps decoded batches in memory for the next read.
"""

from catalog.blob.store import ENDPOINT_ENV, TEMP_MARKER, BlobInfo, BlobStore

__all__ = ["ENDPOINT_ENV", "TEMP_MARKER", "BlobInfo", "BlobStore"]
