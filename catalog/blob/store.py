"""Blob storage for shard batches and rollups, over ``pyarrow.fs``.

A :class:`BlobStore` is rooted at a URI: a plain path is a local directory (created if missing),
anything else goes to :func:`pyarrow.fs.FileSystem.from_uri` (``s3://``, ``gs://``, ``hdfs://``,
``file://``). Keys are ``/``-separated paths below the root, e.g.
``shards/<shard_id>/<uuid>.parquet``.

Writes are atomic, so a reader never sees half a blob:

* on file systems with a rename (local, HDFS) the data is written to a temporary name in the same
  directory (``.<name>.tmp-<uuid>``) and renamed into place;
* object stores (S3, GCS, ...) publish an object only when its upload completes, so the data is
  written to the final key directly.

A blob that is missing, truncated or not valid Parquet is reported on read as
:class:`~catalog.errors.CorruptBlobError` naming the key. Parquet files are written with page
checksums, which are verified on read, so flipped bytes are caught too. A store that does not
answer, refuses the credentials or lacks the bucket is never reported so: every failure goes
through :mod:`catalog.blob.faults` (unreachable, denied, bucket missing, missing).

An ``s3://BUCKET/PREFIX`` store is opened by :mod:`catalog.blob.s3` (its endpoint from
``--blob-endpoint``/``CATALOG_UPGRADE_BLOB_ENDPOINT`` or the URI's query, credentials from the
AWS chain only, a client that fails in seconds when the store does not answer).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from catalog.blob.cache import BatchCache
from catalog.blob.faults import blob_error, is_transport
from catalog.blob.s3 import open_s3
from catalog.blob.uri import check_uri
from catalog.errors import (
    BadInputError,
    BlobBucketMissingError,
    BlobMissingError,
    CorruptBlobError,
)

__all__ = ["ENDPOINT_ENV", "TEMP_MARKER", "BlobInfo", "BlobStore"]

#: The environment variable ``--blob-endpoint`` sets (every process of a host reads it).
ENDPOINT_ENV = "CATALOG_UPGRADE_BLOB_ENDPOINT"

log = structlog.get_logger(__name__)

# Temporary files of in-flight local writes carry this marker; ``list`` hides them.
TEMP_MARKER = ".tmp-"
# File systems whose writes become visible before they complete: write, then rename.
_RENAMING_FILE_SYSTEMS = frozenset({"local", "hdfs", "mock"})


@attrs.frozen
class BlobInfo:
    """One stored blob: its key, size in bytes and modification time (seconds since epoch)."""

    key: str
    size: int
    mtime: float


def _clean_key(key: str) -> str:
    parts = key.strip("/").split("/")
    if not key.strip("/") or any(p in {"", ".", ".."} for p in parts):
        raise BadInputError(f"invalid blob key {key!r}", key=key)
    return "/".join(parts)


@functools.lru_cache(maxsize=256)
def _read_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a read of a Parquet file written from ``schema`` gives (a list's item is
    named ``element`` there, for one): an empty file written and read in memory."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue()))


def as_read(table: pa.Table) -> pa.Table:
    """``table`` as a read of the Parquet file written from it gives it back: in the types of
    the file, and in one chunk (a group commit's or a merge's table is a chunk per part, and
    every later step over many small chunks costs a step per chunk)."""
    schema = _read_schema(table.schema)
    if not table.schema.equals(schema, check_metadata=True):
        table = table.cast(schema)
    return table.combine_chunks() if any(c.num_chunks > 1 for c in table.columns) else table


@attrs.define
class BlobStore:
    """Batches (Parquet) and small immutable blobs (bytes) below one root of a file system."""

    filesystem: pafs.FileSystem
    root: str
    uri: str
    #: The object store's endpoint, when one was named (for messages; no credentials).
    endpoint: str | None = None
    #: ``uri`` with this process's endpoint written in (``located_uri``).
    location: str | None = None
    #: Batches read before, kept decoded (a serving sidecar's store has one): see
    #: :mod:`catalog.blob.cache`.
    cache: BatchCache | None = None

    @classmethod
    def from_uri(cls, uri: str, *, endpoint: str | None = None) -> BlobStore:
        """A store at ``uri``: a local directory path (created if missing) or a pyarrow URI;
        ``endpoint`` (default: ``$CATALOG_UPGRADE_BLOB_ENDPOINT``) for an ``s3://`` one."""
        if not uri:
            raise BadInputError("empty blob URI", uri=uri)
        if "://" not in uri:
            path = Path(uri).expanduser().resolve()
            path.mkdir(parents=True, exist_ok=True)
            return cls(filesystem=pafs.LocalFileSystem(), root=str(path), uri=str(path))
        check_uri(uri)
        parts = urllib.parse.urlsplit(uri)
        if parts.scheme == "s3":
            opened = open_s3(uri, parts, endpoint or os.environ.get(ENDPOINT_ENV) or None)
            return cls(opened.filesystem, opened.root, uri, opened.endpoint, opened.location)
        try:
            filesystem, root = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise BadInputError(f"blob URI {uri!r} is not usable: {exc}", uri=uri) from exc
        root = root.rstrip("/")
        if filesystem.type_name == "local":
            Path(root).mkdir(parents=True, exist_ok=True)
        return cls(filesystem=filesystem, root=root, uri=uri)

    @property
    def located_uri(self) -> str:
        """``uri`` naming the endpoint this process reaches the store at: what a process that
        does not share this one's environment (a Spark executor) opens. No credentials: those
        come from that process's own AWS chain."""
        return self.location or self.uri

    def _fault(self, exc: BaseException, message: str, **details: Any) -> Exception:
        """A file system's failure as the project's error, naming this store."""
        where = {"uri": self.uri, **({"endpoint": self.endpoint} if self.endpoint else {})}
        return blob_error(exc, message, **details, **where)

    def probe(self) -> None:
        """Ask the store whether it serves this root: BlobUnreachableError (an outage),
        BlobDeniedError or BlobBucketMissingError (configuration, exit 2); nothing when fine.
        One or two cheap requests (a HEAD of the bucket)."""
        if self.filesystem.type_name != "s3":
            self._info(self.root, "reaching the blob root")
            return
        bucket = self.root.split("/", 1)[0]
        if self._info(bucket, f"reaching bucket {bucket}").type == pafs.FileType.NotFound:
            raise BlobBucketMissingError(
                f"bucket {bucket} does not exist"
                + (f" at endpoint {self.endpoint}" if self.endpoint else ""),
                bucket=bucket,
                uri=self.uri,
                endpoint=self.endpoint,
                suggestion="create the bucket first: catalog-upgrade never creates one",
            )

    def _info(self, path: str, doing: str) -> pafs.FileInfo:
        try:
            return self.filesystem.get_file_info(path)
        except OSError as exc:
            raise self._fault(exc, doing, path=path) from exc

    # -- paths ------------------------------------------------------------------------------

    def path(self, key: str) -> str:
        """The file system path of ``key`` (what ``self.filesystem`` and Spark open)."""
        return f"{self.root}/{_clean_key(key)}"

    def _key_of(self, path: str) -> str:
        return path[len(self.root) :].strip("/")

    @property
    def _renames(self) -> bool:
        return self.filesystem.type_name in _RENAMING_FILE_SYSTEMS

    # -- writes -----------------------------------------------------------------------------

    def _publish(self, key: str, write: Callable[[str], None]) -> None:
        """Run ``write(path)`` so that ``key`` appears complete or not at all."""
        final = self.path(key)
        directory, _, name = final.rpartition("/")
        try:
            # An object store has no directories to make: pyarrow would write a marker object
            # for each level of the key, a request each.
            if not self._renames:
                write(final)
                return
            self.filesystem.create_dir(directory, recursive=True)
            temp = f"{directory}/.{name}{TEMP_MARKER}{uuid.uuid4().hex}"
            try:
                write(temp)
                self.filesystem.move(temp, final)
            except BaseException:
                with contextlib.suppress(OSError):
                    self.filesystem.delete_file(temp)
                raise
        except OSError as exc:
            raise self._fault(exc, f"writing blob {key} failed", key=key) from exc

    def put_batch(self, key: str, table: pa.Table | pa.RecordBatch) -> None:
        """Write ``table`` as one Parquet file at ``key`` atomically (and keep it in the
        :attr:`cache`, as written: the blob never changes)."""
        data = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])

        def write(path: str) -> None:
            with self.filesystem.open_output_stream(path) as sink:
                pq.write_table(data, sink, write_page_checksum=True, compression="snappy")

        self._publish(key, write)
        if self.cache is not None:
            self.cache.wrote(key, as_read(data))

    def put_tables(self, key: str, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
        """Write ``tables`` (of ``schema``) as one Parquet file at ``key`` atomically, a row
        group or more per table as they come (never all in memory)."""

        def write(path: str) -> None:
            with (
                self.filesystem.open_output_stream(path) as sink,
                pq.ParquetWriter(
                    sink, schema, write_page_checksum=True, compression="snappy"
                ) as writer,
            ):
                for table in tables:
                    writer.write_table(table)

        self._publish(key, write)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write a small immutable blob (a rollup of batch entries) at ``key`` atomically."""

        def write(path: str) -> None:
            with self.filesystem.open_output_stream(path) as sink:
                sink.write(data)

        self._publish(key, write)

    # -- reads ------------------------------------------------------------------------------

    def get_batch(
        self, key: str, *, columns: Sequence[str] | None = None, expected_rows: int | None = None
    ) -> pa.Table:
        """The Parquet file at ``key``; :class:`CorruptBlobError` when missing, partial or corrupt.

        ``expected_rows`` (the row count the shard state recorded) also catches a file that is
        valid Parquet but not the one that was written.
        """
        path = self.path(key)
        try:
            table = pq.read_table(
                path,
                columns=list(columns) if columns is not None else None,
                filesystem=self.filesystem,
                page_checksum_verification=True,
                pre_buffer=True,
            )
        except FileNotFoundError as exc:
            raise BlobMissingError(f"blob {key} is missing", key=key, uri=self.uri) from exc
        except (pa.ArrowException, OSError, ValueError) as exc:
            if is_transport(exc):  # says nothing of the data: never reported as corrupt
                raise self._fault(exc, f"reading blob {key} failed", key=key) from exc
            if not self.exists(key):
                raise BlobMissingError(f"blob {key} is missing", key=key, uri=self.uri) from exc
            raise CorruptBlobError(
                f"blob {key} is partial or not valid Parquet: {exc}",
                key=key,
                uri=self.uri,
                reason="corrupt",
            ) from exc
        if expected_rows is not None and table.num_rows != expected_rows:
            raise CorruptBlobError(
                f"blob {key} holds {table.num_rows} rows, the shard state recorded {expected_rows}",
                key=key,
                uri=self.uri,
                reason="row-count",
                rows=table.num_rows,
                expected_rows=expected_rows,
            )
        return table

    def get_batches(
        self,
        keys: Sequence[str],
        *,
        columns: Sequence[str] | None = None,
        expected_rows: Sequence[int] | None = None,
    ) -> pa.Table:
        """Many Parquet files of one schema as one table, read in parallel in one call; only
        ``columns`` when given.

        When the combined read fails or its row count differs from ``sum(expected_rows)``, the
        files are read one by one to name the culprit in a :class:`CorruptBlobError`. With a
        :attr:`cache` and ``expected_rows``, the batches it holds come from memory and only the
        others are read (and kept).
        """
        if expected_rows is not None and len(expected_rows) != len(keys):
            raise ValueError("expected_rows must have one count per key")
        if not keys:
            raise ValueError("get_batches needs at least one key")
        if self.cache is None or expected_rows is None:
            return self._read_batches(keys, columns, expected_rows)
        cache = self.cache
        tables = [cache.get(key, columns) for key in keys]
        missing = [  # a kept table of another row count than the state's: read the file
            index
            for index, table in enumerate(tables)
            if table is None or table.num_rows != expected_rows[index]
        ]
        if missing:
            read = self._read_batches(
                [keys[i] for i in missing], columns, [expected_rows[i] for i in missing]
            )
            offset = 0
            for index in missing:  # its row count checked: the files' rows in their order
                part = read.slice(offset, expected_rows[index])
                offset += expected_rows[index]
                cache.put(keys[index], columns, part)
                tables[index] = part
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _read_batches(
        self,
        keys: Sequence[str],
        columns: Sequence[str] | None,
        expected_rows: Sequence[int] | None,
    ) -> pa.Table:
        """:meth:`get_batches` from the files, in one call."""
        if len(keys) == 1:
            return self.get_batch(
                keys[0],
                columns=columns,
                expected_rows=None if expected_rows is None else expected_rows[0],
            )
        try:
            table = pq.read_table(
                [self.path(k) for k in keys],
                columns=list(columns) if columns is not None else None,
                filesystem=self.filesystem,
                page_checksum_verification=True,
                pre_buffer=True,
            )
        except (pa.ArrowException, OSError, ValueError) as exc:
            if is_transport(exc):  # says nothing of the data: never reported as corrupt
                raise self._fault(exc, f"reading {len(keys)} blobs failed", key=keys[0]) from exc
            table = None
        if table is not None and (expected_rows is None or table.num_rows == sum(expected_rows)):
            return table
        for index, key in enumerate(keys):
            self.get_batch(
                key, expected_rows=None if expected_rows is None else expected_rows[index]
            )
        raise CorruptBlobError(
            f"blobs {keys[0]} ... ({len(keys)} files) could not be read together",
            key=keys[0],
            uri=self.uri,
            reason="corrupt",
        )

    def get_bytes(self, key: str) -> bytes:
        """The blob at ``key``; :class:`CorruptBlobError` when it is missing."""
        try:
            with self.filesystem.open_input_stream(self.path(key)) as source:
                return bytes(source.read())
        except FileNotFoundError as exc:
            raise BlobMissingError(f"blob {key} is missing", key=key, uri=self.uri) from exc
        except OSError as exc:
            raise self._fault(exc, f"reading blob {key} failed", key=key) from exc

    def exists(self, key: str) -> bool:
        info = self._info(self.path(key), f"looking up blob {key}")
        return bool(info.type == pafs.FileType.File)

    def list_info(self, prefix: str) -> list[BlobInfo]:
        """Every complete blob below the directory ``prefix``, sorted by key.

        Temporary files of in-flight writes are left out; see :meth:`list_temp`.
        """
        return [info for info in self._walk(prefix) if TEMP_MARKER not in info.key]

    def list(self, prefix: str) -> list[str]:
        """Keys of every complete blob below the directory ``prefix``, sorted."""
        return [info.key for info in self.list_info(prefix)]

    def list_temp(self, prefix: str) -> builtins.list[BlobInfo]:
        """Temporary files below ``prefix``: in-flight writes, or leftovers of crashed ones."""
        return [info for info in self._walk(prefix) if TEMP_MARKER in info.key]

    def _walk(self, prefix: str) -> builtins.list[BlobInfo]:
        base = self.path(prefix) if prefix.strip("/") else self.root
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as exc:
            raise self._fault(exc, f"listing {prefix} failed", prefix=prefix) from exc
        out = [
            BlobInfo(
                key=self._key_of(info.path),
                size=int(info.size or 0),
                mtime=info.mtime.timestamp() if info.mtime is not None else 0.0,
            )
            for info in infos
            if info.type == pafs.FileType.File
        ]
        return sorted(out, key=lambda info: info.key)

    # -- deletes ----------------------------------------------------------------------------

    def delete(self, key: str) -> None:
        """Remove ``key``; removing a missing blob is not an error (deletes are retried)."""
        try:
            self.filesystem.delete_file(self.path(key))
        except FileNotFoundError:
            return
        except OSError as exc:
            if not is_transport(exc) and not self.exists(key):
                return
            raise self._fault(exc, f"deleting blob {key} failed", key=key) from exc

    def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything below the directory ``prefix`` (a finalized shard's blobs)."""
        base = self.path(prefix)
        try:
            self.filesystem.delete_dir(base)
        except FileNotFoundError:
            return
        except OSError as exc:
            gone = not is_transport(exc) and (
                self._info(base, f"looking up {prefix}").type == pafs.FileType.NotFound
            )
            if gone:
                return
            raise self._fault(exc, f"deleting {prefix} failed", prefix=prefix) from exc
