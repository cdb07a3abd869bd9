"""A write's identity: the id a shard records with an append's rows, and its keyed form.

An append is recorded under a write id (the write ledger, then the key log), so a lost answer
is resolved by it. An unkeyed append's id is a fresh uuid (32 hex digits). A *keyed* append's
id is ``k`` + 16 hex digits of its key's hash + 16 of its body's: the same key with the same
body is the same append, and the key's part (the id's *prefix*) finds it whatever body it came
with. This module is the one home of that format: the sidecar makes ids here
(:class:`orchestrator.dataplane.idempotency.WriteIdentity`), the ledger and the key log read
them here.
"""

from __future__ import annotations

import hashlib
import re
import uuid

__all__ = [
    "body_digest",
    "fresh",
    "is_keyed",
    "key_digest",
    "key_prefix",
    "keyed",
    "keyed_id",
    "prefix_of_key",
]

_MARK = "k"
_DIGITS = 16  # hex digits of each hash: 64 bits
_PREFIX_LENGTH = len(_MARK) + _DIGITS
_KEYED = re.compile(rf"{_MARK}[0-9a-f]{{{2 * _DIGITS}}}")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_DIGITS]


def fresh() -> str:
    """The id of an append without a key: a new uuid's 32 hex digits."""
    return uuid.uuid4().hex


def prefix_of_key(key: str) -> str:
    """The prefix every keyed id of ``key`` starts with: ``k`` + its hash's 16 hex digits."""
    return _MARK + _digest(key.encode())


def keyed(key: str, body: bytes) -> str:
    """The id of an append of ``body`` under ``key``."""
    return prefix_of_key(key) + _digest(body)


def is_keyed(write_id: str) -> bool:
    """Whether ``write_id`` names a keyed append (``k`` + 32 hex digits)."""
    return _KEYED.fullmatch(write_id) is not None


def key_prefix(write_id: str) -> str:
    """The key's part of a keyed id (what :func:`prefix_of_key` made)."""
    return write_id[:_PREFIX_LENGTH]


def key_digest(prefix: str) -> int:
    """The key's 64-bit hash, from a keyed id or its prefix."""
    return int(prefix[len(_MARK) : _PREFIX_LENGTH], 16)


def body_digest(write_id: str) -> int:
    """The body's 64-bit hash, from a keyed id."""
    return int(write_id[_PREFIX_LENGTH:], 16)


def keyed_id(prefix: str, body: int) -> str:
    """The keyed id of a key's ``prefix`` and a body's 64-bit hash (as the key log stores
    them: two integers)."""
    return f"{key_prefix(prefix)}{body:0{_DIGITS}x}"
