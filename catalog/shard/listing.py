"""A shard state's batch references: batches, roll-ups, and the inline listing decoded lazily.

A state lists up to ``ROLLUP_THRESHOLD`` batches inline (~60 bytes each in JSON). Most readers of
a state need its schemas and frontiers, not its batches: the leader reads every shard state of
the environment several times per migration, and decoding 500 entries into objects per state is
most of that cost at the target scale. :class:`BatchListing` keeps the JSON entries and decodes
them on first use; re-encoding an untouched listing reuses them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import attrs

from catalog.consensus import encode_json

__all__ = ["BatchListing", "BatchRef", "RollupRef", "blob_prefix"]


def blob_prefix(shard_id: str) -> str:
    """The blob directory holding every batch and rollup of a shard."""
    return f"shards/{shard_id}"


@attrs.frozen
class BatchRef:
    """One batch: blob ``name`` (``shards/<id>/<name>.parquet``), schema id, rows, time bounds.

    Every row has ``lower <= _ts < upper``. ``ordered``: the rows are sorted by all their columns
    in the batch's own schema (compaction output whose columns are all sortable); whether the
    order survives a migration is :meth:`ShardState.is_ordered_in`. ``consolidated``: no two
    rows share ``(row, _ts)`` and no diff is zero (compaction output), so a snapshot of this
    batch alone at a single time needs no consolidation pass. ``spark_types``: written by
    Spark's own Parquet writer (a Spark compaction), so its columns hold Spark's types (``_ts``
    an int64, unsigned integers widened, timestamps in Spark's unit): readers restore them to
    the schema's (:mod:`catalog.schema.restore`). Its name may hold a directory
    (``c-<uuid>/part-...``): Spark names the files of one write.
    """

    name: str
    schema_id: int
    rows: int
    lower: int
    upper: int
    ordered: bool = False
    consolidated: bool = False
    spark_types: bool = False

    def key(self, shard_id: str) -> str:
        return f"{blob_prefix(shard_id)}/{self.name}.parquet"

    def to_json(self) -> list[Any]:
        flags = int(self.ordered) | (int(self.consolidated) << 1) | (int(self.spark_types) << 2)
        return [self.name, self.schema_id, self.rows, self.lower, self.upper, flags]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> BatchRef:
        name, schema_id, rows, lower, upper, flags = data
        return cls(
            name,
            int(schema_id),
            int(rows),
            int(lower),
            int(upper),
            ordered=bool(flags & 1),
            consolidated=bool(flags & 2),
            spark_types=bool(flags & 4),
        )


@attrs.frozen
class RollupRef:
    """An immutable blob ``shards/<id>/rollup-<name>.json`` holding older batch entries."""

    name: str
    batches: int
    rows: int
    lower: int
    upper: int

    def key(self, shard_id: str) -> str:
        return f"{blob_prefix(shard_id)}/rollup-{self.name}.json"

    def to_json(self) -> list[Any]:
        return [self.name, self.batches, self.rows, self.lower, self.upper]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> RollupRef:
        name, batches, rows, lower, upper = data
        return cls(name, int(batches), int(rows), int(lower), int(upper))


class BatchListing(Sequence[BatchRef]):
    """An immutable sequence of :class:`BatchRef` decoded from JSON entries on first use."""

    __slots__ = ("_raw", "_refs", "_text")

    def __init__(
        self,
        raw: Sequence[Sequence[Any]],
        refs: tuple[BatchRef, ...] | None = None,
        text: bytes | None = None,
    ) -> None:
        self._raw = raw
        self._refs = refs  # decoded on first use, unless the entries were known already
        self._text = text  # the entries as JSON, encoded on first use

    def _decoded(self) -> tuple[BatchRef, ...]:
        if self._refs is None:
            self._refs = tuple(BatchRef.from_json(b) for b in self._raw)
        return self._refs

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, index: int) -> BatchRef: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[BatchRef, ...]: ...

    def __getitem__(self, index: int | slice) -> BatchRef | tuple[BatchRef, ...]:
        return self._decoded()[index]

    def __iter__(self) -> Iterator[BatchRef]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BatchListing({len(self)} batches)"

    @staticmethod
    def extended(batches: Sequence[BatchRef], refs: Sequence[BatchRef]) -> BatchListing:
        """``batches`` followed by ``refs``, as a listing that keeps its JSON entries and
        text: an append encodes only its own entries, however many the listing holds (and a
        listing not decoded yet stays so)."""
        if isinstance(batches, BatchListing):
            raw, known, text = batches._raw, batches._refs, batches._text
        else:
            raw, known, text = [b.to_json() for b in batches], tuple(batches), None
        added = [r.to_json() for r in refs]
        if text is not None and added:
            more = encode_json(added)
            text = more if text == b"[]" else text[:-1] + b"," + more[1:]
        return BatchListing([*raw, *added], None if known is None else (*known, *refs), text)

    @staticmethod
    def json_of(batches: Sequence[BatchRef]) -> list[Any]:
        """The JSON entries of ``batches`` (a listing's own, not encoded again)."""
        if isinstance(batches, BatchListing):
            return list(batches._raw)
        return [b.to_json() for b in batches]

    @staticmethod
    def encoded(batches: Sequence[BatchRef]) -> bytes:
        """:meth:`json_of` as :func:`~catalog.consensus.encode_json` writes it (a listing's
        own, encoded once)."""
        if not isinstance(batches, BatchListing):
            return encode_json([b.to_json() for b in batches])
        if batches._text is None:
            batches._text = encode_json(list(batches._raw))
        return batches._text
