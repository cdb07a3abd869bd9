"""A shard's rollups: immutable blobs that list older batch entries, read once and cached."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import attrs

from catalog.blob import BlobStore
from catalog.consensus import decode_json, encode_json
from catalog.errors import CorruptBlobError
from catalog.shard.state import BatchRef, RollupRef


@attrs.define
class Rollups:
    """The rollup blobs of one shard: :meth:`entries` reads one (once: they never change),
    :meth:`write` writes a new one. Safe to share between threads (a lost cache race only
    reads a blob twice)."""

    blob: BlobStore
    shard_id: str
    _cache: dict[str, tuple[BatchRef, ...]] = attrs.field(factory=dict, init=False)

    def entries(self, rollup: RollupRef) -> tuple[BatchRef, ...]:
        """The batch entries ``rollup`` lists; CorruptBlobError when their count is not the
        one the state recorded."""
        cached = self._cache.get(rollup.name)
        if cached is None:
            key = rollup.key(self.shard_id)
            raw = decode_json(self.blob.get_bytes(key))
            cached = tuple(BatchRef.from_json(b) for b in raw["batches"])
            if len(cached) != rollup.batches:
                raise CorruptBlobError(
                    f"rollup {key} lists {len(cached)} batches, the state recorded "
                    f"{rollup.batches}",
                    key=key,
                    reason="row-count",
                )
            self._cache[rollup.name] = cached
        return cached

    def write(self, entries: Sequence[BatchRef]) -> RollupRef:
        """A new rollup blob listing ``entries`` (written before any state names it)."""
        rollup = RollupRef(
            name=uuid.uuid4().hex,
            batches=len(entries),
            rows=sum(b.rows for b in entries),
            lower=min(b.lower for b in entries),
            upper=max(b.upper for b in entries),
        )
        body = encode_json({"shard_id": self.shard_id, "batches": [b.to_json() for b in entries]})
        self.blob.put_bytes(rollup.key(self.shard_id), body)
        self._cache[rollup.name] = tuple(entries)
        return rollup
