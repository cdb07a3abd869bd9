"""Waiting for a ZooKeeper condition on watches: one loop instead of one per caller.

Every wait in the project has the same shape: read what the condition depends on, leaving a
kazoo watch on it; if the condition holds, return; otherwise sleep until a watch fires (or the
deadline passes) and read again. The event is cleared *before* the read, so a change between
the read and the sleep is never missed. A ``safety`` interval re-reads even without a watch
firing, for a watch lost in a reconnection; it is a safety net, not a polling interval.

:func:`wait_until` runs that loop; ``look`` reads with the watch it is given (through
:func:`watched_data`, :func:`watched_children` or any kazoo call taking ``watch=``) and returns
a value when done, or :data:`NOT_YET`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

__all__ = [
    "NOT_YET",
    "NotYet",
    "WaitTimeout",
    "Watch",
    "wait_until",
    "watched_children",
    "watched_data",
]

T = TypeVar("T")

#: A kazoo watch callback (it receives a WatchedEvent, or None when called directly).
Watch = Callable[[Any], None]


class NotYet:
    def __repr__(self) -> str:
        return "NOT_YET"


#: What ``look`` returns while the condition does not hold yet.
NOT_YET: Final = NotYet()


class WaitTimeout(Exception):
    """The deadline passed; ``last`` is what the last look saw (for the caller's message)."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"condition not met within {waited:g} s")
        self.waited = waited


def wait_until(
    look: Callable[[Watch], T | NotYet],
    timeout: float | None,
    *,
    safety: float | None = 5.0,
) -> T:
    """Call ``look(watch)`` until it returns something other than :data:`NOT_YET`.

    Between looks, sleep until ``watch`` fires, at most until the deadline (``timeout`` seconds
    from now; None waits for ever) and at most ``safety`` seconds. Raises :class:`WaitTimeout`
    when the deadline passes; exceptions of ``look`` propagate.
    """
    changed = threading.Event()

    def watch(_event: Any = None) -> None:
        changed.set()

    started = time.monotonic()
    while True:
        changed.clear()  # before the read: a change after it is never missed
        result = look(watch)
        if not isinstance(result, NotYet):
            return result
        remaining = None if timeout is None else started + timeout - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise WaitTimeout(time.monotonic() - started)
        pause = remaining if safety is None else min(safety, remaining or safety)
        changed.wait(pause)


def watched_data(client: KazooClient, path: str, watch: Watch) -> tuple[bytes, ZnodeStat] | None:
    """The node's data and stat, watching it; None when it does not exist (watching for its
    creation: a node created between the two calls is reported by calling ``watch``)."""
    try:
        data, stat = client.get(path, watch=watch)
    except NoNodeError:
        if client.exists(path, watch=watch) is not None:
            watch(None)
        return None
    return bytes(data), stat


def watched_children(client: KazooClient, path: str, watch: Watch) -> list[str] | None:
    """The node's children, watching them; None when the node does not exist (watching for
    its creation)."""
    try:
        return list(client.get_children(path, watch=watch))
    except NoNodeError:
        if client.exists(path, watch=watch) is not None:
            watch(None)
        return None
