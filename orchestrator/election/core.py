"""A candidacy: the state one process's election shares between its collaborators (the takeover
and the worker), its candidate node and the leadership guard writers consult."""

from __future__ import annotations

import os
import socket
import threading
from typing import Final

import structlog
from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from catalog.consensus import CONNECTION_ERRORS, Consensus, Create, encode_json
from catalog.errors import CatalogError, ConnectionLostError, FencedError, LeadershipExpiredError
from orchestrator.election.values import (
    CANDIDATE_PREFIX,
    Leadership,
    candidate_key,
)

log = structlog.get_logger(__name__)


def candidate_seq(name: str) -> int:
    digits = name[len(CANDIDATE_PREFIX) :]
    return int(digits) if digits.isdigit() else 1 << 62


def session_hex(session_id: int) -> str:
    return f"0x{session_id:x}"


# What a worker step may raise without killing the thread: the next event re-reads anyway.
WORKER_ERRORS: Final[tuple[type[BaseException], ...]] = (CatalogError, *CONNECTION_ERRORS)


class Candidacy:
    """One process's candidacy in the election of its generation: what its collaborators share.

    Every field is changed under ``lock`` (the takeover on the caller's thread, the worker on the
    election's thread); ``active`` is set while the session is connected and verified.
    """

    def __init__(
        self,
        consensus: Consensus,
        process_id: str,
        deploy_generation: int,
        release: str,
    ) -> None:
        self.consensus = consensus
        self.process_id = process_id
        self.deploy_generation = deploy_generation
        #: The version of the release this process runs: a takeover binds the generation to it.
        self.release = release
        self.client: KazooClient = consensus.client
        self.lock = threading.RLock()
        self.leadership: Leadership | None = None
        self.candidate: str | None = None  # key of our candidate node
        self.session_id: int | None = None  # the session the candidate belongs to
        # Set while connected and verified; writers check it before every write.
        self.active = threading.Event()
        self.ended_reason: str | None = None  # why the last leadership ended
        self.joined = False
        self.stopped = False
        self.log = log.bind(process_id=process_id, deploy_generation=deploy_generation)

    @property
    def is_leader(self) -> bool:
        return self.leadership is not None

    @property
    def paused(self) -> bool:
        """True while the session is suspended (or lost): no write may start."""
        return not self.active.is_set()

    def leadership_guard(self, timeout: float = 0.0) -> Leadership:
        """The current leadership, if this process may write right now; call before each write.

        Waits up to ``timeout`` seconds for a suspended session to come back, then raises
        ConnectionLostError (retryable; nothing was written). Raises FencedError when this
        process does not lead (never did, stepped down, superseded or its session expired).
        """
        if self.leadership is None:
            raise self.not_leader()
        if not self.active.wait(timeout):
            raise ConnectionLostError(
                "leadership paused: the ZooKeeper session is suspended",
                process_id=self.process_id,
            )
        leadership = self.leadership
        if leadership is None:
            raise self.not_leader()
        return leadership

    def not_leader(self) -> FencedError:
        reason = self.ended_reason or "not_leader"
        kind = LeadershipExpiredError if reason == "session_lost" else FencedError
        return kind(
            f"process {self.process_id} of generation {self.deploy_generation} does not lead "
            f"({reason})",
            process_id=self.process_id,
            deploy_generation=self.deploy_generation,
            reason=reason,
        )

    def join(self) -> None:
        client_id = self.client.client_id
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
        self.candidate = self.consensus.key_of(str(created))
        self.session_id = session_id
        self.active.set()
        self.log.info("election_joined", candidate=self.candidate)

    def own_candidate_stat(self, candidate: str) -> ZnodeStat | None:
        """Our candidate's stat, only if its ephemeralOwner is our current session."""
        try:
            stat = self.client.exists(self.consensus.path(candidate))
        except CONNECTION_ERRORS as exc:
            raise ConnectionLostError(
                f"ZooKeeper did not answer for {candidate}", key=candidate
            ) from exc
        client_id = self.client.client_id
        if stat is None or client_id is None:
            return None
        if stat.ephemeralOwner != client_id[0] or stat.ephemeralOwner != self.session_id:
            self.log.warning(
                "candidate_not_ours",
                candidate=candidate,
                owner=session_hex(stat.ephemeralOwner),
                session=session_hex(int(client_id[0])),
            )
            return None
        return stat

    def end_leadership(self, reason: str) -> bool:
        """Drop leadership (caller holds the lock); True if there was one."""
        had = self.leadership is not None
        self.leadership = None
        if had:
            self.ended_reason = reason
        return had
