"""A shard's write ledger: the identities of its recent appends, kept in its durable state.

An append whose answer was lost (ConnectionLoss after the commit was sent) may have landed. The
writer resolves it by the write's own identity, never by comparing frontiers: each
compare-and-append records a :class:`WriteMark` (its id, the times it moved the upper between, its
rows) in the same transaction as the state change. Compaction and roll-ups rewrite batches and
batch lists but never the ledger, so the mark survives whatever moved the batch; a copy into a
replacement shard carries the source's marks (the copy keeps the source's times).

The ledger keeps the last :data:`WRITE_MEMORY` marks (up to twice that between two evictions).
The marks of keyed appends it evicts move into the key log's segments
(:mod:`catalog.shard.keylog`), which ``segments`` names, until their retention ends.
``horizon`` is the promise that makes an absence meaningful: every append that moved the upper
past ``horizon`` is recorded, in the ledger or a segment. So an append from ``expected_upper``
whose id is missing did not land when ``horizon <= expected_upper``; otherwise its outcome is
unknown (:meth:`WriteLedger.covers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from catalog.shard.keylog import KeyLog, KeySegment
from catalog.shard.marks import WriteMark
from catalog.shard.writeid import is_keyed, key_prefix

__all__ = ["WRITE_MEMORY", "Carry", "WriteLedger", "WriteMark", "record"]

# Marks kept per shard: about 60 bytes each in the state (~3.8 KB at the limit).
WRITE_MEMORY = 64


@attrs.frozen
class WriteLedger:
    """The last marks, oldest first, the key log's segments, and the horizon above which no
    append goes unrecorded."""

    marks: tuple[WriteMark, ...] = ()
    horizon: int = 0
    segments: tuple[KeySegment, ...] = ()
    # The newest mark of each id and of each keyed id's key prefix (``k`` + 16 hex digits),
    # built at the first look-up: a group commit looks every member up in one ledger.
    _index: tuple[dict[str, WriteMark], dict[str, WriteMark]] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )

    def find(self, write_id: str) -> WriteMark | None:
        """The mark of ``write_id``, if the ledger still holds it."""
        return self._indexed()[0].get(write_id)

    def find_key(self, key_prefix: str) -> WriteMark | None:
        """The newest mark of a keyed append whose id starts with ``key_prefix`` (``k`` + 16
        hex digits), if the ledger still holds one."""
        return self._indexed()[1].get(key_prefix)

    def _indexed(self) -> tuple[dict[str, WriteMark], dict[str, WriteMark]]:
        if self._index is None:  # oldest first: the newest of equal ids wins
            ids = {m.id: m for m in self.marks}
            keys = {key_prefix(m.id): m for m in self.marks if is_keyed(m.id)}
            object.__setattr__(self, "_index", (ids, keys))
        assert self._index is not None
        return self._index

    def covers(self, expected_upper: int) -> bool:
        """Whether an append from ``expected_upper`` would be recorded here had it landed."""
        return self.horizon <= expected_upper

    def _merged(self, marks: Iterable[WriteMark]) -> list[WriteMark]:
        known = {m.id for m in self.marks}
        merged = [*self.marks]
        for mark in marks:
            if mark.id not in known:
                known.add(mark.id)
                merged.append(mark)
        merged.sort(key=lambda m: (m.upper, m.lower))
        return merged

    def recorded(self, marks: Iterable[WriteMark], limit: int = WRITE_MEMORY) -> WriteLedger:
        """This ledger with ``marks`` added (known ids skipped), trimmed to the last ``limit``
        (what is trimmed raises the horizon, keyed or not: for writers without a key log)."""
        merged = self._merged(marks)
        evicted, kept = merged[: max(0, len(merged) - limit)], merged[-limit:] if limit else []
        horizon = max([self.horizon, *(m.upper for m in evicted)])
        return attrs.evolve(self, marks=tuple(kept), horizon=horizon)

    def evicting(
        self, marks: Iterable[WriteMark], limit: int = WRITE_MEMORY
    ) -> tuple[WriteLedger, tuple[WriteMark, ...]]:
        """This ledger with ``marks`` added; past ``2 * limit`` marks, the oldest evicted down
        to ``limit``. Evicted keyed marks are returned, for the key log to hold (the horizon
        stays below them); the others raise the horizon."""
        merged = self._merged(marks)
        if len(merged) <= 2 * limit:
            return attrs.evolve(self, marks=tuple(merged)), ()
        evicted, kept = merged[: len(merged) - limit], merged[len(merged) - limit :]
        keyed = tuple(m for m in evicted if is_keyed(m.id))
        horizon = max([self.horizon, *(m.upper for m in evicted if not is_keyed(m.id))])
        return attrs.evolve(self, marks=tuple(kept), horizon=horizon), keyed

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"marks": [m.to_json() for m in self.marks], "horizon": self.horizon}
        if self.segments:  # absent otherwise: states read as before the key log
            data["segments"] = [s.to_json() for s in self.segments]
        return data

    @classmethod
    def from_json(cls, data: Any, upper: int) -> WriteLedger:
        """The ledger in a state's JSON; a state written before ledgers knows nothing below
        its ``upper``."""
        if data is None:
            return cls((), upper)
        return cls(
            tuple(WriteMark.from_json(m) for m in data["marks"]),
            int(data["horizon"]),
            tuple(KeySegment.from_json(s) for s in data.get("segments", ())),
        )


@attrs.frozen
class Carry:
    """What a copy into a replacement shard carries over: the source's ledger, and its key log
    when the ledger names segments."""

    ledger: WriteLedger
    keys: KeyLog | None = None


def record(
    writes: WriteLedger,
    new: Sequence[WriteMark],
    carry: Carry | None,
    keys: KeyLog,
    memory: int,
) -> tuple[WriteLedger, list[KeySegment]]:
    """``writes`` with the ``new`` marks recorded (and a copy source's ledger carried), keeping
    ``memory`` marks: keyed marks the ledger evicts go into the key log's segments (``keys``);
    the segments this wrote."""
    before = {s.name for s in writes.segments}
    marks = [*new]
    if carry is not None:
        marks = [*carry.ledger.marks, *new]
        segments = writes.segments
        if carry.keys is not None and carry.ledger.segments:
            segments += keys.carried(carry.keys, carry.ledger.segments)
        horizon = max(writes.horizon, carry.ledger.horizon)
        writes = attrs.evolve(writes, segments=segments, horizon=horizon)
    writes, evicted = writes.evicting(marks, memory)
    if evicted or writes.segments:
        segments, expired = keys.fold(writes.segments, evicted)
        writes = attrs.evolve(writes, segments=segments, horizon=max(writes.horizon, expired))
    return writes, [s for s in writes.segments if s.name not in before]
