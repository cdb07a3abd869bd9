"""Failpoints for rehearsing crashes and lost answers at exact points in real processes.

A process started with ``CATALOG_UPGRADE_CRASH_BEFORE_WRITE=N`` kills itself with SIGKILL right
before its N-th *fenced* ZooKeeper transaction: the N-th durable write it makes as a leader
(every leader write carries the epoch check; a process's other writes -- its status node,
read-only shard creation -- do not count, so N names the same point of a migration on every
run). Nothing is flushed and no handler runs, exactly as if an operator had sent ``kill -9``.

``CATALOG_UPGRADE_LOSE_ANSWER_AFTER_WRITE=N`` lets the N-th fenced write land and then raises
the ConnectionLostError a lost answer produces: the outcome is unknown to the writer although
the write is durable, which is what the write's own identity must resolve.

The failpoints are objects the orchestrator injects into its
:class:`~catalog.consensus.Consensus` (``before_fenced_write``); the durable model itself calls
no failpoint and keeps no state. Scenario files set it with ``crash_before_write`` on a
``start`` step. In the spirit of FoundationDB's simulation failpoints: the crash happens at a
named point, not after a guessed sleep.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping

import attrs
import structlog

from catalog.errors import ConnectionLostError

__all__ = [
    "CRASH_BEFORE_WRITE_ENV",
    "LOSE_ANSWER_AFTER_WRITE_ENV",
    "CrashFailpoint",
    "LostAnswerFailpoint",
    "crash_point",
]

CRASH_BEFORE_WRITE_ENV = "CATALOG_UPGRADE_CRASH_BEFORE_WRITE"
LOSE_ANSWER_AFTER_WRITE_ENV = "CATALOG_UPGRADE_LOSE_ANSWER_AFTER_WRITE"

log = structlog.get_logger(__name__)


def crash_point(
    environ: Mapping[str, str] = os.environ, variable: str = CRASH_BEFORE_WRITE_ENV
) -> int | None:
    """The fenced write a failpoint of ``variable`` acts on (None: no failpoint)."""
    value = environ.get(variable, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 1 else None


@attrs.define
class CrashFailpoint:
    """Counts fenced writes and SIGKILLs this process right before write number ``crash_at``."""

    crash_at: int
    writes: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> CrashFailpoint | None:
        at = crash_point(environ)
        return None if at is None else cls(at)

    def __call__(self, key: str = "") -> None:
        """Count a fenced write (of ``key``, its first key) about to be sent; SIGKILL this
        process if it is the chosen one."""
        with self._lock:
            self.writes += 1
            log.debug("failpoint_fenced_write", write=self.writes, key=key)
            if self.writes < self.crash_at:
                return
        log.warning("failpoint_crash", before_fenced_write=self.writes, key=key)
        for stream in (sys.stdout, sys.stderr):  # the log line above, for whoever investigates
            stream.flush()
        os.kill(os.getpid(), signal.SIGKILL)


@attrs.define
class LostAnswerFailpoint:
    """Counts fenced writes that landed; after write number ``lose_at``, raises the
    ConnectionLostError of a lost answer (once), so the caller cannot know the write landed."""

    lose_at: int
    writes: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] = os.environ
    ) -> LostAnswerFailpoint | None:
        at = crash_point(environ, LOSE_ANSWER_AFTER_WRITE_ENV)
        return None if at is None else cls(at)

    def __call__(self, key: str = "") -> None:
        with self._lock:
            self.writes += 1
            if self.writes != self.lose_at:
                return
        log.warning("failpoint_lost_answer", after_fenced_write=self.writes, key=key)
        raise ConnectionLostError(
            "ZooKeeper did not answer a transaction; its outcome is unknown (failpoint)",
            keys=[key],
            failpoint=LOSE_ANSWER_AFTER_WRITE_ENV,
        )
