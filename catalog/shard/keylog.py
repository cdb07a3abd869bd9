"""The key log: the identities of keyed appends kept past the write ledger, for a retention.

A client that sends an ``Idempotency-Key`` may retry a day later, after millions of other
appends. The ledger (:mod:`catalog.shard.ledger`) keeps only the last appends in the shard's
state; when it evicts a keyed append's mark, the mark moves into a **segment**: an immutable
blob below the shard's prefix holding marks sorted by key, which the state names in the same
compare-and-set that evicts them. So a mark is always in the ledger or in a named segment until
it expires, and a state write grows with the number of segments, never with the number of keys.

Segments merge like a log-structured tree: a flush makes a tier-0 segment (one per
``WRITE_MEMORY`` evictions); :data:`FANOUT` segments of one tier merge into one of the next.
A merge drops marks older than the retention and raises the ledger's horizon past them (they are
no longer recorded). About ``FANOUT`` segments per tier and log8(keys) tiers: under 60 names
in a state for millions of keys.

A write id is *keyed* when it is ``k`` + 16 hex digits (the key's hash) + 16 (the body's), the
format of :mod:`catalog.shard.writeid`; other ids (fresh uuids of unkeyed appends) leave with
their eviction, as before.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from catalog.shard.listing import blob_prefix
from catalog.shard.marks import WriteMark
from catalog.shard.writeid import body_digest, is_keyed, key_digest, keyed_id

if TYPE_CHECKING:
    from catalog.blob import BlobStore

__all__ = [
    "FANOUT",
    "KEY_RETENTION_SECONDS",
    "KeyLog",
    "KeySegment",
]

#: How long a keyed append stays recognised (``sidecar --idempotency-retention``).
KEY_RETENTION_SECONDS = 24 * 3600.0
#: Segments of one tier that merge into one of the next.
FANOUT = 8
#: A keyed append's write id: ``k`` and 32 hex digits (a look-up per mark, per ledger index).
_COLUMNS = ("key", "body", "lower", "upper", "rows", "at")
_SCHEMA = pa.schema(
    [
        pa.field("key", pa.uint64(), nullable=False),
        pa.field("body", pa.uint64(), nullable=False),
        pa.field("lower", pa.int64(), nullable=False),
        pa.field("upper", pa.int64(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("at", pa.float64(), nullable=False),
    ]
)
#: Marks held decoded in memory at most (48 bytes each), across segments and shards.
_CACHE_MARKS = 8_000_000


@attrs.frozen
class KeySegment:
    """One segment blob as the state names it: its name, tier, marks, the wall time of its
    newest mark and its highest upper (the horizon once it expires)."""

    name: str
    tier: int
    marks: int
    newest_at: float
    max_upper: int

    def key(self, shard_id: str) -> str:
        return f"{blob_prefix(shard_id)}/{self.name}"

    def to_json(self) -> list[Any]:
        return [self.name, self.tier, self.marks, self.newest_at, self.max_upper]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> KeySegment:
        name, tier, marks, newest_at, max_upper = data
        return cls(str(name), int(tier), int(marks), float(newest_at), int(max_upper))


#: Segments up to this many marks are looked up in a dict (a numpy search costs more).
_DICT_MARKS = 4096


@attrs.frozen
class _Marks:
    """A segment's marks, decoded: parallel arrays sorted by key."""

    key: np.ndarray
    body: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    rows: np.ndarray
    at: np.ndarray
    _index: dict[int, int] | None = attrs.field(default=None, init=False, eq=False)

    @classmethod
    def of(cls, marks: Iterable[WriteMark], at: float) -> _Marks:
        chosen = [m for m in marks if is_keyed(m.id)]
        arrays = cls(
            key=np.array([key_digest(m.id) for m in chosen], dtype=np.uint64),
            body=np.array([body_digest(m.id) for m in chosen], dtype=np.uint64),
            lower=np.array([m.lower for m in chosen], dtype=np.int64),
            upper=np.array([m.upper for m in chosen], dtype=np.int64),
            rows=np.array([m.rows for m in chosen], dtype=np.int64),
            at=np.full(len(chosen), at, dtype=np.float64),
        )
        return arrays.sorted()

    @classmethod
    def merged(cls, parts: Sequence[_Marks]) -> _Marks:
        return cls(*(np.concatenate([getattr(p, c) for p in parts]) for c in _COLUMNS)).sorted()

    def __len__(self) -> int:
        return len(self.key)

    def sorted(self) -> _Marks:
        order = np.lexsort((self.upper, self.key))  # by key, then by time
        return _Marks(*(getattr(self, c)[order] for c in _COLUMNS))

    def kept(self, cutoff: float) -> tuple[_Marks, int]:
        """The marks at or after ``cutoff``, and the highest upper of those dropped (0: none)."""
        keep = self.at >= cutoff
        dropped = self.upper[~keep]
        return _Marks(*(getattr(self, c)[keep] for c in _COLUMNS)), int(
            dropped.max() if len(dropped) else 0
        )

    def find(self, key: int) -> tuple[int, int, int, int] | None:
        """``(body, lower, upper, rows)`` of the newest mark with ``key``."""
        if len(self.key) <= _DICT_MARKS:
            index = self._index
            if index is None:  # the last of equal keys is the newest: it wins
                index = {int(k): i for i, k in enumerate(self.key.tolist())}
                object.__setattr__(self, "_index", index)
            found = index.get(key)
            if found is None:
                return None
            i = found
        else:
            end = int(np.searchsorted(self.key, np.uint64(key), side="right"))
            if end == 0 or int(self.key[end - 1]) != key:
                return None
            i = end - 1
        return int(self.body[i]), int(self.lower[i]), int(self.upper[i]), int(self.rows[i])

    def encode(self) -> bytes:
        table = pa.table({c: getattr(self, c) for c in _COLUMNS}, schema=_SCHEMA)
        sink = pa.BufferOutputStream()  # native: a Python file would take the GIL per write
        with ipc.new_file(sink, _SCHEMA) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def decode(cls, data: bytes) -> _Marks:
        table = ipc.open_file(pa.BufferReader(data)).read_all()
        if table.schema.names != list(_COLUMNS):
            raise ValueError(f"not a key segment: columns {table.schema.names}")
        return cls(*(table.column(c).to_numpy() for c in _COLUMNS))

    def segment(self, name: str, tier: int) -> KeySegment:
        return KeySegment(
            name=name,
            tier=tier,
            marks=len(self),
            newest_at=float(self.at.max()) if len(self) else 0.0,
            max_upper=int(self.upper.max()) if len(self) else 0,
        )


