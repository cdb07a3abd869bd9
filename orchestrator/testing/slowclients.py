"""Idle and slow clients held against an HTTP server, as an attacker or a crowd of stuck clients
would: for the security test and the server benchmark.

An *idle* client connects and sends nothing. A *slow* client (a slowloris) sends a request line,
then one header line every ``interval`` seconds, never ending its headers. :meth:`outcomes` tells
what each got from the server: an answer's status, ``closed`` without one, or ``open``.
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import socket
import threading
import time

import attrs

#: What a slow client starts with: a write, so a server that reads it all would write.
SLOW_REQUEST_LINE = b"POST /append?collection=slow.loris HTTP/1.1\r\n"


@attrs.define
class SlowClients:
    """``idle`` plus ``slow`` connections to ``host:port`` while in a ``with`` block."""

    host: str
    port: int
    idle: int
    slow: int
    interval: float = 1.0
    _idle: list[socket.socket] = attrs.field(factory=list, init=False)
    _slow: list[socket.socket] = attrs.field(factory=list, init=False)
    _got: dict[socket.socket, bytes] = attrs.field(factory=dict, init=False)
    _stop: threading.Event = attrs.field(factory=threading.Event, init=False)
    _trickler: threading.Thread | None = attrs.field(default=None, init=False)

    def __enter__(self) -> SlowClients:
        for held, count in ((self._idle, self.idle), (self._slow, self.slow)):
            for _ in range(count):
                sock = socket.create_connection((self.host, self.port), timeout=10)
                sock.setblocking(False)
                held.append(sock)
        for sock in self._slow:
            sock.send(SLOW_REQUEST_LINE)
        self._trickler = threading.Thread(target=self._trickle, name="slowloris", daemon=True)
        self._trickler.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._trickler is not None:
            self._trickler.join()
        for sock in self._idle + self._slow:
            sock.close()

    def _trickle(self) -> None:
        line = 0
        while not self._stop.wait(self.interval):
            line += 1
            for sock in self._slow:
                with contextlib.suppress(OSError):  # closed by the server: what it should do
                    sock.send(b"X-Slow-%d: 1\r\n" % line)

    def outcomes(self) -> dict[str, collections.Counter[str]]:
        """For ``idle`` and ``slow`` clients: how many got each status, ``closed`` (the server
        hung up without an answer) or stay ``open``, reading what arrived so far."""
        selector = selectors.DefaultSelector()
        for sock in self._idle + self._slow:
            selector.register(sock, selectors.EVENT_READ, sock)
        deadline = time.monotonic() + 0.2
        while (left := deadline - time.monotonic()) > 0:
            ready = selector.select(left)
            if not ready:
                break
            for key, _ in ready:
                sock = key.data
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                self._got[sock] = self._got.get(sock, b"") + (data or b"\0closed")
                if not data:
                    selector.unregister(sock)
        selector.close()
        return {
            "idle": collections.Counter(self._outcome(sock) for sock in self._idle),
            "slow": collections.Counter(self._outcome(sock) for sock in self._slow),
        }

    def _outcome(self, sock: socket.socket) -> str:
        got = self._got.get(sock, b"")
        if got.startswith(b"HTTP/"):
            return got.split(b" ", 2)[1].decode("ascii")
        return "closed" if got.endswith(b"\0closed") else "open"
