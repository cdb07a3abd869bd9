"""Group commit: appends to one collection that arrive while a commit is in flight go into the
next commit together, one blob and one fenced ZooKeeper multi for the group.

Each request thread queues its append and waits for its answer. One committer thread per
collection, started by the first append that finds none running, commits everything queued
(up to ``max_members`` appends and ``max_rows`` rows) and hands each its answer, until the queue
is empty. So one client pays one commit, and many clients share each. Every append keeps its own
write id (its own mark in the ledger, its own idempotency record) and its own answer; a group
lands whole or not at all, so a lost answer is resolved by any member's identity for all.

An append waits for its commit at most :data:`APPEND_DEADLINE_SECONDS`: a commit held by a
stalled blob store or ZooKeeper goes on in the background, and the request answers 503
``outcome-unknown`` (:class:`AppendOutcomeUnknownError`). Its outcome is then what the commit
does: a retry with the same ``Idempotency-Key`` waits for that commit (the key stays taken until
it ends, orchestrator.dataplane.idempotency) and gets its answer, or writes it if it failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import pyarrow as pa
import structlog

from catalog.errors import BadInputError, CatalogError
from orchestrator.dataplane.idempotency import WriteIdentity

__all__ = ["APPEND_DEADLINE_SECONDS", "GroupCommit", "Pending"]

#: The longest an append waits for its commit before it answers 503 ``outcome-unknown``.
APPEND_DEADLINE_SECONDS: Final = 15.0




log = structlog.get_logger(__name__)

#: Appends in one commit at most: the ledger keeps the last 64 marks whatever it evicts, so a
#: group's own marks always stay in it.
MAX_MEMBERS = 64
#: Rows in one commit at most (a larger single append still goes alone).
MAX_ROWS = 100_000


class AppendOutcomeUnknownError(CatalogError):
    """An append whose commit did not end within its deadline
    (:data:`~orchestrator.dataplane.groupcommit.APPEND_DEADLINE_SECONDS`: a stalled blob store or
    ZooKeeper): it may still land. Retry after ``Retry-After`` with the same
    ``Idempotency-Key``: the retry gets the commit's answer, and never writes the rows twice."""

    code = "outcome-unknown"


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
    _settled: list[Callable[[], None]] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def settle(self, answer: Mapping[str, Any] | None, error: BaseException | None) -> None:
        with self._lock:
            self.answer, self.error = answer, error
            self.done.set()
            then, self._settled = self._settled, []
        for callback in then:
            callback()

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the append is settled (now, when it is already)."""
        with self._lock:
            if not self.done.is_set():
                self._settled.append(callback)
                return
        callback()

    def result(self, deadline: float | None = None) -> Mapping[str, Any]:
        """The answer, or the commit's error; AppendOutcomeUnknownError when ``deadline``
        seconds pass first (the commit goes on)."""
        if not self.done.wait(deadline):
            raise AppendOutcomeUnknownError(
                f"the append's commit did not end within {deadline:g} s (a stalled blob store "
                "or ZooKeeper): it may still land; retry after Retry-After with the same "
                "Idempotency-Key to learn its outcome",
                write_id=self.identity.write_id if self.identity.key_prefix else None,
                deadline_seconds=deadline,
                retry_after=5,
            )
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
        #: Whether a committer thread runs (it ends when it finds the queue empty).
        self._draining = False

    @property
    def queued(self) -> int:
        """Appends waiting for a commit to take them (not those of the commit under way)."""
        with self._queued:
            return len(self._queue)

    def submit(
        self, pending: Pending, deadline: float | None = APPEND_DEADLINE_SECONDS
    ) -> Mapping[str, Any]:
        """Queue ``pending`` and wait for its commit, at most ``deadline`` seconds; its answer
        (:meth:`Pending.result`)."""
        with self._queued:
            self._queue.append(pending)
            start, self._draining = not self._draining, True
        if start:
            threading.Thread(target=self._drain, name="group-commit", daemon=True).start()
        return pending.result(deadline)

    def _drain(self) -> None:
        """The committer: commit the queue, group by group, until it is empty."""
        try:
            while True:
                with self._queued:
                    if not self._queue:
                        self._draining = False
                        return
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
        except BaseException:
            with self._queued:
                self._draining = False
            raise

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
