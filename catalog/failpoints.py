"""Crash failpoints for rehearsing crashes at exact points in real processes.

A process started with ``CATALOG_UPGRADE_CRASH_BEFORE_WRITE=N`` kills itself with SIGKILL right
before its N-th *fenced* ZooKeeper transaction: the N-th durable write it makes as a leader
(every leader write carries the epoch check; a process's other writes -- its status node,
read-only shard creation -- do not count, so N names the same point of a migration on every
run). Nothing is flushed and no handler runs, exactly as if an operator had sent ``kill -9``.

Scenario files use it through ``crash_before_write`` of a ``start`` step; unset (the normal
case) it costs one integer comparison per fenced write. In the spirit of FoundationDB's
simulation failpoints: the crash happens at a named point, not after a guessed sleep.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import structlog

__all__ = ["CRASH_BEFORE_WRITE_ENV", "before_fenced_write", "crash_point"]

CRASH_BEFORE_WRITE_ENV = "CATALOG_UPGRADE_CRASH_BEFORE_WRITE"

log = structlog.get_logger(__name__)
_lock = threading.Lock()
_writes = 0


def crash_point() -> int | None:
    """The fenced write this process dies before (None: no failpoint), from the environment."""
    value = os.environ.get(CRASH_BEFORE_WRITE_ENV, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 1 else None


_CRASH_AT = crash_point()


def before_fenced_write(key: str = "") -> None:
    """Count a fenced write (of ``key``, its first key) about to be sent; SIGKILL this process
    if it is the chosen one."""
    global _writes
    if _CRASH_AT is None:
        return
    with _lock:
        _writes += 1
        log.debug("failpoint_fenced_write", write=_writes, key=key)
        if _writes < _CRASH_AT:
            return
    log.warning("failpoint_crash", before_fenced_write=_writes, key=key)
    for stream in (sys.stdout, sys.stderr):  # the log line above, for whoever investigates
        stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
