"""Clients that follow the leader across a cut-over, as an integrator's would: writers
appending one row at a time under keys of their own, and a reader, each through a typed
:class:`~catalog_client.SidecarClient` given every sidecar's URL. Every answer is timed; what
the client handled on its own is in its ``detours``; what reached the caller is an error.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from catalog_client import SidecarClient


class FollowingClients:
    """``writers`` threads appending ``row(n)`` to ``collection`` (keys ``follow-<n>``, ``n``
    from ``first``) and one thread reading ``read_collection``, until :meth:`stop`."""

    def __init__(
        self,
        urls: Sequence[str],
        collection: str,
        read_collection: str,
        row: Callable[[int], dict[str, Any]],
        *,
        writers: int = 4,
        first: int = 0,
        token: str | None = None,
    ) -> None:
        def client() -> SidecarClient:
            return SidecarClient(list(urls), token=token, timeout=30, retry_deadline=60)

        self._collection, self._read_collection, self._row = collection, read_collection, row
        self._writers = [client() for _ in range(writers)]
        self._reader = client()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = first
        #: Row number -> when its append was acknowledged (monotonic clock).
        self.acked: dict[int, float] = {}
        #: (asked, answered) of each read answered.
        self.reads: list[tuple[float, float]] = []
        #: What reached a caller: any of these is a failure of the client, or of the cut-over.
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._write, args=(c,), daemon=True) for c in self._writers
        ] + [threading.Thread(target=self._read, daemon=True)]

    def start(self) -> FollowingClients:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    @property
    def next_row(self) -> int:
        """The first row number not handed out yet."""
        return self._next

    def detours(self) -> Counter[str]:
        """Every client's detours, added up."""
        total: Counter[str] = Counter()
        for client in (*self._writers, self._reader):
            total.update(client.detours)
        return total

    def read_detours(self) -> Counter[str]:
        """The reader's detours alone (a refusal the writers meet, as ``fenced``, may be one
        a read should not)."""
        return Counter(self._reader.detours)

    def _write(self, client: SidecarClient) -> None:
        while not self._stop.is_set():
            with self._lock:
                n, self._next = self._next, self._next + 1
            append = functools.partial(
                client.append, self._collection, [self._row(n)], key=f"follow-{n}"
            )
            if self._call(append):
                with self._lock:
                    self.acked[n] = time.monotonic()

    def _read(self) -> None:
        while not self._stop.is_set():
            asked = time.monotonic()
            if self._call(lambda: self._reader.read(self._read_collection)):
                self.reads.append((asked, time.monotonic()))

    def _call(self, call: Callable[[], object]) -> bool:
        try:
            call()
        except Exception as exc:  # what a caller would see: recorded, and the load stops
            self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.set()
            return False
        return True


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of ``[start, end]`` with none of ``times`` (seconds)."""
    marks = sorted([start, *(t for t in times if start <= t <= end), end])
    return max(b - a for a, b in itertools.pairwise(marks))
