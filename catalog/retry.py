"""The one retry helper for read-then-CAS attempts.

Like kazoo's ``KazooRetry``, the retryable errors are data and the sleep is injectable; it keeps
apart the three outcomes of a compare-and-set: a lost race (re-read and retry), an unknown
outcome (retry an attempt that recognises its own earlier write), and fenced (never retry).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import attrs
import structlog

from catalog.errors import ConnectionLostError, VersionMismatchError

__all__ = ["CasRetry"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

@attrs.define
class CasRetry:
    """Runs a read-then-CAS attempt until it succeeds, separating the three kinds of failure.

    * ``VersionMismatchError`` (a race was lost): back off a little and run the attempt again; the
      attempt re-reads, so it sees the winner's write;
    * ``ConnectionLostError`` (outcome unknown): wait for the connection and run the attempt again,
      which must recognise its own earlier write (idempotence by reading first);
    * ``FencedError`` and everything else: raised at once, never retried.

    Like kazoo's ``KazooRetry``, the retryable errors are data and sleep is injectable.
    """

    RETRYABLE: tuple[type[Exception], ...] = (VersionMismatchError, ConnectionLostError)

    max_attempts: int = 50
    deadline: float = 60.0
    base_delay: float = 0.005
    max_delay: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    on_retry: Callable[[Exception], None] | None = None
    retries: int = 0

    def __call__(self, attempt: Callable[[], T]) -> T:
        started = time.monotonic()
        delay = self.base_delay
        for number in range(1, self.max_attempts + 1):
            try:
                return attempt()
            except self.RETRYABLE as exc:
                self.retries += 1
                if self.on_retry is not None:
                    self.on_retry(exc)
                if number == self.max_attempts or time.monotonic() - started > self.deadline:
                    raise
                log.debug("cas_retry", attempt=number, error=type(exc).__name__)
                self.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self.max_delay)
        raise AssertionError("unreachable")  # pragma: no cover