class _Cache:
    """Decoded segments by store and key, least recently used out past :data:`_CACHE_MARKS`;
    segments never change, so a cached one is never stale."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._lock = threading.Lock()
        self._segments: OrderedDict[tuple[str, str], _Marks] = OrderedDict()
        # One loader per segment: concurrent appends that miss it wait for one read.
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    def load(self, where: tuple[str, str], read: Callable[[], _Marks]) -> _Marks:
        """The segment at ``where``, read once however many threads ask at the same time."""
        found = self.get(where)
        if found is not None:
            return found
        with self._lock:
            loading = self._loading.setdefault(where, threading.Lock())
        with loading:
            found = self.get(where)
            if found is None:
                found = read()
                self.put(where, found)
        with self._lock:
            self._loading.pop(where, None)
        return found

    def get(self, where: tuple[str, str]) -> _Marks | None:
        with self._lock:
            found = self._segments.get(where)
            if found is not None:
                self._segments.move_to_end(where)
            return found

    def put(self, where: tuple[str, str], marks: _Marks) -> None:
        with self._lock:
            if where in self._segments:
                return
            self._segments[where] = marks
            self._held += len(marks)
            while self._held > self._limit and len(self._segments) > 1:
                _, old = self._segments.popitem(last=False)
                self._held -= len(old)


_CACHE = _Cache(_CACHE_MARKS)


@attrs.frozen
class KeyLog:
    """The key log of one shard: looks marks up in segments, folds evicted marks into them."""

    blob: BlobStore
    shard_id: str
    retention: float = KEY_RETENTION_SECONDS

    def _marks(self, segment: KeySegment) -> _Marks:
        where = (self.blob.uri, segment.key(self.shard_id))
        return _CACHE.load(where, lambda: _Marks.decode(self.blob.get_bytes(where[1])))

    def warm(self, segments: Sequence[KeySegment]) -> None:
        """Read ``segments`` into the process's cache ahead of the look-ups that need them
        (a new leader's first keyed appends would otherwise read them all, each)."""
        for segment in segments:
            self._marks(segment)

    def find(self, segments: Sequence[KeySegment], key_prefix: str) -> WriteMark | None:
        """The newest mark whose id starts with ``key_prefix`` (``k`` + 16 hex digits), if a
        segment holds one; newest segments first."""
        key = key_digest(key_prefix)
        for segment in reversed(segments):
            found = self._marks(segment).find(key)
            if found is not None:
                body, lower, upper, rows = found
                return WriteMark(keyed_id(key_prefix, body), lower, upper, rows)
        return None

    def fold(
        self, segments: Sequence[KeySegment], evicted: Sequence[WriteMark], now: float | None = None
    ) -> tuple[tuple[KeySegment, ...], int]:
        """``segments`` with the keyed marks of ``evicted`` added as a new segment (written
        now), full tiers merged and expired marks dropped; and the highest upper dropped by
        expiry (0: none), which the ledger's horizon must pass."""
        now = time.time() if now is None else now
        cutoff = now - self.retention
        result = [s for s in segments if s.newest_at >= cutoff]
        horizon = max((s.max_upper for s in segments if s.newest_at < cutoff), default=0)
        fresh = _Marks.of(evicted, now)
        if len(fresh):
            result.append(self._write(fresh, 0))
        tier = 0
        while sum(1 for s in result if s.tier == tier) >= FANOUT:
            full = [s for s in result if s.tier == tier]
            merged, dropped = _Marks.merged([self._marks(s) for s in full]).kept(cutoff)
            horizon = max(horizon, dropped)
            result = [s for s in result if s.tier != tier]
            if len(merged):
                result.append(self._write(merged, tier + 1))
            tier += 1
        result.sort(key=lambda s: (s.newest_at, -s.tier))
        return tuple(result), horizon

    def carried(self, source: KeyLog, segments: Sequence[KeySegment]) -> tuple[KeySegment, ...]:
        """A copy source's segments as one segment of this shard (a replacement shard's prefix
        is its own: the source's goes when it is finalized)."""
        if not segments:
            return ()
        merged, _ = _Marks.merged([source._marks(s) for s in segments]).kept(
            time.time() - self.retention
        )
        if not len(merged):
            return ()
        return (self._write(merged, max(s.tier for s in segments)),)

    def write_marks(self, marks: Iterable[WriteMark], at: float, tier: int = 0) -> KeySegment:
        """Write ``marks`` (their keyed ones) as one segment recorded at wall time ``at``: how
        the fold writes, and how a test fills a window with a million keys."""
        return self._write(_Marks.of(marks, at), tier)

    def _write(self, marks: _Marks, tier: int) -> KeySegment:
        segment = marks.segment(f"keys-{tier}-{uuid.uuid4().hex}.arrow", tier)
        key = segment.key(self.shard_id)
        self.blob.put_bytes(key, marks.encode())
        _CACHE.put((self.blob.uri, key), marks)
        return segment
