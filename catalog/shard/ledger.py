"""A shard's write ledger: the identities of its recent appends, kept in its durable state.

An append whose answer was lost (ConnectionLoss after the commit was sent) may have landed. The
writer resolves it by the write's own identity, never by comparing frontiers: each
compare-and-append records a :class:`WriteMark` (its id, the times it moved the upper between, its
rows) in the same transaction as the state change. Compaction and roll-ups rewrite batches and
batch lists but never the ledger, so the mark survives whatever moved the batch; a copy into a
replacement shard carries the source's marks (the copy keeps the source's times).

The ledger keeps the last :data:`WRITE_MEMORY` marks. ``horizon`` is the promise that makes an
absence meaningful: every append that moved the upper past ``horizon`` is recorded. So an
append from ``expected_upper`` whose id is missing did not land when ``horizon <=
expected_upper``; otherwise its outcome is unknown (:meth:`WriteLedger.covers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = ["WRITE_MEMORY", "WriteLedger", "WriteMark"]

# Marks kept per shard: about 60 bytes each in the state (~3.8 KB at the limit).
WRITE_MEMORY = 64


@attrs.frozen
class WriteMark:
    """One append: its identity, the upper it moved from (``lower``) and to, its rows."""

    id: str
    lower: int
    upper: int
    rows: int

    def to_json(self) -> list[Any]:
        return [self.id, self.lower, self.upper, self.rows]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> WriteMark:
        write_id, lower, upper, rows = data
        if not isinstance(write_id, str):
            raise TypeError(f"a write id is a string, not {write_id!r}")
        return cls(write_id, int(lower), int(upper), int(rows))


@attrs.frozen
class WriteLedger:
    """The last marks, oldest first, and the horizon above which no append goes unrecorded."""

    marks: tuple[WriteMark, ...] = ()
    horizon: int = 0

    def find(self, write_id: str) -> WriteMark | None:
        """The mark of ``write_id``, if the ledger still holds it."""
        return next((m for m in reversed(self.marks) if m.id == write_id), None)

    def covers(self, expected_upper: int) -> bool:
        """Whether an append from ``expected_upper`` would be recorded here had it landed."""
        return self.horizon <= expected_upper

    def recorded(self, marks: Iterable[WriteMark], limit: int = WRITE_MEMORY) -> WriteLedger:
        """This ledger with ``marks`` added (known ids skipped), trimmed to the last ``limit``."""
        known = {m.id for m in self.marks}
        merged = [*self.marks]
        for mark in marks:
            if mark.id not in known:
                known.add(mark.id)
                merged.append(mark)
        merged.sort(key=lambda m: (m.upper, m.lower))
        evicted, kept = merged[: max(0, len(merged) - limit)], merged[-limit:] if limit else []
        horizon = max([self.horizon, *(m.upper for m in evicted)])
        return WriteLedger(tuple(kept), horizon)

    def carried(self, source: WriteLedger, limit: int = WRITE_MEMORY) -> WriteLedger:
        """This ledger extended by a copy source's marks and horizon (a replacement shard)."""
        extended = self.recorded(source.marks, limit)
        return attrs.evolve(extended, horizon=max(extended.horizon, source.horizon))

    def to_json(self) -> dict[str, Any]:
        return {"marks": [m.to_json() for m in self.marks], "horizon": self.horizon}

    @classmethod
    def from_json(cls, data: Any, upper: int) -> WriteLedger:
        """The ledger in a state's JSON; a state written before ledgers knows nothing below
        its ``upper``."""
        if data is None:
            return cls((), upper)
        return cls(tuple(WriteMark.from_json(m) for m in data["marks"]), int(data["horizon"]))
