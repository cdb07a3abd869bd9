"""The election of one process: its candidate node, leadership, and the events that change them."""

from __future__ import annotations

import contextlib
import threading

import structlog
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from catalog.consensus import (
    CONNECTION_ERRORS,
)
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
)
from orchestrator.election.values import (
    ElectionEvent,
    candidate_key,
)
from orchestrator.election.worker import ElectionWorker

log = structlog.get_logger(__name__)


class LeaderElection(ElectionWorker):
    """One process's candidacy in the election of its deploy generation.

    ``start`` joins; ``try_take_over`` becomes leader when this process is the lowest candidate
    of the promotion target's generation; ``step_down`` releases leadership at once; ``stop``
    also ends the watches and the worker thread. ``on_change`` runs on the election's worker
    thread (never kazoo's), so it may call ZooKeeper and ``try_take_over``.
    """


    def start(self) -> None:
        """Join the election of our generation and start watching (join once ready to lead).

        Idempotent; after :meth:`step_down` it joins again (at the back). Not after ``stop``.
        """
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"election of {self.process_id} was stopped; make a new one")
            watching = self._worker is not None
            if not watching:
                self._worker = threading.Thread(
                    target=self._run, name=f"election-{self.process_id}", daemon=True
                )
                self._worker.start()
                self._client.add_listener(self._on_state)
            if not self._joined:
                self._join()
                self._joined = True
        if watching:
            return
        gen_path = self.consensus.path(candidate_key(self.deploy_generation))
        DataWatch(self._client, self.consensus.path(PROMOTION_KEY), self._data_watch("promotion"))
        DataWatch(self._client, self.consensus.path(EPOCH_KEY), self._data_watch("epoch"))
        DataWatch(self._client, self.consensus.path(CATALOG_KEY), self._data_watch("catalog"))
        ChildrenWatch(self._client, gen_path, self._children_watch)

    def step_down(self) -> None:
        """Release leadership (and the candidacy) now, so the next candidate takes over."""
        with self._lock:
            was_leader = self._leadership is not None
            self._end_leadership("stepped_down")
            self._joined = False
            candidate, self._candidate = self._candidate, None
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                # a node we cannot delete goes with the session anyway
                self._client.delete(self.consensus.path(candidate))
        self._log.info("stepped_down", was_leader=was_leader)
        self._queue.put(("notify", ElectionEvent("stepped_down", reason="stepped_down")))

    def stop(self) -> None:
        """Step down, stop reacting to watches and end the worker thread."""
        self.step_down()
        with self._lock:
            self._stopped = True
        self._client.remove_listener(self._on_state)
        self._queue.put(None)
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=5)
