"""Leader election among the processes of the promotion-target generation, with fencing epochs.

Znodes below the environment root (see ``catalog.environment`` for the whole layout)::

    promotion               {"deploy_generation": G, "requested_by", "requested_at", "previous"}
                            the promotion target; only ever raised, never lowered
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
  ``on_change``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from catalog.consensus import (
    CONNECTION_ERRORS,
    Check,
    Consensus,
    Create,
    Fence,
    Op,
    SetData,
    Versioned,
    decode_json,
    encode_json,
)
from catalog.environment import (
    CATALOG_KEY,
    ELECTION_KEY,
    EPOCH_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    CatalogState,
    catalog_write_op,
)
from catalog.errors import (
    EXIT_FENCED,
    EXIT_REFUSED,
    CatalogError,
    ConnectionLostError,
    FencedError,
    MigrationRefusedError,
)
from catalog.retry import CasRetry
from orchestrator.events import record_event

__all__ = [
    "ElectionEvent",
    "EpochInfo",
    "LeaderElection",
    "Leadership",
    "candidate_key",
    "promote",
    "read_epoch",
    "read_promotion",
    "wait_promoted",
]

log = structlog.get_logger(__name__)

CANDIDATE_PREFIX: Final = "n_"

# ElectionEvent kinds. Watches: promotion, epoch, catalog, candidates. Session: suspended,
# resumed, lost (a follower's session expired; it re-joins), rejoined. Leadership ends:
# leadership_lost (session expired), superseded (newer epoch or promotion), stepped_down.
EVENT_KINDS: Final = frozenset(
    {
        "promotion",
        "epoch",
        "catalog",
        "candidates",
        "suspended",
        "resumed",
        "lost",
        "rejoined",
        "leadership_lost",
        "superseded",
        "stepped_down",
    }
)


# --- values ----------------------------------------------------------------------------------


@attrs.frozen
class Leadership:
    """What a leader holds; every durable write it makes carries ``fence``.

    ``guard`` (attached by :class:`LeaderElection`) raises ``ConnectionLostError`` while the
    session is suspended (retryable: ``CasRetry`` waits) and ``FencedError`` once leadership is
    over; call :meth:`check` before each write. A hand-built Leadership has no guard.
    """

    process_id: str
    deploy_generation: int
    epoch: int
    fence: Fence
    guard: Callable[[], object] | None = attrs.field(
        default=None, eq=False, repr=False, kw_only=True
    )

    def check(self) -> None:
        """Raise unless this leadership may write right now (no-op without a guard)."""
        if self.guard is not None:
            self.guard()


@attrs.frozen
class EpochInfo:
    """The epoch znode: who took over last, for which generation, and at which znode version."""

    epoch: int
    leader: str | None
    deploy_generation: int
    session: str | None
    version: int
    host: str | None = None
    pid: int | None = None
    taken_over_at: float | None = None

    @classmethod
    def from_versioned(cls, found: Versioned) -> EpochInfo | None:
        data = found.json()
        if not isinstance(data, dict):
            return None
        return cls(
            epoch=int(data.get("epoch", 0)),
            leader=data.get("leader"),
            deploy_generation=int(data.get("deploy_generation", 0)),
            session=data.get("session"),
            version=found.version,
            host=data.get("host"),
            pid=data.get("pid"),
            taken_over_at=data.get("taken_over_at"),
        )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class ElectionEvent:
    """A change ``on_change`` hears about; fields not concerned by ``kind`` are None."""

    kind: str = attrs.field(validator=attrs.validators.in_(EVENT_KINDS))
    is_leader: bool = False
    promotion: int | None = None
    epoch: EpochInfo | None = None
    catalog_version: str | None = None
    catalog_generation: int | None = None
    candidates: tuple[str, ...] = ()
    reason: str | None = None


# --- reading and setting the promotion target ------------------------------------------------


def candidate_key(deploy_generation: int) -> str:
    return f"{ELECTION_KEY}/{deploy_generation}"


def read_epoch(consensus: Consensus) -> EpochInfo | None:
    """The epoch znode, or None before the first takeover."""
    found = consensus.get(EPOCH_KEY)
    return None if found is None else EpochInfo.from_versioned(found)


def _promotion_of(found: Versioned | None) -> int | None:
    if found is None:
        return None
    data = found.json()
    return int(data["deploy_generation"]) if isinstance(data, dict) else None


def _catalog_generation(found: Versioned | None) -> int | None:
    if found is None or not found.value:
        return None
    data = found.json()
    return int(data["deploy_generation"]) if isinstance(data, dict) else None


def read_promotion(consensus: Consensus) -> int | None:
    """The promotion target generation, or None when nothing was promoted yet."""
    return _promotion_of(consensus.get(PROMOTION_KEY))


def promote(consensus: Consensus, deploy_generation: int, *, requested_by: str) -> None:
    """Set the promotion target to ``deploy_generation`` (idempotent for the current target).

    Refuses (FencedError, exit 3) a target below the catalog's generation or the current target:
    the promotion target only moves up, so a stale ``promote`` can never undo a newer one.
    """

    def attempt() -> bool:
        found = consensus.get_many([CATALOG_KEY, PROMOTION_KEY])
        current = _catalog_generation(found[CATALOG_KEY])
        if current is not None and deploy_generation < current:
            raise FencedError(
                f"cannot promote generation {deploy_generation}: the catalog is already at "
                f"generation {current}",
                deploy_generation=deploy_generation,
                catalog_generation=current,
                suggestion=f"promote generation {current} or higher",
            )
        promoted = found[PROMOTION_KEY]
        target = _promotion_of(promoted)
        if target is not None and deploy_generation < target:
            raise FencedError(
                f"cannot promote generation {deploy_generation}: generation {target} is already "
                f"promoted",
                deploy_generation=deploy_generation,
                promotion_target=target,
                catalog_generation=current,
                suggestion=f"promote generation {target} or higher",
            )
        if target == deploy_generation:
            return False
        value = encode_json(
            {
                "deploy_generation": deploy_generation,
                "requested_by": requested_by,
                "requested_at": time.time(),
                "previous": target,
            }
        )
        if promoted is None:
            consensus.ensure()
            consensus.cas(PROMOTION_KEY, value, -1)
        else:
            consensus.cas(PROMOTION_KEY, value, promoted.version)
        return True

    if CasRetry()(attempt):
        log.info("promoted", deploy_generation=deploy_generation, requested_by=requested_by)
        with contextlib.suppress(ConnectionLostError):  # the log is informational
            record_event(
                consensus,
                "promoted",
                deploy_generation=deploy_generation,
                requested_by=requested_by,
            )


# --- waiting for a promoted generation's leader ----------------------------------------------

FAILED_STATES: Final = frozenset({"failed", "fenced"})
# Errors after which the outcome of a read is unknown but a later look may succeed.
_TRANSIENT: Final[tuple[type[BaseException], ...]] = (ConnectionLostError, *CONNECTION_ERRORS)


def _error_exit_code(error: Any) -> int | None:
    if isinstance(error, Mapping):
        code = error.get("exit_code")
        return int(code) if isinstance(code, int) else None
    return None


def _error_message(error: Any) -> str:
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("error") or json.dumps(dict(error)))
    return str(error)


def _failure(process: Mapping[str, Any], deploy_generation: int) -> CatalogError:
    """The error a waiting ``promote`` reports for a failed process of the promoted generation."""
    error = process.get("error")
    code = _error_exit_code(error)
    message = (
        f"generation {deploy_generation}: process {process.get('id')} "
        f"{process.get('state')}: {_error_message(error) if error else 'no reason given'}"
    )
    details = {"process_id": process.get("id"), "state": process.get("state"), "cause": error}
    if code == EXIT_REFUSED:
        return MigrationRefusedError(message, deploy_generation=deploy_generation, **details)
    if code == EXIT_FENCED or process.get("state") == "fenced":
        return FencedError(message, deploy_generation=deploy_generation, **details)
    return CatalogError(message, deploy_generation=deploy_generation, reason="failed", **details)


def wait_promoted(consensus: Consensus, deploy_generation: int, timeout: float) -> None:
    """Return once generation ``deploy_generation``'s leader finished its migration.

    Done means: the catalog is at that generation, the epoch names a leader of it, and that
    leader's process node says ``serving``. Raises FencedError when a newer generation was
    promoted or took over meanwhile, MigrationRefusedError (exit 4) when the leader failed with a
    refusal, CatalogError when every process of the generation failed, and CatalogError with
    ``reason="timeout"`` (exit 1) when ``timeout`` seconds pass. Driven by ZooKeeper watches on
    the catalog, epoch, promotion and process nodes; no polling loop.
    """
    client = consensus.client
    changed = threading.Event()

    def watcher(_event: WatchedEvent | None) -> None:
        changed.set()

    deadline = time.monotonic() + timeout
    last = "nothing observed yet"
    while True:
        changed.clear()
        try:
            outcome, last = _promotion_progress(consensus, client, deploy_generation, watcher)
        except _TRANSIENT:
            outcome, last = None, "ZooKeeper connection lost; waiting for it to come back"
        if outcome is True:
            return
        if isinstance(outcome, CatalogError):
            raise outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CatalogError(
                f"generation {deploy_generation} did not finish its migration within "
                f"{timeout:g} s: {last}",
                deploy_generation=deploy_generation,
                reason="timeout",
                last_observed=last,
            )
        # A safety net against a watch lost in a reconnection, not a polling interval.
        changed.wait(min(remaining, 5.0))


def _get_watched(
    client: KazooClient, path: str, watcher: Callable[[WatchedEvent | None], None]
) -> bytes | None:
    try:
        data, _stat = client.get(path, watch=watcher)
    except NoNodeError:
        # exists() leaves a watch that fires on creation; a create in between re-reads next turn
        if client.exists(path, watch=watcher) is not None:
            watcher(None)
        return None
    return bytes(data)


def _promotion_progress(
    consensus: Consensus,
    client: KazooClient,
    deploy_generation: int,
    watcher: Callable[[WatchedEvent | None], None],
) -> tuple[bool | CatalogError | None, str]:
    """One look at the environment, leaving watches on everything read."""
    target_data = _get_watched(client, consensus.path(PROMOTION_KEY), watcher)
    target = decode_json(target_data)["deploy_generation"] if target_data else None
    if target is not None and int(target) > deploy_generation:
        return FencedError(
            f"generation {target} was promoted while waiting for generation {deploy_generation}",
            deploy_generation=deploy_generation,
            promotion_target=int(target),
        ), f"generation {target} promoted"
    catalog_data = _get_watched(client, consensus.path(CATALOG_KEY), watcher)
    catalog = CatalogState.decode(catalog_data) if catalog_data else None
    if catalog is not None and catalog.deploy_generation > deploy_generation:
        return FencedError(
            f"the catalog moved to generation {catalog.deploy_generation} while waiting for "
            f"generation {deploy_generation}",
            deploy_generation=deploy_generation,
            catalog_generation=catalog.deploy_generation,
        ), f"catalog at generation {catalog.deploy_generation}"
    epoch_data = _get_watched(client, consensus.path(EPOCH_KEY), watcher)
    epoch = decode_json(epoch_data) if epoch_data else None
    processes = _generation_processes(consensus, client, deploy_generation, watcher)
    leader_id = epoch.get("leader") if isinstance(epoch, dict) else None
    if not isinstance(epoch, dict) or int(epoch.get("deploy_generation", -1)) != deploy_generation:
        if processes and all(p.get("state") in FAILED_STATES for p in processes.values()):
            first = processes[min(processes)]
            return _failure(first, deploy_generation), "every process failed"
        return None, (
            f"no leader of generation {deploy_generation} yet "
            f"({len(processes)} process(es) of it registered)"
        )
    leader = processes.get(str(leader_id))
    if leader is None:
        return None, f"leader {leader_id} of generation {deploy_generation} is not registered"
    state = leader.get("state")
    if state in FAILED_STATES:
        return _failure(leader, deploy_generation), f"leader {leader_id} {state}"
    if (
        catalog is not None
        and catalog.deploy_generation == deploy_generation
        and (state == "serving")
    ):
        return True, f"leader {leader_id} serving"
    phase = leader.get("phase")
    return None, f"leader {leader_id} is {state}" + (f" ({phase})" if phase else "")


def _generation_processes(
    consensus: Consensus,
    client: KazooClient,
    deploy_generation: int,
    watcher: Callable[[WatchedEvent | None], None],
) -> dict[str, dict[str, Any]]:
    base = consensus.path(PROCESSES_KEY)
    try:
        names = client.get_children(base, watch=watcher)
    except NoNodeError:
        if client.exists(base, watch=watcher) is not None:
            watcher(None)
        return {}
    pending = [(name, client.get_async(f"{base}/{name}", watch=watcher)) for name in names]
    out: dict[str, dict[str, Any]] = {}
    for name, result in pending:
        try:
            data, _stat = result.get()
        except NoNodeError:
            continue
        value = decode_json(data)
        if isinstance(value, dict) and value.get("deploy_generation") == deploy_generation:
            out[name] = {"id": name, **value}
    return out


# --- the election ------------------------------------------------------------------------------


def _seq(name: str) -> int:
    digits = name[len(CANDIDATE_PREFIX) :]
    return int(digits) if digits.isdigit() else 1 << 62


def _session_hex(session_id: int) -> str:
    return f"0x{session_id:x}"


_Item = tuple[str, Any]
# What a worker step may raise without killing the thread: the next event re-reads anyway.
_WORKER_ERRORS: Final[tuple[type[BaseException], ...]] = (CatalogError, *CONNECTION_ERRORS)


class LeaderElection:
    """One process's candidacy in the election of its deploy generation.

    ``start`` joins; ``try_take_over`` becomes leader when this process is the lowest candidate
    of the promotion target's generation; ``step_down`` releases leadership at once; ``stop``
    also ends the watches and the worker thread. ``on_change`` runs on the election's worker
    thread (never kazoo's), so it may call ZooKeeper and ``try_take_over``.
    """

    def __init__(
        self,
        consensus: Consensus,
        process_id: str,
        deploy_generation: int,
        *,
        on_change: Callable[[ElectionEvent], None],
    ) -> None:
        self.consensus = consensus
        self.process_id = process_id
        self.deploy_generation = deploy_generation
        self._on_change = on_change
        self._client: KazooClient = consensus.client
        self._lock = threading.RLock()
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._leadership: Leadership | None = None
        self._candidate: str | None = None  # key of our candidate node
        self._session_id: int | None = None  # the session the candidate belongs to
        # Set while connected and verified; writers check it before every write.
        self._active = threading.Event()
        self._ended_reason: str | None = None  # why the last leadership ended
        self._joined = False
        self._stopped = False
        self._log = log.bind(process_id=process_id, deploy_generation=deploy_generation)

    # -- public state ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leadership is not None

    @property
    def leadership(self) -> Leadership | None:
        return self._leadership

    @property
    def paused(self) -> bool:
        """True while the session is suspended (or lost): no write may start."""
        return not self._active.is_set()

    @property
    def candidate(self) -> str | None:
        """Our candidate node's key, while joined."""
        return self._candidate

    def leadership_guard(self, timeout: float = 0.0) -> Leadership:
        """The current leadership, if this process may write right now; call before each write.

        Waits up to ``timeout`` seconds for a suspended session to come back, then raises
        ConnectionLostError (retryable; nothing was written). Raises FencedError when this
        process does not lead (never did, stepped down, superseded or its session expired).
        """
        if self._leadership is None:
            raise self._not_leader()
        if not self._active.wait(timeout):
            raise ConnectionLostError(
                "leadership paused: the ZooKeeper session is suspended",
                process_id=self.process_id,
            )
        leadership = self._leadership
        if leadership is None:
            raise self._not_leader()
        return leadership

    def _not_leader(self) -> FencedError:
        reason = self._ended_reason or "not_leader"
        return FencedError(
            f"process {self.process_id} of generation {self.deploy_generation} does not lead "
            f"({reason})",
            process_id=self.process_id,
            deploy_generation=self.deploy_generation,
            reason=reason,
        )

    # -- lifecycle ------------------------------------------------------------------------

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

    def _join(self) -> None:
        client_id = self._client.client_id
        if client_id is None:
            raise ConnectionLostError("not connected to ZooKeeper: cannot join the election")
        session_id = int(client_id[0])
        base = candidate_key(self.deploy_generation)
        self.consensus.ensure(base)
        value = encode_json(
            {
                "process_id": self.process_id,
                "session": _session_hex(session_id),
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
        )
        (created,) = self.consensus.commit(
            [Create(f"{base}/{CANDIDATE_PREFIX}", value, ephemeral=True, sequence=True)]
        )
        self._candidate = self.consensus.key_of(str(created))
        self._session_id = session_id
        self._active.set()
        self._log.info("election_joined", candidate=self._candidate)

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

    # -- takeover -------------------------------------------------------------------------

    def try_take_over(self, *, bootstrap: bool) -> Leadership | None:
        """Become leader if this process is the lowest candidate of the promotion target.

        Returns the Leadership (the same one when already leading), or None when another
        candidate is first, our generation is not promoted, or the session is suspended. With
        ``bootstrap`` (the environment is empty), an absent promotion target is first set to our
        generation. Raises FencedError when a newer generation is promoted or in the catalog.
        """
        with self._lock:
            if self._leadership is not None:
                return self._leadership
            if self._candidate is None or self._stopped or self.paused:
                return None
            leadership = CasRetry(max_attempts=20, deadline=10.0)(
                lambda: self._take_over_attempt(bootstrap)
            )
            if leadership is None:
                return None
            self._leadership = leadership
            self._ended_reason = None
        self._log.info("took_over", epoch=leadership.epoch, fence_version=leadership.fence.version)
        # The log is informational; a leader superseded at once learns it from its guard.
        with contextlib.suppress(ConnectionLostError, FencedError):
            record_event(
                self.consensus,
                "leader",
                fence=leadership.fence,
                process_id=self.process_id,
                deploy_generation=self.deploy_generation,
                epoch=leadership.epoch,
            )
        return leadership

    def _take_over_attempt(self, bootstrap: bool) -> Leadership | None:
        candidate = self._candidate
        if candidate is None:
            return None
        found = self.consensus.get_many([PROMOTION_KEY, EPOCH_KEY, CATALOG_KEY])
        promotion = found[PROMOTION_KEY]
        catalog_found = found[CATALOG_KEY]
        catalog = (
            CatalogState.decode(catalog_found.value)
            if catalog_found is not None and catalog_found.value
            else None
        )
        target = _promotion_of(promotion)
        if target is None:
            if not (bootstrap and catalog is None):
                return None
            # Bootstrap of an empty environment: promote ourselves first (a CAS create; a
            # concurrent bootstrapper's create wins and this attempt re-reads).
            self.consensus.cas(
                PROMOTION_KEY,
                encode_json(
                    {
                        "deploy_generation": self.deploy_generation,
                        "requested_by": f"bootstrap:{self.process_id}",
                        "requested_at": time.time(),
                        "previous": None,
                    }
                ),
                -1,
            )
            promotion = self.consensus.get(PROMOTION_KEY)
            target = _promotion_of(promotion)
        if target is None or promotion is None:
            return None
        if target > self.deploy_generation:
            raise FencedError(
                f"generation {target} is promoted; generation {self.deploy_generation} can no "
                "longer lead",
                deploy_generation=self.deploy_generation,
                promotion_target=target,
            )
        if target < self.deploy_generation:
            return None
        if catalog is not None and catalog.deploy_generation > self.deploy_generation:
            raise FencedError(
                f"the catalog is at generation {catalog.deploy_generation}; generation "
                f"{self.deploy_generation} is fenced",
                deploy_generation=self.deploy_generation,
                catalog_generation=catalog.deploy_generation,
            )
        names = self.consensus.children(candidate_key(self.deploy_generation))
        own = candidate.rsplit("/", 1)[-1]
        if not names or min(names, key=_seq) != own:
            return None
        stat = self._own_candidate_stat(candidate)
        if stat is None:
            return None
        epoch_found = found[EPOCH_KEY]
        previous = EpochInfo.from_versioned(epoch_found) if epoch_found is not None else None
        assert self._session_id is not None
        if (
            previous is not None
            and previous.leader == self.process_id
            and previous.session == _session_hex(self._session_id)
            and previous.deploy_generation == self.deploy_generation
            and (catalog is None or catalog.deploy_generation == self.deploy_generation)
        ):
            # Our own takeover landed but its answer was lost (a retried attempt): adopt it.
            return self._leadership_at(previous.epoch, previous.version)
        number = (previous.epoch if previous is not None else 0) + 1
        epoch_value = encode_json(
            {
                "epoch": number,
                "leader": self.process_id,
                "deploy_generation": self.deploy_generation,
                "session": _session_hex(self._session_id),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "taken_over_at": time.time(),
            }
        )
        ops: list[Op] = [
            Create(EPOCH_KEY, epoch_value)
            if epoch_found is None
            else SetData(EPOCH_KEY, epoch_value, epoch_found.version)
        ]
        if catalog is not None and catalog_found is not None:
            if catalog.deploy_generation == self.deploy_generation:
                ops.append(Check(CATALOG_KEY, catalog_found.version))
            else:
                moved = attrs.evolve(catalog, deploy_generation=self.deploy_generation)
                ops.append(catalog_write_op(moved, catalog_found.version))
        ops.append(Check(PROMOTION_KEY, promotion.version))
        ops.append(Check(candidate, stat.version))
        results = self.consensus.commit(ops)
        version = 0 if epoch_found is None else int(results[0].version)
        return self._leadership_at(number, version)

    def _leadership_at(self, epoch: int, version: int) -> Leadership:
        return Leadership(
            process_id=self.process_id,
            deploy_generation=self.deploy_generation,
            epoch=epoch,
            fence=Fence(EPOCH_KEY, version),
            guard=self.leadership_guard,
        )

    def _own_candidate_stat(self, candidate: str) -> ZnodeStat | None:
        """Our candidate's stat, only if its ephemeralOwner is our current session."""
        try:
            stat = self._client.exists(self.consensus.path(candidate))
        except CONNECTION_ERRORS as exc:
            raise ConnectionLostError(
                f"ZooKeeper did not answer for {candidate}", key=candidate
            ) from exc
        client_id = self._client.client_id
        if stat is None or client_id is None:
            return None
        if stat.ephemeralOwner != client_id[0] or stat.ephemeralOwner != self._session_id:
            self._log.warning(
                "candidate_not_ours",
                candidate=candidate,
                owner=_session_hex(stat.ephemeralOwner),
                session=_session_hex(int(client_id[0])),
            )
            return None
        return stat

    def _end_leadership(self, reason: str) -> bool:
        """Drop leadership (caller holds the lock); True if there was one."""
        had = self._leadership is not None
        self._leadership = None
        if had:
            self._ended_reason = reason
        return had

    # -- listener and watches: enqueue only -------------------------------------------------

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: flip the pause flag (no I/O) and hand over.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._active.clear()
        self._queue.put(("state", state))

    def _data_watch(self, kind: str) -> Callable[..., bool]:
        def callback(
            data: bytes | None, stat: ZnodeStat | None, _event: WatchedEvent | None = None
        ) -> bool:
            if self._stopped:
                return False  # ends kazoo's DataWatch
            self._queue.put((kind, (data, None if stat is None else stat.version)))
            return True

        return callback

    def _children_watch(self, children: list[str]) -> bool:
        if self._stopped:
            return False
        self._queue.put(("candidates", tuple(sorted(children, key=_seq))))
        return True

    # -- the worker -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kind, payload = item
            try:
                events = self._apply(kind, payload)
            except _WORKER_ERRORS as exc:
                self._log.warning("election_event_failed", kind=kind, error=repr(exc))
                continue
            for event in events:
                self._notify(event)

    def _notify(self, event: ElectionEvent) -> None:
        if self._stopped and event.kind != "stepped_down":
            return
        try:
            self._on_change(event)
        except Exception:  # a faulty handler must not kill the election's only thread
            self._log.exception("on_change_failed", kind=event.kind)

    def _apply(self, kind: str, payload: Any) -> list[ElectionEvent]:
        if kind == "notify":
            return [payload]
        with self._lock:
            if self._stopped:
                return []
            if kind == "state":
                return self._apply_state(payload)
            if kind == "candidates":
                return [self._event("candidates", candidates=payload)]
            data, version = payload
            if kind == "promotion":
                return self._apply_promotion(data, version)
            if kind == "epoch":
                return self._apply_epoch(data, version)
            return self._apply_catalog(data)

    def _event(self, kind: str, **fields: Any) -> ElectionEvent:
        return ElectionEvent(kind, is_leader=self._leadership is not None, **fields)

    def _apply_state(self, state: str) -> list[ElectionEvent]:
        if state == KazooState.SUSPENDED:
            self._log.warning("session_suspended", leader=self.is_leader)
            return [self._event("suspended")]
        if state == KazooState.LOST:
            # The session expired: its ephemeral candidate is gone and someone else may lead.
            self._candidate = None
            if self._end_leadership("session_lost"):
                self._joined = False
                self._log.error("leadership_lost", reason="session_lost")
                return [self._event("leadership_lost", reason="session_lost")]
            self._log.warning("session_lost")
            return [self._event("lost", reason="session_lost")]
        # CONNECTED
        client_id = self._client.client_id
        if client_id is None:
            return []
        if self._candidate is None:
            if self._joined and self._leadership is None:
                self._join()  # a follower whose session expired re-joins at the back
                return [self._event("rejoined")]
            return []
        leadership = self._leadership
        if leadership is not None and not self._still_leading(leadership):
            self._end_leadership("superseded")
            self._log.error("leadership_lost", reason="superseded")
            return [self._event("superseded", reason="superseded")]
        self._active.set()
        self._log.info("session_resumed", leader=self.is_leader)
        return [self._event("resumed")]

    def _still_leading(self, leadership: Leadership) -> bool:
        """After a reconnection: our candidate is ours and nobody took over since."""
        if self._candidate is None or self._own_candidate_stat(self._candidate) is None:
            return False
        current = read_epoch(self.consensus)
        return current is not None and current.version == leadership.fence.version

    def _apply_promotion(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        found = None if data is None or version is None else Versioned(data, version)
        target = _promotion_of(found)
        events = [self._event("promotion", promotion=target)]
        if target is not None and target > self.deploy_generation and self._leadership is not None:
            self._release("superseded")
            events.append(self._event("superseded", promotion=target, reason="promoted"))
        return events

    def _apply_epoch(self, data: bytes | None, version: int | None) -> list[ElectionEvent]:
        info = (
            None
            if data is None or version is None
            else EpochInfo.from_versioned(Versioned(data, version))
        )
        events = [self._event("epoch", epoch=info)]
        leadership = self._leadership
        # Epoch znode versions only grow, so a late event about an older version is harmless.
        if leadership is not None and info is not None and info.version > leadership.fence.version:
            self._release("superseded")
            events.append(self._event("superseded", epoch=info, reason="epoch"))
        return events

    def _apply_catalog(self, data: bytes | None) -> list[ElectionEvent]:
        value = decode_json(data) if data else None
        if not isinstance(value, dict):
            return [self._event("catalog")]
        return [
            self._event(
                "catalog",
                catalog_version=value.get("version"),
                catalog_generation=value.get("deploy_generation"),
            )
        ]

    def _release(self, reason: str) -> None:
        """End leadership for good and leave the election (caller holds the lock)."""
        self._end_leadership(reason)
        self._joined = False
        candidate, self._candidate = self._candidate, None
        self._log.warning("leadership_lost", reason=reason)
        if candidate is not None:
            with contextlib.suppress(NoNodeError, *CONNECTION_ERRORS):
                self._client.delete(self.consensus.path(candidate))
