"""Leader election among the processes of the promotion-target generation, with fencing epochs.

Znodes below the environment root (see ``catalog.environment`` for the whole layout)::

    promotion               {"deploy_generation": G, "requested_by", "requested_at", "previous"}
                            the promotion target; raised by a promotion, lowered only by
                            a take-back while no process of the target took over
    election/<G>/n_<seq>    ephemeral sequential candidates of generation G, JSON
                            {"process_id", "session", "host", "pid"}
    epoch                   {"epoch": n, "leader": process_id, "deploy_generation": G,
                             "session": "0x...", "host", "pid", "taken_over_at"}

Protocol and invariants:

* A process joins the election of its own generation once it is ready to lead (``start``).
  The leader is the *lowest* candidate of ``election/<target>/`` where ``target`` is the
  promotion target; candidates of other generations never lead.
* Before acting, a candidate confirms that its node's ``ephemeralOwner`` is its own session (a
  node left by an earlier session of the same client must not make it leader: Curator's bug).
* The takeover is ONE transaction: ``SetData(epoch, n+1, expected version)``, the catalog with
  ``deploy_generation = G`` at the version read (a ``Check`` when it already is), ``Check`` of the
  promotion target and of the candidate's own node. A stale leader's write carries
  ``Check(epoch, version-at-its-takeover)``: whichever commits first, the other fails, so a
  takeover and a superseded leader's write can never both succeed.
* The leader's :class:`Leadership` holds ``Fence("epoch", <epoch znode version after takeover>)``;
  every durable write it makes carries it (``Consensus.commit(..., fence=...)``).
* SUSPENDED pauses the leader at once (:meth:`LeaderElection.leadership_guard` raises a
  retryable ``ConnectionLostError``); on reconnection within the same session the candidate node
  and the epoch are re-verified before writes resume. LOST (session expired) and a newer epoch
  end the leadership for good (``FencedError``).
* kazoo state listeners and watch callbacks only enqueue: they must not block nor call ZooKeeper
  (kazoo issues 356 and 381). One worker thread per election applies the events and calls
  ``on_change``."""

from __future__ import annotations

from orchestrator.election.candidacy import ElectionEvent, LeaderElection, fenced_write_guard
from orchestrator.election.epoch import EpochInfo, Leadership, read_epoch
from orchestrator.election.promotion import (
    Promotion,
    promote,
    read_promotion,
    read_promotion_request,
    wait_promoted,
)

__all__ = [
    "ElectionEvent",
    "EpochInfo",
    "LeaderElection",
    "Leadership",
    "Promotion",
    "fenced_write_guard",
    "promote",
    "read_epoch",
    "read_promotion",
    "read_promotion_request",
    "wait_promoted",
]
