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

__all__ = ["CasRetry", "Retry"]

log = structlog.get_logger(__name__)

#: The jitter's own generator: a retry never moves the process's global ``random`` state, which
#: a caller may have seeded (a simulation, or Hypothesis drawing an example in another thread).
_jitter = random.Random()

T = TypeVar("T")


@attrs.define
class Retry:
    """Runs an attempt until it succeeds or a non-retryable error ends it.

    ``retryable`` (the error types) and ``should_retry`` (a look at the error, which may also
    refresh what the next attempt reads, e.g. a shard state that moved) are data, like kazoo's
    ``KazooRetry``; the sleep is injectable. Backoff doubles from ``base_delay`` to
    ``max_delay`` with jitter; the last error is raised after ``max_attempts`` or ``deadline``.
    """

    retryable: tuple[type[Exception], ...] = ()
    max_attempts: int = 50
    deadline: float | None = 60.0
    base_delay: float = 0.005
    max_delay: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    on_retry: Callable[[Exception], None] | None = None
    should_retry: Callable[[Exception], bool] | None = None
    retries: int = 0

    def __call__(self, attempt: Callable[[], T]) -> T:
        started = time.monotonic()
        delay = self.base_delay
        for number in range(1, self.max_attempts + 1):
            try:
                return attempt()
            except self.retryable as exc:
                last = number == self.max_attempts or (
                    self.deadline is not None and time.monotonic() - started > self.deadline
                )
                if not last and self.should_retry is not None and not self.should_retry(exc):
                    raise
                self.retries += 1  # every retryable failure counts, the last one too
                if self.on_retry is not None:
                    self.on_retry(exc)
                if last:
                    raise
                log.debug("retry", attempt=number, error=type(exc).__name__)
                if delay > 0:
                    self.sleep(delay * (0.5 + _jitter.random()))
                delay = min(delay * 2, self.max_delay)
        raise AssertionError("unreachable")  # pragma: no cover


def cas_retryable() -> tuple[type[Exception], ...]:
    return (VersionMismatchError, ConnectionLostError)


@attrs.define
class CasRetry(Retry):
    """The retry of a read-then-CAS attempt, separating the three kinds of failure.

    * ``VersionMismatchError`` (a race was lost): back off a little and run the attempt again; the
      attempt re-reads, so it sees the winner's write;
    * ``ConnectionLostError`` (outcome unknown): wait for the connection and run the attempt again,
      which must recognise its own earlier write (idempotence by reading first);
    * ``FencedError`` and everything else: raised at once, never retried.
    """

    retryable: tuple[type[Exception], ...] = attrs.field(factory=cas_retryable)
