"""What the operations of a shard need of it: its stores, its id, its state and the
compare-and-set every change goes through.

The operations are functions of their modules (:mod:`~catalog.shard.append`,
:mod:`~catalog.shard.read`, :mod:`~catalog.shard.compact`, :mod:`~catalog.shard.lifecycle`)
that take this. :class:`~catalog.shard.handle.Shard` is it, and its methods of the same names
call them: the functions type against this protocol, not the handle, so no module imports the
handle that imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from catalog.blob import BlobStore
from catalog.consensus import Check, Consensus, Fence
from catalog.retry import CasRetry
from catalog.shard.keylog import KeyLog
from catalog.shard.ledger import WriteLedger, WriteMark
from catalog.shard.rollups import Rollups
from catalog.shard.state import BatchRef, ShardState

__all__ = ["ShardAccess"]


class ShardAccess(Protocol):
    """One shard's stores, id and compare-and-set (see :class:`~catalog.shard.handle.Shard`)."""

    consensus: Consensus
    blob: BlobStore
    shard_id: str
    retry: Callable[[], CasRetry]
    rollup_threshold: int
    max_rollups: int
    write_memory: int
    rollups: Rollups
    keys: KeyLog

    @property
    def key(self) -> str: ...

    @property
    def log(self) -> Any: ...

    def state(self) -> ShardState: ...

    def batches(self, state: ShardState | None = None) -> list[BatchRef]: ...

    def cas(
        self, old: ShardState, new: ShardState, fence: Fence | None, guards: Sequence[Check] = ()
    ) -> ShardState: ...

    def check_guards(self, guards: Sequence[Check]) -> None: ...

    def update(
        self, change: Callable[[ShardState], ShardState | None], fence: Fence | None
    ) -> ShardState: ...

    def packed(
        self, state: ShardState, batches: Sequence[BatchRef]
    ) -> tuple[ShardState, list[str]]: ...

    def find_write(self, writes: WriteLedger, write_id: str) -> WriteMark | None: ...
