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

from catalog.errors import BadInputError, TransactionTooLargeError

__all__ = [
    "DEFAULT_JUTE_MAXBUFFER",
    "JUTE_MAXBUFFER_ENV",
    "MAX_OPS_PER_TRANSACTION",
    "op_bytes",
    "plan_chunks",
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


def too_large(key: str, size: int, budget: int) -> TransactionTooLargeError:
    return TransactionTooLargeError(
        f"a write of {key} takes {size} bytes, more than the {budget}-byte request budget "
        f"(ZooKeeper's jute.maxbuffer less headroom; {JUTE_MAXBUFFER_ENV} if the servers "
        "allow more): split the value or move it to blob storage",
        key=key,
        size=size,
        budget=budget,
    )
