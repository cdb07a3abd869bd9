"""One HTTP/1.1 connection of the server: requests read under deadlines, handed whole to
the WSGI application on a worker thread, answers written back.

h11 parses and frames; this module decides *when*. A request is read completely on the event loop
(headers within ``header_timeout`` of its first byte, the body within ``body_timeout`` of the
headers, at most ``max_body + 1`` bytes of it, spooled to disk past 1 MiB) before a worker thread
sees it, so a slow or idle client holds a socket, never a thread. A connection with no request under
way closes after ``idle_timeout``. Refusals of the server itself (a malformed request, a request
too slow, too many connections) answer the API's JSON error body and close.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import IO, Any
from urllib.parse import unquote_to_bytes, urlsplit

import attrs
import h11
import structlog

from orchestrator.http.refusals import HttpError, json_response

log = structlog.get_logger(__name__)

WsgiApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
#: An application's answer: status, headers, and its whole body, or (a streamed response:
#: no Content-Length) its chunks as they come.
Answer = tuple[int, list[tuple[str, str]], bytes | Iterator[bytes]]

#: The largest request body read, chunked or not (``--http-max-body``): 413 past it, and
#: reading stops there.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: The most rows one append may carry, in any format (``--http-max-append-rows``): 413 past it.
MAX_APPEND_ROWS = 1_000_000
#: The WSGI environ key under which the server says a body passed ``--http-max-body``: the
#: server alone enforces the limit (it stops reading there), the application answers the 413.
BODY_LIMIT_KEY = "catalog_upgrade.body_limit_passed"

#: Bytes asked of the socket per read.
READ_SIZE = 1 << 16
#: A body is kept in memory up to this size, then spooled to a temporary file.
SPOOL_BYTES = 1 << 20
#: After a refusal, how long the rest of what the client sends is read and dropped before the
#: connection closes (and how much of it at most): closed with unread input, the socket would
#: answer with a reset that can discard the refusal before the client reads it.
LINGER_SECONDS = 1.0
LINGER_BYTES = 1 << 20
#: Headers this module sets itself (framing) or never passes on.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})


@attrs.frozen
class ServerLimits:
    """What one client may hold of the server (``sidecar --http-*``; docs/design-contract.md)."""

    #: Worker threads running the application (an append waiting for its group commit holds
    #: one); requests beyond them wait on the loop.
    workers: int = 32
    #: Open connections; one more is answered 503 and closed.
    max_connections: int = 2048
    #: Seconds a connection may wait, between requests, before sending one.
    idle_timeout: float = 75.0
    #: Seconds from a request's first byte to the end of its headers (a slowloris's limit).
    header_timeout: float = 10.0
    #: Seconds from the end of the headers to the end of the body.
    body_timeout: float = 60.0
    #: Seconds a client may take to take in an answer.
    write_timeout: float = 30.0
    #: Largest body read (the application answers 413 past it); reading stops there.
    max_body: int = MAX_BODY_BYTES
    #: Largest request line plus headers (431 past it).
    max_header_bytes: int = 64 * 1024
    #: Most rows one append may carry, in any format (413 past it, counted while parsing).
    max_append_rows: int = MAX_APPEND_ROWS
    #: Seconds a stopping server lets the requests it is answering finish (a read streaming
    #: its rows, an append waiting for its commit) before it closes their connections.
    drain_timeout: float = 10.0


def refusal(error: str, message: str) -> bytes:
    """A complete ``Connection: close`` answer in the API's JSON error shape, for the refusals
    the server makes before a request reaches the application."""
    refused = HttpError(error, message)
    status = refused.status
    response = json_response(status, refused.body)
    head = [f"HTTP/1.1 {status.value} {status.phrase}"]
    head += [f"{name}: {value}" for name, value in response.headers.items()]
    head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.get_data()


@attrs.define
class Exchange:
    """The requests of one connection, in turn; :meth:`serve` returns when it closes."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    limits: ServerLimits
    #: Runs the application on a worker thread: an environ in, (status, headers, body) out.
    call: Callable[[dict[str, Any]], Any]
    secure: bool = False
    #: Told when a request begins (True) and when it is answered or dropped (False).
    answering: Callable[[bool], None] = lambda _busy: None
    #: Whether the server still takes requests (False: stopping, it drains those it has).
    taking: Callable[[], bool] = lambda: True
    _conn: h11.Connection = attrs.field(init=False)
    _loop: asyncio.AbstractEventLoop = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._conn = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes
        )
        self._loop = asyncio.get_running_loop()

    async def serve(self) -> None:
        try:
            while await self._one():
                self._conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            error = "headers-too-large" if exc.error_status_hint == 431 else "bad-request"
            await self._refuse(error, f"malformed HTTP request: {exc}")
        except TimeoutError:
            await self._refuse(
                "request-timeout",
                f"the request did not arrive within {self.limits.header_timeout:g} s (headers) "
                f"and {self.limits.body_timeout:g} s (body)",
            )
        except (ConnectionError, h11.LocalProtocolError):
            pass  # the client went away, or its request cannot be answered any more
        finally:
            self.writer.close()

    async def _one(self) -> bool:
        """Read one request, answer it; whether the connection may carry another."""
        request = await self._request()
        if request is None:
            return False
        if not self.taking():
            await self._refuse("stopping", "the process is stopping: ask another sidecar")
            return False
        self.answering(True)
        try:
            return await self._answered(request)
        finally:
            self.answering(False)

    async def _answered(self, request: h11.Request) -> bool:
        """Answer ``request``; whether the connection may carry another."""
        unacceptable = _unacceptable(request, self.limits.max_header_bytes)
        if unacceptable is not None:
            await self._refuse(*unacceptable)
            return False
        deadline = self._loop.time() + self.limits.body_timeout
        body, length, complete = await self._body(request, deadline)
        environ = self._environ(request, body, length)
        if not complete:  # past the limit: the application refuses it, whatever it reads
            environ[BODY_LIMIT_KEY] = self.limits.max_body
        try:
            status, headers, payload = await self.call(environ)
        finally:
            body.close()
        if isinstance(payload, bytes):
            await self._answer(status, headers, payload, complete)
        else:
            await self._stream(status, headers, payload, complete)
        if not complete:  # the body past the limit is still coming: the answer must arrive
            await self._linger()
        return self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE

    async def _request(self) -> h11.Request | None:
        """The next request's head, or None when the client closed or stayed idle."""
        if not self._conn.trailing_data[0]:
            try:
                async with asyncio.timeout(self.limits.idle_timeout):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:
                return None
            if not data:
                return None
            self._conn.receive_data(data)
        event = await self._next(self._loop.time() + self.limits.header_timeout)
        return event if isinstance(event, h11.Request) else None

    async def _body(self, request: h11.Request, deadline: float) -> tuple[IO[bytes], int, bool]:
        """The body, spooled, up to ``max_body + 1`` bytes; its length; whether it was read to
        its end. A declared length past the limit is not read at all: the application refuses
        it by the header."""
        spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the caller closes it)
        declared = _declared_length(request)
        if declared is not None and declared > self.limits.max_body:
            return spool, declared, False
        if self._conn.they_are_waiting_for_100_continue:
            self.writer.write(
                self._conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
            )
        total = 0
        while True:
            event = await self._next(deadline)
            if isinstance(event, h11.Data):
                spool.write(event.data)
                total += len(event.data)
                if total > self.limits.max_body:
                    break
            elif isinstance(event, h11.EndOfMessage):
                spool.seek(0)
                return spool, total, True
            else:
                raise ConnectionError("closed mid-body")
        spool.seek(0)
        return spool, total, False

    async def _next(self, deadline: float) -> Any:
        while True:
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):  # no task per read, unlike wait_for
                data = await self.reader.read(READ_SIZE)
            self._conn.receive_data(data)

    def _environ(self, request: h11.Request, body: IO[bytes], length: int) -> dict[str, Any]:
        target = request.target
        if not target.startswith(b"/"):  # absolute form: http://host/path?query
            parts = urlsplit(target)
            target = (parts.path or b"/") + (b"?" + parts.query if parts.query else b"")
        path, _, query = target.partition(b"?")
        sockname = self.writer.get_extra_info("sockname") or ("", 0)
        peer = self.writer.get_extra_info("peername") or ("", 0)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method.decode("ascii"),
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_NAME": str(sockname[0]),
            "SERVER_PORT": str(sockname[1]),
            "SERVER_PROTOCOL": f"HTTP/{request.http_version.decode('ascii')}",
            "REMOTE_ADDR": str(peer[0]),
            "REMOTE_PORT": str(peer[1]),
            "CONTENT_LENGTH": str(length),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self.secure else "http",
            "wsgi.input": body,
            "wsgi.input_terminated": True,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for raw_name, raw_value in request.headers:
            if b"_" in raw_name:  # Content_Length must not pass for Content-Length
                continue
            name = raw_name.decode("latin-1").upper().replace("-", "_")
            value = raw_value.decode("latin-1")
            if name == "CONTENT_LENGTH":
                continue  # the length read, set above
            key = name if name == "CONTENT_TYPE" else f"HTTP_{name}"
            environ[key] = f"{environ[key]},{value}" if key in environ else value
        return environ

    async def _answer(
        self, status: int, headers: list[tuple[str, str]], payload: bytes, complete: bool
    ) -> None:
        fields = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in headers
            if name.lower().encode("latin-1") not in _HOP_BY_HOP
        ]
        length = next((v for n, v in headers if n.lower() == "content-length"), len(payload))
        fields.append((b"content-length", str(length).encode("ascii")))
        if not complete:  # the rest of the body stays unread: no next request on this one
            fields.append((b"connection", b"close"))
        data = self._conn.send(h11.Response(status_code=status, headers=fields)) or b""
        if payload:
            data += self._conn.send(h11.Data(data=payload)) or b""
        data += self._conn.send(h11.EndOfMessage()) or b""
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size():  # not all sent at once: wait for it
            async with asyncio.timeout(self.limits.write_timeout):
                await self.writer.drain()

    async def _stream(
        self,
        status: int,
        headers: list[tuple[str, str]],
        chunks: AsyncIterator[bytes],
        complete: bool,
    ) -> None:
        """A streamed answer: chunked (HTTP/1.1; HTTP/1.0 ends it by closing), each chunk
        written and drained before the next is asked for, so the process holds one at a
        time and a client that stops reading is dropped after the write timeout."""
        fields = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in headers
            if name.lower().encode("latin-1") not in _HOP_BY_HOP
        ]
        if not complete:
            fields.append((b"connection", b"close"))
        self.writer.write(self._conn.send(h11.Response(status_code=status, headers=fields)) or b"")
        try:
            async for chunk in chunks:
                if chunk:
                    self.writer.write(self._conn.send(h11.Data(data=chunk)) or b"")
                    async with asyncio.timeout(self.limits.write_timeout):
                        await self.writer.drain()
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
        self.writer.write(self._conn.send(h11.EndOfMessage()) or b"")
        async with asyncio.timeout(self.limits.write_timeout):
            await self.writer.drain()

    async def _refuse(self, error: str, message: str) -> None:
        if self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return  # an answer is under way: closing is all that is left
        log.info("http_request_refused", error=error)
        try:
            self.writer.write(refusal(error, message))
            async with asyncio.timeout(self.limits.write_timeout):
                await self.writer.drain()
            await self._linger()
        except (ConnectionError, TimeoutError):
            pass

    async def _linger(self) -> None:
        """A lingering close: end our side (the client reads the refusal, then the end), and
        drop what it still sends for a moment, so the close resets nothing unread."""
        if not self.writer.can_write_eof():  # TLS: close_notify ends it; nothing to linger
            return
        dropped = 0
        try:
            self.writer.write_eof()
            async with asyncio.timeout(LINGER_SECONDS):
                while dropped < LINGER_BYTES and (data := await self.reader.read(READ_SIZE)):
                    dropped += len(data)
        except TimeoutError:
            pass
        except OSError as exc:  # the peer went away first (ENOTCONN, a reset): nothing to end
            log.debug("http_peer_gone_while_closing", error=type(exc).__name__, errno=exc.errno)


