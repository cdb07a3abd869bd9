"""The write path's merges and their back-pressure: after each commit the leader asks for its
shard's next merge (the policy of :mod:`catalog.shard.merges`), which a thread of that shard
runs in the background, fenced by the leadership (at most :data:`MERGES_AT_ONCE` at a time);
a writer whose shard lists too many batches waits for that merge, or is refused at the hard
cap.

A merge is a compaction of some of a shard's batches (:meth:`catalog.shard.Shard.merge`): its
output is written before the compare-and-set that swaps it for its inputs, appends that landed
meanwhile are kept, and the inputs are left to the garbage collection, so a crash at any point
leaves at most an unreferenced blob. A merge that loses a race to another compaction, or whose
leadership ended, changes nothing; the leader's maintenance sweep still compacts what is left.

A merge reads and writes in a thread of lower CPU priority (:data:`MERGE_NICENESS`, as RocksDB
lowers its compaction threads), so on a busy machine reads and appends go first; its commit,
inside the writer's turn, runs at normal priority (a thread cannot raise its priority back
without privileges, so the commit stays in the shard's merge thread).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Final, TypeVar

import attrs
import structlog

from catalog.errors import CatalogError
from catalog.shard import (
    SLOW_DOWN_BATCHES,
    STOP_BATCHES,
    Shard,
    ShardState,
)
from catalog.shard.merges import MERGE_AFTER_BATCHES, live_batches, merge_plan
from orchestrator.election import Leadership
from orchestrator.machine.metrics import SidecarMetrics

log = structlog.get_logger(__name__)

#: Seconds a commit over the slow-down threshold waits for its shard's merge at most.
SLOW_DOWN_WAIT_SECONDS: Final = 2.0
#: Merges running at once, whatever the number of shards appended to.
MERGES_AT_ONCE: Final = 4
#: Merges of one shard in a row before its thread looks whether one is still asked for.
_ROUNDS: Final = 8
#: How much nicer than the sidecar's other threads a merge's reading and writing runs (Linux
#: thread niceness; elsewhere at normal priority): a tenth of a normal thread's share of a
#: busy core, so merges still keep up and back-pressure covers the rest.
MERGE_NICENESS: Final = 10

T = TypeVar("T")


def at_lower_priority(function: Callable[[], T]) -> T:
    """``function()`` run in a thread of its own at :data:`MERGE_NICENESS`; its result or
    its error, as if called here."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        if sys.platform.startswith("linux"):  # a thread id names one thread on Linux only
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), MERGE_NICENESS)
        try:
            outcome.append(function())
        except BaseException as exc:  # handed to the caller's thread, raised there
            failure.append(exc)

    # A daemon, as the merge thread that waits for it: a merge never holds the process's exit.
    thread = threading.Thread(
        target=run, name=f"{threading.current_thread().name}-work", daemon=True
    )
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


class CompactionBehindError(CatalogError):
    """An append to a shard whose merges fell behind: it lists the hard cap of batches
    (``catalog.shard.merges.STOP_BATCHES``), so reads would slow down; nothing was written,
    retry after ``Retry-After`` with the same key."""

    code = "compaction-behind"


@attrs.define
class _Due:
    collection: str
    since: float  # monotonic time the merge was first asked for


