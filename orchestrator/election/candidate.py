"""The election of one process: its candidate node, leadership, and the events that change them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import structlog
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from catalog.consensus import CONNECTION_ERRORS, Consensus
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
)
from orchestrator.election.core import Candidacy
from orchestrator.election.takeover import Takeover
from orchestrator.election.values import ElectionEvent, Leadership, candidate_key
from orchestrator.election.worker import ElectionWorker

log = structlog.get_logger(__name__)


class LeaderElection:
    """One process's candidacy in the election of its deploy generation, for the version of
    its ``release`` (a takeover binds the generation to it).

    ``start`` joins; ``try_take_over`` becomes leader when this process is the lowest candidate
    of the promotion target's generation; ``step_down`` releases leadership at once; ``stop``
    also ends the watches and the worker thread. ``on_change`` runs on the election's worker
    thread (never kazoo's), so it may call ZooKeeper and ``try_take_over``.

    It holds its collaborators: the :class:`Candidacy` they share, the :class:`Takeover` and
    the :class:`ElectionWorker`.
    """

    def __init__(
        self,
        consensus: Consensus,
        process_id: str,
        deploy_generation: int,
        *,
        release: str,
        on_change: Callable[[ElectionEvent], None],
    ) -> None:
        self._candidacy = Candidacy(consensus, process_id, deploy_generation, release)
        self._takeover = Takeover(self._candidacy)
        self._worker = ElectionWorker(self._candidacy, on_change)

    @property
    def process_id(self) -> str:
        return self._candidacy.process_id

    @property
    def is_leader(self) -> bool:
        return self._candidacy.is_leader

    @property
    def leadership(self) -> Leadership | None:
        return self._candidacy.leadership

    @property
    def paused(self) -> bool:
        """True while the session is suspended (or lost): no write may start."""
        return self._candidacy.paused

    @property
    def candidate(self) -> str | None:
        """Our candidate node's key, while joined."""
        return self._candidacy.candidate

    def leadership_guard(self, timeout: float = 0.0) -> Leadership:
        """The current leadership, if this process may write right now
        (:meth:`Candidacy.leadership_guard`)."""
        return self._candidacy.leadership_guard(timeout)

    def try_take_over(self, *, bootstrap: bool) -> Leadership | None:
        """Become leader if this process is the lowest candidate of the promotion target
        (:meth:`Takeover.try_take_over`)."""
        return self._takeover.try_take_over(bootstrap=bootstrap)

    def start(self) -> None:
        """Join the election of our generation and start watching (join once ready to lead).

        Idempotent; after :meth:`step_down` it joins again (at the back). Not after ``stop``.
        """
        c, worker = self._candidacy, self._worker
        with c.lock:
            if c.stopped:
                raise RuntimeError(f"election of {c.process_id} was stopped; make a new one")
            started = worker.start()
            if not c.joined:
                c.join()
                c.joined = True
        if not started:
            return
        consensus, client = c.consensus, c.client
        gen_path = consensus.path(candidate_key(c.deploy_generation))
        DataWatch(client, consensus.path(PROMOTION_KEY), worker.data_watch("promotion"))
        DataWatch(client, consensus.path(EPOCH_KEY), worker.data_watch("epoch"))
        DataWatch(client, consensus.path(CATALOG_KEY), worker.data_watch("catalog"))
        ChildrenWatch(client, gen_path, worker.children_watch)

    def step_down(self) -> None:
        """Release leadership (and the candidacy) now, so the next candidate takes over."""
        c = self._candidacy
        with c.lock:
            was_leader = c.leadership is not None
            c.end_leadership("stepped_down")
            c.joined = False
            candidate, c.candidate = c.candidate, None
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                # a node we cannot delete goes with the session anyway
                c.client.delete(c.consensus.path(candidate))
        c.log.info("stepped_down", was_leader=was_leader)
        self._worker.queue.put(("notify", ElectionEvent("stepped_down", reason="stepped_down")))

    def stop(self) -> None:
        """Step down, stop reacting to watches and end the worker thread."""
        self.step_down()
        with self._candidacy.lock:
            self._candidacy.stopped = True
        self._worker.stop()


def fenced_write_guard(
    leading: Callable[[], LeaderElection | None],
    failpoint: Callable[[str], None] | None,
) -> Callable[[str], None]:
    """The hook run before every fenced write: while ``leading()`` names the election this
    process leads, its guard must pass (a SUSPENDED session stops writes at once, inside a
    step, with a retryable ConnectionLostError and nothing sent); then the crash failpoint."""

    def before_fenced_write(key: str) -> None:
        election = leading()
        if election is not None:
            election.leadership_guard()
        if failpoint is not None:
            failpoint(key)

    return before_fenced_write
