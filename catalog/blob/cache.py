"""Decoded batches kept in memory, so a read opens only the batches it has not read before.

A batch blob is written once under a key no other write takes, and never changed (a merge
writes new blobs and retires the old ones), so its decoded table is good for as long as any
state lists it. A serving sidecar reads its collections again and again while appends add a
few small batches between reads: without a cache each read opens every batch the state lists,
about ``MERGE_AFTER_BATCHES`` of them under one-row appends, and under load each file read
costs thread switches as well as I/O. With it, a read opens the batches new since the last
read, in one call, and takes the rest from memory (Materialize persist keeps a blob cache in
memory for the same reason).

The cache holds tables by blob key and the columns read, least recently used first out, within
``BATCH_CACHE_BYTES`` of Arrow buffers. A batch larger than a quarter of that is never kept (a
large table read once would empty the cache for nothing). A blob deleted (GC, finalization) is
simply never asked for again and ages out. What it caches was read with its page checksums
verified and its row count checked against the state, as any read; or it was written by this
process (:meth:`BatchCache.wrote`), kept whole as a read of its file gives it back, so a read
takes its columns from memory and the process never opens a file it wrote itself (its own
appends and merges).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import attrs
import pyarrow as pa

__all__ = ["BATCH_CACHE_BYTES", "BatchCache"]

#: The Arrow bytes of decoded batches a process keeps in memory (``BatchCache``).
BATCH_CACHE_BYTES: Final = 64 * 1024 * 1024

_Key = tuple[str, tuple[str, ...] | None]


def _key(blob_key: str, columns: Sequence[str] | None) -> _Key:
    return blob_key, None if columns is None else tuple(columns)


@attrs.define
class BatchCache:
    """Decoded batch tables by blob key and columns, least recently used out first."""

    budget: int = BATCH_CACHE_BYTES
    #: Each table with its size, measured once (an eviction does not measure again).
    _tables: OrderedDict[_Key, tuple[pa.Table, int]] = attrs.field(
        factory=OrderedDict, init=False
    )
    _held: int = attrs.field(default=0, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    #: Lookups answered from memory and not, since the process started.
    hits: int = attrs.field(default=0, init=False)
    misses: int = attrs.field(default=0, init=False)

    @property
    def held_bytes(self) -> int:
        return self._held

    def get(self, key: str, columns: Sequence[str] | None) -> pa.Table | None:
        """The table of blob ``key`` read with ``columns``, when kept."""
        found_key = _key(key, columns)
        with self._lock:
            for kept_key in (found_key, _key(key, None)):  # read so, or kept whole
                found = self._tables.get(kept_key)
                if found is None:
                    continue
                table = found[0]
                if kept_key != found_key and columns is not None:
                    if not set(columns) <= set(table.column_names):
                        continue
                    table = table.select(list(columns))
                self._tables.move_to_end(kept_key)
                self.hits += 1
                return table
            self.misses += 1
            return None

    def put(self, key: str, columns: Sequence[str] | None, table: pa.Table) -> None:
        """Keep ``table``, the whole of blob ``key`` read with ``columns``."""
        size = table.nbytes
        if size > self.budget // 4:
            return
        kept_key = _key(key, columns)
        with self._lock:
            previous = self._tables.pop(kept_key, None)
            if previous is not None:
                self._held -= previous[1]
            self._tables[kept_key] = (table, size)
            self._held += size
            while self._held > self.budget:
                _, (_, oldest) = self._tables.popitem(last=False)
                self._held -= oldest

    def wrote(self, key: str, table: pa.Table) -> None:
        """Keep ``table``, all of blob ``key`` as this process wrote it: a read of any of its
        columns is answered from it."""
        self.put(key, None, table)
