"""The sidecar's HTTP server on a real socket: framing, keep-alive, deadlines, the connection limit,
and slow clients that hold no thread."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import attrs
import pytest

from orchestrator.http.exchange import ServerLimits
from orchestrator.http.server import HttpServer
from orchestrator.sidecar.server import api_server
from support.api import ScriptedApi

FAST = ServerLimits(
    workers=2, max_connections=300, idle_timeout=1.0, header_timeout=0.6, body_timeout=0.6
)
APPEND = (
    b"POST /append?collection=s.t HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/x-ndjson\r\n"
)


@pytest.fixture
def served() -> Iterator[tuple[ScriptedApi, HttpServer]]:
    api = ScriptedApi()
    server = api_server(api, limits=FAST).start()
    yield api, server
    server.stop()


def connect(server: HttpServer, timeout: float = 5.0) -> socket.socket:
    host, _, port = server.address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def answer_of(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def test_one_connection_carries_several_requests(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    api, server = served
    host, _, port = server.address.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    for n in range(3):
        connection.request(
            "POST",
            "/append?collection=s.t",
            body=b'{"id": %d}\n' % n,
            headers={"Content-Type": "application/x-ndjson"},
        )
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert json.loads(response.read())["rows"] == 1
    connection.request("HEAD", "/healthz")
    head = connection.getresponse()
    assert head.status == 200 and head.read() == b""
    connection.close()
    assert [body for _, body in api.appended] == [b'{"id": %d}\n' % n for n in range(3)]


def test_chunked_and_expect_continue_bodies_reach_the_application(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    api, server = served
    with connect(server) as sock:
        sock.sendall(APPEND + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        sock.sendall(b'5\r\n{"a":\r\n3\r\n1}\n\r\n0\r\n\r\n')
        status, _, body = answer_of(read_all(sock))
    assert status == 200 and json.loads(body)["rows"] == 1
    with connect(server) as sock:
        sock.sendall(
            APPEND + b"Content-Length: 8\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b'{"b":2}\n')
        status, _, _ = answer_of(read_all(sock))
    assert status == 200
    assert [body for _, body in api.appended] == [b'{"a":1}\n', b'{"b":2}\n']


def test_a_smuggled_length_header_is_ignored(served: tuple[ScriptedApi, HttpServer]) -> None:
    """``Content_Length`` would read as CONTENT_LENGTH in the environ; it is dropped."""
    api, server = served
    with connect(server) as sock:
        sock.sendall(
            APPEND + b"Content-Length: 8\r\nContent_Length: 2\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(b'{"c":3}\n')
        status, _, _ = answer_of(read_all(sock))
    assert status == 200
    assert api.appended == [("s.t", b'{"c":3}\n')]


def test_headers_and_bodies_too_slow_get_408_and_the_connection_closes(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    api, server = served
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        sent = 0
        while sent < 40:  # a slowloris: a header line now and then, never the end
            sent += 1
            time.sleep(0.15)
            if select.select([sock], [], [], 0)[0]:
                break  # answered while still sending: the deadline is the head's, not a line's
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        status, _, body = answer_of(read_all(sock))
        assert status == 408 and json.loads(body)["error"] == "request-timeout"
        assert sent < 40, "a header line now and then must not keep the head open"
    with connect(server) as sock:
        sock.sendall(APPEND + b"Content-Length: 100\r\n\r\n" + b"{")
        status, _, body = answer_of(read_all(sock))
        assert status == 408
    assert api.appended == []


@pytest.mark.quiet
def test_an_idle_connection_is_closed_without_an_answer(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    _, server = served
    with connect(server) as sock:
        started = time.monotonic()
        assert read_all(sock) == b""
        assert 0.9 < time.monotonic() - started < 3


def test_malformed_and_oversized_heads_get_json_refusals(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    _, server = served
    with connect(server) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        status, headers, body = answer_of(read_all(sock))
    assert status == 400 and json.loads(body)["error"] == "bad-request"
    assert headers["content-type"] == "application/json"
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024))
        status, _, body = answer_of(read_all(sock))
    assert status == 431 and json.loads(body)["error"] == "headers-too-large"


def test_a_connection_past_the_limit_gets_503() -> None:
    server = api_server(ScriptedApi(), limits=ServerLimits(max_connections=3)).start()
    try:
        held = [connect(server) for _ in range(3)]
        time.sleep(0.2)
        with connect(server) as extra:
            status, _, body = answer_of(read_all(extra))
        assert status == 503 and json.loads(body)["error"] == "too-many-connections"
        held.pop().close()
        time.sleep(0.2)
        with connect(server) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert answer_of(read_all(sock))[0] == 200
        for sock in held:
            sock.close()
    finally:
        server.stop()


def test_slow_clients_hold_sockets_not_threads() -> None:
    """250 connections, half idle and half sending headers slowly: the thread count stays at the
    pool's size and a probe still answers. (Deadlines long enough that none of them is closed
    while the loop accepts them all, however busy the machine.)"""
    patient = attrs.evolve(FAST, idle_timeout=60.0, header_timeout=60.0)
    server = api_server(ScriptedApi(), limits=patient).start()
    try:
        before = threading.active_count()
        slow = [connect(server) for _ in range(250)]
        for sock in slow[::2]:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        # A connect returns once the kernel queued the connection, before the loop accepts
        # it: under load the loop takes a while to accept 250.
        deadline = time.monotonic() + 30
        while server.connections < 250 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.connections >= 250
        with connect(server) as sock:  # all 250 held: a probe still answers
            sock.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            assert answer_of(read_all(sock))[0] == 200
        assert threading.active_count() <= before + patient.workers
        for sock in slow:
            sock.close()
    finally:
        server.stop()


def test_an_arrow_read_is_streamed_chunked_and_the_connection_carries_on(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    """``GET /read`` with ``Accept: application/vnd.apache.arrow.stream``: no Content-Length,
    chunked batch by batch (the process holds one batch serialized), the whole table read
    back; the next request on the same connection is answered."""
    import pyarrow as pa

    api, server = served
    api.table = pa.table({"id": pa.array(range(300_000), pa.int64())})
    host, _, port = server.address.rpartition(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    accept = {"Accept": "application/vnd.apache.arrow.stream"}
    client.request("GET", "/read?collection=s.t", headers=accept)
    answer = client.getresponse()
    assert answer.status == 200
    assert answer.getheader("Transfer-Encoding") == "chunked"
    assert answer.getheader("Content-Length") is None
    assert answer.getheader("Content-Type") == "application/vnd.apache.arrow.stream"
    assert pa.ipc.open_stream(answer.read()).read_all().equals(api.table)
    client.request("GET", "/healthz")
    assert client.getresponse().read() == b"ok\n"
    client.close()


def test_an_arrow_append_reaches_the_api_with_its_format_and_the_row_limit(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    api, server = served
    host, _, port = server.address.rpartition(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    client.request(
        "POST", "/append?collection=s.t", body=b"\xff\xff\xff\xff",
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
    )  # fmt: skip
    assert client.getresponse().status == 200
    assert api.formats == [(True, ServerLimits().max_append_rows)]
    client.close()


def test_a_head_past_the_limit_sent_whole_gets_431_and_an_unknown_version_505(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    """A 100 KB header in one complete head (h11 alone takes it: it limits only a head still
    incomplete), and ``HTTP/9.9``, are refused before the application sees them."""
    _, server = served
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 * 1024) + b"\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(head)
        status, _, body = answer_of(read_all(sock))
    assert status == 431 and json.loads(body)["error"] == "headers-too-large", body
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n")
        status, _, body = answer_of(read_all(sock))
    assert status == 505 and json.loads(body)["error"] == "http-version-not-supported", body
    with connect(server) as sock:  # the limit leaves ordinary heads alone
        sock.sendall(b"GET /healthz HTTP/1.0\r\nHost: x\r\nX-Ok: " + b"a" * 1000 + b"\r\n\r\n")
        status, _, body = answer_of(read_all(sock))
    assert status == 200 and body == b"ok\n"


def test_a_refusal_is_a_staged_close_so_a_client_still_sending_reads_it(
    served: tuple[ScriptedApi, HttpServer],
) -> None:
    """A body declared past the limit is refused by its header while the client keeps sending
    it. The server sends the 413, ends its side and still takes (and drops) what comes for a
    moment before it closes: a socket closed with input unread answers with a reset, which
    can discard the refusal before the client reads it."""
    api, server = served
    limit = FAST.max_body
    with connect(server) as sock:
        sock.sendall(APPEND + f"Content-Length: {limit * 4}\r\n\r\n".encode())
        status, headers, body = answer_of(read_all(sock))  # up to the server's end
        for _ in range(3):  # the body keeps coming after it: taken, not reset
            sock.sendall(b"{" * 1000)
            time.sleep(0.05)
    assert status == 413 and json.loads(body)["error"] == "body-too-large", body
    assert headers["connection"] == "close"
    assert api.appended == []


def test_a_stopping_server_finishes_what_it_is_sending_and_refuses_new_requests() -> None:
    """A read streaming when the server stops (a leader stepping down) reaches its last row;
    a new request on a kept connection gets ``503 stopping`` (the client asks another
    sidecar), new connections are refused, and the stop returns once the read is done."""
    import pyarrow as pa

    api = ScriptedApi()
    api.table = pa.table({"id": pa.array(range(8_000_000), pa.int64())})
    server = api_server(api, limits=FAST).start()
    host, _, port = server.address.rpartition(":")
    kept = http.client.HTTPConnection(host, int(port), timeout=5)
    kept.request("GET", "/healthz")
    assert kept.getresponse().read() == b"ok\n"
    reader = http.client.HTTPConnection(host, int(port), timeout=10)
    reader.request("GET", "/read?collection=s.t",
                   headers={"Accept": "application/vnd.apache.arrow.stream"})  # fmt: skip
    answer = reader.getresponse()  # the rows stay unread: the server is held sending them
    assert answer.status == 200
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    deadline = time.monotonic() + 5
    while True:  # the listener closes once the stop reached the server's loop
        try:
            connect(server, timeout=1).close()
        except (ConnectionRefusedError, ConnectionResetError):
            break  # refused, or reset: accepted into the backlog as the listener closed
        assert time.monotonic() < deadline, "the server still takes connections"
        time.sleep(0.05)
    kept.request("GET", "/healthz")
    refused = kept.getresponse()
    assert refused.status == 503
    assert json.loads(refused.read())["error"] == "stopping"
    assert stopping.is_alive(), "the stop waits for the read"
    assert pa.ipc.open_stream(answer.read()).read_all().equals(api.table)
    stopping.join(timeout=10)
    assert not stopping.is_alive()
