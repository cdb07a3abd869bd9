"""The identity of a ``POST /append``: from its ``Idempotency-Key`` header, or fresh.

The identity is the write id the shard's ledger records with the rows (catalog.shard.ledger), so
it is durable with the state change and survives compaction, roll-ups, a change of leader and a
collection's switch to a replacement shard. A key's identity is ``k`` + 16 hex digits of the
key's hash + 16 of the body's: the same key with the same body is the same append; the same key
with another body is a client's mistake, refused (IdempotencyKeyReusedError, HTTP 422) rather
than silently ignored.

Retention: a key is recognised while its append is among the last
:data:`~catalog.shard.WRITE_MEMORY` appends of its collection; a retry after that is a new
append.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

import attrs

from catalog.errors import BadIdempotencyKeyError, IdempotencyKeyReusedError
from catalog.shard import WRITE_MEMORY, WriteMark

__all__ = ["IDEMPOTENCY_HEADER", "MAX_KEY_LENGTH", "WriteIdentity"]

MAX_KEY_LENGTH = 255
_PREFIX = "k"

#: The request header that names an append (one home: the HTTP layer reads it by this name).
IDEMPOTENCY_HEADER = "Idempotency-Key"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@attrs.frozen
class WriteIdentity:
    """The write id of one append request, and its key's prefix when the client gave a key."""

    write_id: str
    key_prefix: str | None = None

    @classmethod
    def of(cls, key: str | None, body: bytes) -> WriteIdentity:
        """The identity of a request with header value ``key`` (None: no header) and ``body``."""
        if key is None:
            return cls(uuid.uuid4().hex)
        if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
            raise BadIdempotencyKeyError(
                f"{IDEMPOTENCY_HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters",
                header=IDEMPOTENCY_HEADER,
            )
        prefix = _PREFIX + _digest(key.encode())
        return cls(prefix + _digest(body), prefix)

    def check_reuse(self, marks: Iterable[WriteMark], collection: str) -> None:
        """IdempotencyKeyReusedError when the ledger holds this key with another body."""
        if self.key_prefix is None:
            return
        for mark in marks:
            if mark.id.startswith(self.key_prefix) and mark.id != self.write_id:
                raise IdempotencyKeyReusedError(
                    f"{IDEMPOTENCY_HEADER} was used for another append to {collection} "
                    f"(at ts {mark.lower}) with a different body; use a new key per append",
                    collection=collection,
                    ts=mark.lower,
                    retention=WRITE_MEMORY,
                )
