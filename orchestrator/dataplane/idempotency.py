"""The identity of a ``POST /append``: from its ``Idempotency-Key`` header, or fresh.

The identity is the write id the shard records with the rows (the write ledger, then the key
log: catalog.shard.ledger, catalog.shard.keylog), so it is durable with the state change and
survives compaction, roll-ups, a change of leader and a collection's switch to a replacement
shard. A key's identity is ``k`` + 16 hex digits of the key's hash + 16 of the body's
(:mod:`catalog.shard.writeid`): the same key with the same body is the same append; the same
key with another body is a client's mistake, refused (IdempotencyKeyReusedError, HTTP 422)
rather than silently ignored.

Retention: a key is recognised for ``--idempotency-retention`` (24 h by default, as payment
APIs keep theirs) after its append, however many appends come after it. A retry after that is a
new append. A retry is looked up before its body is read, so it gets its first answer even
when the collection's schema changed since. Requests with one key wait for each other in this
process (:class:`KeyedRequests`): the first writes, the others then find its answer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import attrs

from catalog.errors import BadInputError, CatalogError
from catalog.shard import WriteMark, writeid

__all__ = [
    "IDEMPOTENCY_HEADER",
    "IN_PROGRESS_WAIT_SECONDS",
    "MAX_KEY_LENGTH",
    "KeyTurn",
    "KeyedRequests",
    "WriteIdentity",
]

MAX_KEY_LENGTH = 255
#: How long a request waits for another request of its key to end before it is refused (409).
IN_PROGRESS_WAIT_SECONDS = 30.0

#: The request header that names an append (one home: the HTTP layer reads it by this name).
IDEMPOTENCY_HEADER = "Idempotency-Key"


class IdempotencyKeyInProgressError(CatalogError):
    """Another request with the same ``Idempotency-Key`` is still being written."""

    code = "idempotency-key-in-progress"


class IdempotencyKeyReusedError(BadInputError):
    """An ``Idempotency-Key`` used before for another append (another body)."""

    code = "idempotency-key-reused"


class BadIdempotencyKeyError(BadInputError):
    """An ``Idempotency-Key`` that is not 1 to 255 printable ASCII characters."""

    code = "bad-idempotency-key"


@attrs.frozen
class WriteIdentity:
    """The write id of one append request, and its key's prefix when the client gave a key."""

    write_id: str
    key_prefix: str | None = None

    @classmethod
    def of(cls, key: str | None, body: bytes) -> WriteIdentity:
        """The identity of a request with header value ``key`` (None: no header) and ``body``."""
        if key is None:
            return cls(writeid.fresh())
        if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
            raise BadIdempotencyKeyError(
                f"{IDEMPOTENCY_HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters",
                header=IDEMPOTENCY_HEADER,
            )
        return cls(writeid.keyed(key, body), writeid.prefix_of_key(key))

    def check_reuse(self, found: WriteMark | None, collection: str) -> None:
        """IdempotencyKeyReusedError when ``found`` (the mark recorded under this key) is of
        another body."""
        if found is not None and found.id != self.write_id:
            raise IdempotencyKeyReusedError(
                f"{IDEMPOTENCY_HEADER} was used for another append to {collection} "
                f"(at ts {found.lower}) with a different body; use a new key per append",
                collection=collection,
                ts=found.lower,
            )


class KeyTurn:
    """A request's turn with its key. :meth:`lasts_until` keeps the key taken after the request
    ends, until its append is settled: a request that answered ``outcome-unknown`` leaves a
    commit under way, and a retry must wait for it rather than write the rows again."""

    def __init__(self) -> None:
        self.until: Callable[[Callable[[], None]], None] | None = None

    def lasts_until(self, when_settled: Callable[[Callable[[], None]], None]) -> None:
        """Release the key through ``when_settled(release)`` (the append's
        :meth:`~orchestrator.dataplane.groupcommit.Pending.when_settled`)."""
        self.until = when_settled


class KeyedRequests:
    """The requests with an ``Idempotency-Key`` under way in this process: one at a time per
    key. A second request with the key waits (up to ``wait`` seconds) for the first to end,
    then looks its key up like any retry; past the wait it is refused (409, in progress)."""

    def __init__(self, wait: float = IN_PROGRESS_WAIT_SECONDS) -> None:
        self._wait = wait
        self._lock = threading.Lock()
        self._held: dict[str, threading.Event] = {}

    @contextlib.contextmanager
    def turn(self, identity: WriteIdentity) -> Iterator[KeyTurn]:
        key = identity.key_prefix
        turn = KeyTurn()
        if key is None:
            yield turn
            return
        while True:
            with self._lock:
                held = self._held.get(key)
                if held is None:
                    mine = self._held[key] = threading.Event()
                    break
            if not held.wait(self._wait):
                raise IdempotencyKeyInProgressError(
                    f"another request with this {IDEMPOTENCY_HEADER} is still being written "
                    f"after {self._wait:g} s; retry later",
                    retry_after=1,
                )

        def release() -> None:
            with self._lock:
                del self._held[key]
            mine.set()

        try:
            yield turn
        finally:
            if turn.until is None:
                release()
            else:
                turn.until(release)
