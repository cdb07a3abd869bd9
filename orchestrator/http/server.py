"""The HTTP server: the listening socket (a taken port is our error, exit 2), an asyncio event
loop on its own thread holding the connections (:mod:`orchestrator.http.exchange`), and a
bounded pool of worker threads running a WSGI application (the API's: it is handed one).

Threads stay at ``1 + workers`` and memory at a few kilobytes per idle connection however many
clients connect; a connection past ``max_connections`` is answered 503 and closed.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import attrs
import structlog

from catalog.errors import BadInputError, ConfigurationError
from orchestrator.http.exchange import Exchange, ServerLimits, WsgiApp, call_app, refusal

log = structlog.get_logger(__name__)

#: Connections the kernel queues before they are accepted (capped by net.core.somaxconn).
_BACKLOG = 4096
#: File descriptors the process keeps beyond its connections (ZooKeeper, blobs, logs, Spark).
_SPARE_FILES = 1024


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a bind address; BadInputError when malformed."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise BadInputError(
            f"invalid --http address {text!r}: expected HOST:PORT (PORT 0 picks a free port)",
            address=text,
        )
    return host, int(port)


@attrs.define
class HttpServer:
    """The server of ``app``; ``address`` is the bound one once started."""

    app: WsgiApp
    host: str = "127.0.0.1"
    port: int = 0
    # HTTPS when given (orchestrator.http.tls).
    ssl_context: ssl.SSLContext | None = None
    limits: ServerLimits = attrs.field(factory=ServerLimits)
    _bound: tuple[str, int] | None = attrs.field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)
    _stopping: asyncio.Event | None = attrs.field(default=None, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _workers: ThreadPoolExecutor | None = attrs.field(default=None, init=False)
    _open: set[asyncio.Task[Any]] = attrs.field(factory=set, init=False)
    #: Requests being answered (their application call, and a streamed answer to its end).
    _busy: int = attrs.field(default=0, init=False)
    _idle: asyncio.Event | None = attrs.field(default=None, init=False)

    @property
    def address(self) -> str:
        """``host:port`` actually bound (the chosen port when 0 was asked)."""
        host, port = self._bound or (self.host, self.port)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def start(self) -> HttpServer:
        # Bind here, so a taken port is our error, named, before any thread starts.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            listener = socket.create_server((self.host, self.port), family=family, backlog=_BACKLOG)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}",
                address=f"{self.host}:{self.port}",
            ) from exc
        self._bound = listener.getsockname()[:2]
        _raise_file_limit(self.limits.max_connections + _SPARE_FILES)
        self._workers = ThreadPoolExecutor(
            max_workers=self.limits.workers, thread_name_prefix="sidecar-http-worker"
        )
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(listener, ready), name="sidecar-http", daemon=True
        )
        self._thread.start()
        ready.wait()
        log.info(
            "http_serving",
            address=self.address,
            tls=self.ssl_context is not None,
            workers=self.limits.workers,
            max_connections=self.limits.max_connections,
        )
        return self

    def stop(self) -> None:
        """Stop listening, let the requests being answered finish (at most the limits'
        ``drain_timeout``: a read in flight when a leader steps down reaches its last row),
        then close every connection."""
        loop, stopping = self._loop, self._stopping
        if loop is None or stopping is None:
            return
        self._loop = None
        loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(timeout=self.limits.drain_timeout + 5)
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)

    # -- the loop's thread --------------------------------------------------------------------

    def _run(self, listener: socket.socket, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(listener, ready))
        finally:
            loop.close()

    async def _serve(self, listener: socket.socket, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(
            self._connection,
            sock=listener,
            ssl=self.ssl_context,
            ssl_handshake_timeout=self.limits.header_timeout if self.ssl_context else None,
            limit=self.limits.max_header_bytes,
            backlog=_BACKLOG,  # asyncio listens again, with 100 unless told
        )
        self._idle = asyncio.Event()
        self._idle.set()
        ready.set()
        async with server:
            await self._stopping.wait()
            server.close()
            if self._busy:
                log.info("http_draining", requests=self._busy)
                try:
                    await asyncio.wait_for(self._idle.wait(), self.limits.drain_timeout)
                except TimeoutError:
                    log.warning("http_drain_timed_out", requests=self._busy)
            for task in list(self._open):
                task.cancel()
            await asyncio.gather(*self._open, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= self.limits.max_connections:
            log.warning("http_connection_refused", open=len(self._open))
            writer.write(
                refusal(
                    "too-many-connections",
                    f"{len(self._open)} connections are open, the limit "
                    "(--http-max-connections); retry later",
                )
            )
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            exchange = Exchange(
                reader, writer, self.limits, self._call, secure=self.ssl_context is not None,
                answering=self._answering, taking=lambda: self._loop is not None,
            )  # fmt: skip
            await exchange.serve()
        except asyncio.CancelledError:
            writer.close()  # the server stops: end quietly (asyncio logs a task cancelled here)
        finally:
            self._open.discard(task)

    def _answering(self, busy: bool) -> None:
        """A request of some connection begins (True) or is answered (False): what a
        stopping server drains."""
        self._busy += 1 if busy else -1
        if self._idle is not None:
            if self._busy:
                self._idle.clear()
            else:
                self._idle.set()

    async def _call(self, environ: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        status, headers, payload = await loop.run_in_executor(
            self._workers, partial(call_app, self.app, environ)
        )
        if isinstance(payload, bytes):
            return status, headers, payload
        return status, headers, self._pulled(payload)

    async def _pulled(self, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
        """A streamed answer's chunks, each made on a worker thread (never on the loop)."""
        loop = asyncio.get_running_loop()
        ended = False
        try:
            while True:
                chunk = await loop.run_in_executor(self._workers, next, chunks, None)
                if chunk is None:
                    ended = True  # a generator run to its end closed itself
                    return
                yield chunk
        finally:
            close = getattr(chunks, "close", None)
            if close is not None and not ended:
                await loop.run_in_executor(self._workers, close)


def _raise_file_limit(wanted: int) -> None:
    """Lift the soft limit on open files towards ``wanted`` (never past the hard limit), so the
    connection limit, not the default 1,024 descriptors, is what refuses a client."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("open_file_limit_raised", soft=target, was=soft)