class Merger:
    """Runs the merges the write path asks for: one thread for each shard with a merge due,
    so a large collection's long merge never holds up a small one's.

    ``leading`` returns the leadership merges may write under now (None: not serving);
    ``shard`` opens a shard by id; ``turn`` is the writer's turn on a shard, held around a
    merge's commit only, so it never races the shard's appends; ``on_merged`` hears each
    merged state (the writer's cache of the state its next commit starts from).
    """

    def __init__(
        self,
        metrics: SidecarMetrics,
        leading: Callable[[], Leadership | None],
        shard: Callable[[str], Shard],
        turn: Callable[[str], AbstractContextManager[object]],
        on_merged: Callable[[str, ShardState], None],
    ) -> None:
        self._metrics = metrics
        self._leading = leading
        self._shard = shard
        self._turn = turn
        self._on_merged = on_merged
        self._changed = threading.Condition()
        #: Shards with a merge asked for and not started yet.
        self._due: dict[str, _Due] = {}
        #: The thread of each shard that has one (it ends when no merge is due).
        self._threads: dict[str, threading.Thread] = {}
        self._slots = threading.BoundedSemaphore(MERGES_AT_ONCE)

    def committed(self, collection: str, shard_id: str, state: ShardState) -> None:
        """A commit left ``state``: export its batch count and ask for its merge if one is due."""
        count = live_batches(state)
        self._metrics.shard_batches.labels(collection=collection).set(count)
        if count < MERGE_AFTER_BATCHES:
            return
        if not state.rollups and not merge_plan(state.batches):
            return  # every batch listed inline, and the policy picks none
        with self._changed:
            due = self._due.setdefault(shard_id, _Due(collection, time.monotonic()))
            lag = time.monotonic() - due.since
            self._metrics.merge_lag.labels(collection=collection).set(round(lag, 3))
            if shard_id not in self._threads:
                thread = threading.Thread(
                    target=self._run, args=(shard_id,), name=f"merge-{shard_id}", daemon=True
                )
                self._threads[shard_id] = thread
                thread.start()

    def refusal(
        self, collection: str, shard_id: str, state: ShardState
    ) -> CompactionBehindError | None:
        """The refusal of a commit onto ``state`` (the state the commit's compare-and-set
        expects), or None: at the hard cap a commit would pass it, so its appends are refused
        (nothing written) and the shard's merge is asked for. Asked on every attempt's state,
        so no commit ever leaves more than :data:`STOP_BATCHES` batches."""
        count = live_batches(state)
        if count < STOP_BATCHES:
            return None
        self.committed(collection, shard_id, state)
        return CompactionBehindError(
            f"collection {collection}: its shard lists {count} batches, the most appends may "
            "leave (merges fell behind the appends); retry with the same key",
            collection=collection,
            batches=count,
            limit=STOP_BATCHES,
            retry_after=1,
        )

    def slow_down(self, shard_id: str, state: ShardState | None) -> None:
        """Before a commit to a shard last seen at ``state`` (None: not seen yet): over the
        slow-down threshold, wait for the shard's merge, at most
        :data:`SLOW_DOWN_WAIT_SECONDS` (the appends queued meanwhile join the next group)."""
        if state is None or live_batches(state) <= SLOW_DOWN_BATCHES:
            return
        deadline = time.monotonic() + SLOW_DOWN_WAIT_SECONDS
        with self._changed:
            while shard_id in self._threads:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    def _run(self, shard_id: str) -> None:
        while True:
            with self._changed:
                due = self._due.pop(shard_id, None)
                if due is None:
                    del self._threads[shard_id]  # the next commit that finds one due starts one
                    self._changed.notify_all()
                    return
            try:
                with self._slots:
                    self._merge(shard_id, due.collection)
            except (CatalogError, OSError) as exc:  # the sweep compacts what is left
                log.warning("merge_failed", shard=shard_id, error=repr(exc))
            except Exception:  # a defect must not kill the writer's merges for good
                log.exception("merge_crashed", shard=shard_id)
            finally:
                with self._changed:
                    if shard_id not in self._due:
                        self._metrics.merge_lag.labels(collection=due.collection).set(0)
                    self._changed.notify_all()

    def _merge(self, shard_id: str, collection: str) -> None:
        shard = self._shard(shard_id)
        for _ in range(_ROUNDS):
            leadership = self._leading()
            if leadership is None:
                return
            leadership.check()
            started = time.monotonic()
            result = shard.merge(
                fence=leadership.fence, turn=lambda: self._turn(shard_id), work=at_lower_priority
            )
            if not result.applied:
                return
            self._on_merged(shard_id, result.state)
            self._metrics.merges.labels(collection=collection).inc()
            self._metrics.shard_batches.labels(collection=collection).set(
                live_batches(result.state)
            )
            log.info(
                "merged", shard=shard_id, inputs=result.inputs,
                batches=result.state.batch_count,
                seconds=round(time.monotonic() - started, 3),
            )  # fmt: skip
            if not merge_plan(shard.batches(result.state)):
                return
