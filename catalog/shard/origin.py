"""What a prepared shard was made from: its origin, fixed when the shard is created.

A replacement or rewrite shard that a process prepares before its promotion is made from one
catalog: the collection's shard then (the *source*) and the release schema the catalog recorded
for it (its fingerprint). A rewrite copy's position is the prepared shard's own upper (each copy
is one compare-and-append that moves it), so the three together say exactly what the shard holds.

The catalog may move before the shard is used: another release promoted in between replaces the
collection (a new source) or evolves it (a new fingerprint). A prepared shard is reused only by a
plan from the same origin; any other plan prepares a new one, so a copy is never resumed from
another shard's position, nor a replacement reused for a history it was not made for
(``catalog.migration.MigrationShard.ensure_replacement_shards``).
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Origin:
    """The catalog a prepared shard was made from: the collection's ``source`` shard (None for
    a builtin new in the release: nothing to copy) and its recorded schema ``fingerprint``."""

    source: str | None
    fingerprint: str | None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, data: Any) -> Origin | None:
        """The origin a state records; None for a shard created without one (a collection
        shard, or a prepared shard of a release before origins: never reused)."""
        if data is None:
            return None
        source, fingerprint = data.get("source"), data.get("fingerprint")
        for value in (source, fingerprint):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"an origin holds strings, not {type(value).__name__}")
        return cls(source, fingerprint)
