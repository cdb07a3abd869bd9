"""A write's mark: what the write ledger and the key log record of one append.

Its identity (the write id: a fresh one, or derived from an ``Idempotency-Key`` and the body),
the upper the append moved from (``lower``) and to, and its rows. Both the ledger
(:mod:`catalog.shard.ledger`, the last appends, in the shard's state) and the key log
(:mod:`catalog.shard.keylog`, keyed appends past the ledger, in blobs) hold marks, and a lost
answer is resolved by finding one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["WriteMark"]


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