#: The HTTP versions the server speaks (h11 parses any ``HTTP/d.d``).
_VERSIONS = frozenset({b"1.0", b"1.1"})


def _unacceptable(request: h11.Request, limit: int) -> tuple[str, str] | None:
    """Why a request head is refused before it reaches the application: a version the server
    does not speak (505), or a head past the limit that arrived whole in one read (431; h11
    refuses one still incomplete at the limit itself)."""
    if request.http_version not in _VERSIONS:
        version = request.http_version.decode("ascii", "replace")
        return (
            "http-version-not-supported",
            f"HTTP/{version} is not supported: speak HTTP/1.1 (or 1.0)",
        )
    size = len(request.method) + len(request.target) + 12
    size += sum(len(name) + len(value) + 4 for name, value in request.headers)
    if size > limit:
        return (
            "headers-too-large",
            f"request line and headers of {size} bytes are above the {limit}-byte limit",
        )
    return None


def _declared_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 checked that it is a number
    return None


def call_app(app: WsgiApp, environ: dict[str, Any]) -> Answer:
    """Run the WSGI application on ``environ``: its status, headers and whole body."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], _exc: Any = None) -> Any:
        started[:] = [status, headers]
        return lambda _data: None

    chunks = app(environ, start_response)
    status, headers = started
    if not any(name.lower() == "content-length" for name, _ in headers):
        return int(status.split(" ", 1)[0]), list(headers), _closing(chunks)
    try:
        payload = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return int(status.split(" ", 1)[0]), list(headers), payload


def _closing(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The chunks of a streamed answer; the application's iterable closed at the end (or when
    the client goes away and the stream is closed early)."""
    try:
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
