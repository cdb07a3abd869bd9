"""The core of a candidacy: its fields, public state and the leadership guard writers consult."""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any, Final

import structlog
from kazoo.client import KazooClient

from catalog.consensus import CONNECTION_ERRORS, Consensus, Create, encode_json
from catalog.errors import CatalogError, ConnectionLostError, FencedError
from orchestrator.election.values import (
    CANDIDATE_PREFIX,
    ElectionEvent,
    Leadership,
    candidate_key,
)

log = structlog.get_logger(__name__)


def candidate_seq(name: str) -> int:
    digits = name[len(CANDIDATE_PREFIX) :]
    return int(digits) if digits.isdigit() else 1 << 62


def session_hex(session_id: int) -> str:
    return f"0x{session_id:x}"


_Item = tuple[str, Any]


# What a worker step may raise without killing the thread: the next event re-reads anyway.
WORKER_ERRORS: Final[tuple[type[BaseException], ...]] = (CatalogError, *CONNECTION_ERRORS)


class CandidateCore:
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
                "session": session_hex(session_id),
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
