"""Group commit: appends to one collection that arrive while a commit is in flight go into the
next commit together, one blob and one fenced ZooKeeper multi for the group.

Each request thread queues its append and takes its turn at the commit lock; a thread that gets
the turn commits everything queued (its own append and those that came while the previous commit
ran, up to ``max_members`` appends and ``max_rows`` rows) and hands each its answer; a thread
whose append someone else committed just returns that answer. So one client pays one commit, and
many clients share each. Every append keeps its own write id (its own mark in the ledger, its
own idempotency record) and its own answer; a group lands whole or not at all, so a lost answer
is resolved by any member's identity for all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.errors import BadInputError
from orchestrator.sidecar.idempotency import WriteIdentity

__all__ = ["GroupCommit", "Pending"]

log = structlog.get_logger(__name__)

#: Appends in one commit at most: the ledger keeps the last 64 marks whatever it evicts, so a
#: group's own marks always stay in it.
MAX_MEMBERS = 64
#: Rows in one commit at most (a larger single append still goes alone).
MAX_ROWS = 100_000


@attrs.define(eq=False)
class Pending:
    """One append waiting for its commit: its identity and rows (and when it was queued,
    :func:`time.monotonic`); then its answer or error."""

    identity: WriteIdentity
    table: pa.Table
    queued: float = attrs.field(factory=time.monotonic)
    answer: Mapping[str, Any] | None = None
    error: BaseException | None = None
    done: threading.Event = attrs.field(factory=threading.Event)

    def settle(self, answer: Mapping[str, Any] | None, error: BaseException | None) -> None:
        self.answer, self.error = answer, error
        self.done.set()

    def result(self) -> Mapping[str, Any]:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


class GroupCommit:
    """The group commit of one collection. ``commit(group)`` writes a group in one commit and
    settles each member; an exception it raises settles every unsettled member with it."""

    def __init__(
        self,
        commit: Callable[[Sequence[Pending]], None],
        max_members: int = MAX_MEMBERS,
        max_rows: int = MAX_ROWS,
    ) -> None:
        self._commit = commit
        self._max_members = max_members
        self._max_rows = max_rows
        self._queue: list[Pending] = []
        self._queued = threading.Lock()
        self._turn = threading.Lock()

    @property
    def queued(self) -> int:
        """Appends waiting for a commit to take them (not those of the commit under way)."""
        with self._queued:
            return len(self._queue)

    def submit(self, pending: Pending) -> Mapping[str, Any]:
        """Queue ``pending``, commit or wait for the commit that takes it; its answer."""
        with self._queued:
            self._queue.append(pending)
        while not pending.done.is_set():
            with self._turn:
                if pending.done.is_set():
                    break
                group = self._take()
                try:
                    self._commit(group)
                except BaseException as exc:
                    if len(group) > 1 and _refused_rows(exc):
                        self._commit_alone(group)  # only the member whose rows fail fails
                        continue
                    for member in group:
                        if not member.done.is_set():
                            member.settle(None, _as_refusal(exc))
                    if not isinstance(exc, Exception):
                        raise
        return pending.result()

    def _commit_alone(self, group: Sequence[Pending]) -> None:
        """Each unsettled member of ``group`` in a commit of its own: the group's write failed
        on some member's rows (before anything was written), and no member fails for another's
        data. Every append is checked on its own before it queues; this is the net below."""
        log.warning("group_commit_split", members=len(group))
        for member in group:
            if member.done.is_set():
                continue
            try:
                self._commit([member])
            except BaseException as exc:
                if not member.done.is_set():
                    member.settle(None, _as_refusal(exc))
                if not isinstance(exc, Exception):
                    raise

    def _take(self) -> list[Pending]:
        """The oldest queued appends within the limits (at least one)."""
        with self._queued:
            rows = 0
            count = 0
            for member in self._queue:
                rows += member.table.num_rows
                if count and (count >= self._max_members or rows > self._max_rows):
                    break
                count += 1
            group, self._queue = self._queue[:count], self._queue[count:]
        return group


def _refused_rows(exc: BaseException) -> bool:
    """Whether a commit failed on the rows themselves (Arrow or Parquet refused them while the
    blob was made): nothing was written, and the same rows fail again."""
    return isinstance(exc, pa.ArrowException)


def _as_refusal(exc: BaseException) -> BaseException:
    """A failure on rows as the append's refusal (400), never a 500 from a value."""
    if not _refused_rows(exc):
        return exc
    refusal = BadInputError(f"the rows cannot be stored: {exc}", rule="unstorable")
    refusal.__cause__ = exc
    return refusal
