"""Request budgets: the bytes a ZooKeeper multi-op sends, and plans of ops that fit.

A ZooKeeper server refuses any request longer than its ``jute.maxbuffer`` (1,048,575 bytes by
default): it logs "Len error" and drops the connection. The client sees ConnectionLoss, an
*unknown* outcome, and a resend of the same request fails the same way forever, until the
session expires. So no transaction may ever be sent over budget: :func:`request_bytes` sizes a
multi as ZooKeeper's jute encoding does (generously), :func:`plan_chunks` cuts a long list of
independent ops into transactions under the budget, and a single op that cannot fit alone is a
clear, non-retryable :class:`~catalog.errors.TransactionTooLargeError` naming its key and size.

The budget derives from the server's ``jute.maxbuffer`` (``CATALOG_UPGRADE_JUTE_MAXBUFFER``
when the servers run with another value) minus headroom for the request's framing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import attrs

from catalog.errors import BadInputError, TransactionTooLargeError

__all__ = [
    "DEFAULT_JUTE_MAXBUFFER",
    "JUTE_MAXBUFFER_ENV",
    "LEN_ERROR_MIN_BYTES",
    "MAX_OPS_PER_TRANSACTION",
    "LenErrorWatch",
    "checked_request",
    "op_bytes",
    "plan_chunks",
    "refused_by_server",
    "request_budget",
    "request_bytes",
]

DEFAULT_JUTE_MAXBUFFER = 1_048_575
JUTE_MAXBUFFER_ENV = "CATALOG_UPGRADE_JUTE_MAXBUFFER"
# What a transaction leaves to framing and to estimates that run short: 1/16 of the limit.
_HEADROOM_FRACTION = 16
# Per op: the multi header (9 bytes), string lengths, version or flags, an ACL list with room for
# digest credentials; generous on purpose.
_OP_OVERHEAD = 256
# A multi's own header, end marker and request header.
_REQUEST_OVERHEAD = 64
# Also bound by count: a very long transaction holds the server's request processor.
MAX_OPS_PER_TRANSACTION = 200


class SizedOp(Protocol):
    """What sizing needs of an op (catalog.consensus's Create, SetData, Delete, Check)."""

    @property
    def key(self) -> str: ...


def request_budget(environ: Mapping[str, str] = os.environ) -> int:
    """The most bytes one request may take: the server's ``jute.maxbuffer`` (the environment's
    setting, else ZooKeeper's default) minus headroom."""
    raw = environ.get(JUTE_MAXBUFFER_ENV, "").strip()
    maxbuffer = DEFAULT_JUTE_MAXBUFFER
    if raw:
        try:
            maxbuffer = int(raw)
        except ValueError:
            maxbuffer = -1
        if maxbuffer < 64 * 1024:
            raise BadInputError(
                f"{JUTE_MAXBUFFER_ENV}={raw!r} is not a jute.maxbuffer (an integer of bytes, "
                "at least 65536)",
                variable=JUTE_MAXBUFFER_ENV,
                value=raw,
            )
    return maxbuffer - maxbuffer // _HEADROOM_FRACTION


def op_bytes(op: SizedOp, path: str) -> int:
    """The bytes ``op`` (at absolute ``path``) adds to a multi request, over-estimated."""
    value = getattr(op, "value", b"")
    return _OP_OVERHEAD + len(path.encode()) + len(value)


def request_bytes(ops: Sequence[SizedOp], path_of: Callable[[str], str]) -> int:
    """The bytes of one multi request holding ``ops``."""
    return _REQUEST_OVERHEAD + sum(op_bytes(op, path_of(op.key)) for op in ops)


OpT = TypeVar("OpT", bound=SizedOp)


def plan_chunks(
    ops: Sequence[OpT],
    path_of: Callable[[str], str],
    budget: int,
    *,
    fixed: int = 0,
    max_ops: int = MAX_OPS_PER_TRANSACTION,
) -> list[list[OpT]]:
    """``ops`` in order, cut into transactions of at most ``budget`` bytes (``fixed``: bytes
    each transaction carries besides, e.g. the fence's check) and ``max_ops`` ops.

    Raises TransactionTooLargeError when one op cannot fit even alone.
    """
    chunks: list[list[OpT]] = []
    current: list[OpT] = []
    used = _REQUEST_OVERHEAD + fixed
    for op in ops:
        size = op_bytes(op, path_of(op.key))
        if _REQUEST_OVERHEAD + fixed + size > budget:
            raise too_large(op.key, size, budget)
        if current and (used + size > budget or len(current) >= max_ops):
            chunks.append(current)
            current, used = [], _REQUEST_OVERHEAD + fixed
        current.append(op)
        used += size
    if current:
        chunks.append(current)
    return chunks


# Requests at least this large whose connection drops are suspected of a "Len error" (a server
# whose real jute.maxbuffer is below the budget); smaller ones are never that.
LEN_ERROR_MIN_BYTES = 16 * 1024


def refused_by_server(key: str, size: int, budget: int) -> TransactionTooLargeError:
    """The error for a request the server dropped twice while answering smaller ones."""
    return TransactionTooLargeError(
        f"ZooKeeper dropped the connection on a write of {key} ({size} bytes) twice, while it "
        f"answers smaller requests: its jute.maxbuffer is below that (a 'Len error' in its "
        f"log), though this process budgets {budget} bytes per request. Set "
        f"{JUTE_MAXBUFFER_ENV} to the servers' jute.maxbuffer (or raise theirs)",
        key=key,
        size=size,
        budget=budget,
        reason="len-error",
        suggestion=f"{JUTE_MAXBUFFER_ENV}=<the servers' jute.maxbuffer>",
    )


@attrs.define
class LenErrorWatch:
    """Large requests whose connection dropped (one per store).

    A server whose real ``jute.maxbuffer`` is below our budget drops every request over it
    ("Len error" in its log) and answers smaller ones. So when a request at least as large as
    one dropped before is dropped again, and the server answers a probe right after, the
    request is refused as too large (TransactionTooLargeError) instead of being resent by the
    caller for ever. A real outage (the probe fails too) proves nothing, and a request as large
    that goes through clears the suspicion (it was the network).
    """

    smallest: int | None = None

    def dropped(
        self, size: int, key: str, budget: int, answers: Callable[[], bool], exc: BaseException
    ) -> None:
        if size < LEN_ERROR_MIN_BYTES or not answers():
            return
        if self.smallest is not None and size >= self.smallest:
            raise refused_by_server(key, size, budget) from exc
        self.smallest = size if self.smallest is None else min(self.smallest, size)

    def passed(self, size: int) -> None:
        if self.smallest is not None and size >= self.smallest:
            self.smallest = None


def checked_request(ops: Sequence[SizedOp], path_of: Callable[[str], str], budget: int) -> int:
    """The request's bytes; TransactionTooLargeError, before anything is sent, naming the
    largest op of a request over ``budget``."""
    total = request_bytes(ops, path_of)
    if total <= budget:
        return total
    sizes = {op.key: op_bytes(op, path_of(op.key)) for op in ops}
    biggest = max(sizes, key=lambda k: sizes[k])
    error = too_large(biggest, total, budget)
    error.details.update(ops=len(ops), largest_op=sizes[biggest])
    raise error


def too_large(key: str, size: int, budget: int) -> TransactionTooLargeError:
    return TransactionTooLargeError(
        f"a write of {key} takes {size} bytes, more than the {budget}-byte request budget "
        f"(ZooKeeper's jute.maxbuffer less headroom; {JUTE_MAXBUFFER_ENV} if the servers "
        "allow more): split the value or move it to blob storage",
        key=key,
        size=size,
        budget=budget,
    )
