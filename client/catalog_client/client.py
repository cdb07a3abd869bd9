"""A typed Python client of the sidecar's HTTP API, exactly once by default.

    client = SidecarClient("http://127.0.0.1:8081", token_file="/etc/catalog-upgrade/token")
    answer = client.append("mz_catalog.mz_tables", table)      # an Arrow table, or rows
    table = client.read("mz_catalog.mz_tables")                # Arrow, migrated to the release
    client.promote(2); client.finalize("0.11.0"); client.status()

Every append carries an ``Idempotency-Key`` (the caller's, or one chosen for it). A lost
connection, a 503 (writes paused, the blob store out, a leader taking its leadership back: it
waits the ``Retry-After``) and a 409 ``idempotency-key-in-progress`` are retried with the same
key and body until ``retry_deadline``: the sidecar resolves an outcome the client did not see
by the key, so a retried append lands once and answers the first answer (``replayed``). Any
other refusal raises :class:`SidecarError` carrying the API's ``error`` code and details.

A call sends one ``X-Request-Id`` with each of its requests, retries included: the sidecar
logs the request under it and a :class:`SidecarError` carries it (``request_id``).
:meth:`SidecarClient.schema` gives a collection's Arrow schema, to build a table the sidecar
takes. One client holds one keep-alive connection per thread (``keep_alive=False``: one per
request); :meth:`SidecarClient.close`, or a ``with`` block, closes them.
:meth:`SidecarClient.send` is the raw exchange under all of it: one request, its
:class:`Answer`, never an exception (status 0 when nothing answered), for callers that judge
every status themselves (the test harness, the scenario workload).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import http.client
import io
import json
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode, urlsplit

from catalog_client.jsonforms import jsonable
from catalog_client.media import ARROW_STREAM_TYPE, JSON_LINES_TYPE, JSON_TYPE
from catalog_client.requestids import REQUEST_ID_HEADER, new_request_id
from catalog_client.schemas import arrow_schema

if TYPE_CHECKING:  # imported where Arrow is used: a client of JSON rows never loads pyarrow
    import pyarrow as pa

__all__ = [
    "Answer",
    "AppendAnswer",
    "Headers",
    "SidecarClient",
    "SidecarError",
    "SidecarUnavailableError",
    "retry_after_seconds",
]
#: Statuses and codes after which a request is sent again, with the same key and body.
_RETRIED_CODES = frozenset({"idempotency-key-in-progress"})
#: Refusals that say another sidecar leads: a client of several sends the request on.
_FOLLOWED_CODES = frozenset({"read-only", "fenced"})

_T = TypeVar("_T")


class SidecarError(Exception):
    """A refusal of the sidecar: its HTTP ``status``, the API's ``code`` (the body's
    ``error``, e.g. ``read-only``, ``requires-finalization``) and the body's ``details``."""

    def __init__(self, status: int, code: str, message: str, details: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details)
        #: The seconds the answer's ``Retry-After`` asked to wait (None: it did not say).
        self.retry_after: float | None = None
        #: The ``X-Request-Id`` of the call: the sidecar logs the request under it.
        self.request_id: str | None = None


class SidecarUnavailableError(SidecarError):
    """The sidecar could not be reached, or kept answering 503, until the retry deadline:
    an append's outcome is unknown; retry it later with the same key."""


class Headers(dict[str, str]):
    """An answer's headers, looked up by name in any case (stored in lower case)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


@dataclasses.dataclass(frozen=True)
class Answer:
    """One HTTP answer as :meth:`SidecarClient.send` saw it; ``status`` 0 when the sidecar could
    not be reached at all (``error`` says why)."""

    status: int
    body: bytes
    error: str | None = None
    headers: Headers = dataclasses.field(default_factory=Headers)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]

    def summary(self) -> str:
        """One line for a step's outcome: the status and the body, JSON compacted."""
        if self.status == 0:
            return f"unreachable ({self.error})"
        body = self.text().strip()
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(body), separators=(",", ":"))
        body = body.replace("\n", " ")
        return f"HTTP {self.status}" + (f": {body[:300]}" if body else "")


@dataclasses.dataclass(frozen=True)
class AppendAnswer:
    """An acknowledged append: where its rows landed, and whether this was a replay."""

    collection: str
    shard_id: str
    rows: int
    ts: int
    upper: int
    replayed: bool
    key: str


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """One sidecar's address."""

    https: bool
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> _Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a sidecar URL is http://HOST:PORT or https://HOST:PORT, not {url}")
        https = parts.scheme == "https"
        return cls(https, parts.hostname, parts.port or (443 if https else 80))


class SidecarClient:
    """The sidecar at ``url`` (``http://`` or ``https://``), with a bearer ``token`` (or
    ``token_file``, re-read on each request) and, for TLS, the ``ca_file`` that signed it.

    ``url`` may be several sidecars of one environment (the blue and the green of a blue-green
    deployment): the client then follows the leader. A request goes to the sidecar that last
    answered; a lost connection, a ``read-only`` or ``fenced`` refusal, or a 503 sends it on to
    the next, with the same key and body, until ``retry_deadline``."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        token_file: str | Path | None = None,
        ca_file: str | Path | None = None,
        timeout: float = 30.0,
        retry_deadline: float = 60.0,
        keep_alive: bool = True,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("a client needs the URL of at least one sidecar")
        self._endpoints = [_Endpoint.of(u) for u in urls]
        self._current = 0  # the sidecar that last answered
        self._token = token
        self._token_file = Path(token_file) if token_file is not None else None
        self._context = (
            ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            if any(e.https for e in self._endpoints)
            else None
        )
        self._timeout = timeout
        self._retry_deadline = retry_deadline
        self._keep_alive = keep_alive
        self._local = threading.local()
        self._lock = threading.Lock()
        #: Every connection kept open, whichever thread's (:meth:`close` closes them).
        self._opened: set[http.client.HTTPConnection] = set()
        #: The answers this client handled itself on the way to its callers' (retried, or
        #: sent on to another sidecar), by status and code: ``503 writes-paused``,
        #: ``409 read-only``, ``unreachable``... What a cut-over cost, seen from here.
        self.detours: collections.Counter[str] = collections.Counter()

    # -- the API ----------------------------------------------------------------------------

    def append(
        self,
        collection: str,
        rows: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]],
        *,
        key: str | None = None,
    ) -> AppendAnswer:
        """Append ``rows`` (Arrow: sent as an IPC stream; a sequence of mappings: JSON lines)
        exactly once, under ``key`` (default: a new one)."""
        pa = sys.modules.get("pyarrow")  # Arrow rows come from a caller that imported it
        if pa is not None and isinstance(rows, (pa.Table, pa.RecordBatch)):
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, rows.schema) as writer:
                writer.write(rows)
            return self.append_body(collection, sink.getvalue(), ARROW_STREAM_TYPE, key=key)
        # Times ISO 8601, bytes base64: as GET /read writes them, and as /append reads them.
        body = "".join(json.dumps(jsonable(dict(row))) + "\n" for row in rows).encode()
        return self.append_body(collection, body, JSON_LINES_TYPE, key=key)

    def append_body(
        self, collection: str, body: bytes, content_type: str, *, key: str | None = None
    ) -> AppendAnswer:
        """Append a body already encoded as ``content_type`` (JSON lines or an Arrow IPC
        stream), exactly once as :meth:`append` does."""
        key = key or f"client-{uuid.uuid4().hex}"
        headers = {"Content-Type": content_type, "Idempotency-Key": key}
        path = f"/append?{urlencode({'collection': collection})}"
        data = self._json(self._call("POST", path, body, headers))
        return AppendAnswer(
            collection=data["collection"], shard_id=data["shard_id"], rows=data["rows"],
            ts=data["ts"], upper=data["upper"], replayed=bool(data["replayed"]), key=key,
        )  # fmt: skip

    def read(self, collection: str, *, as_of: int | None = None) -> pa.Table:
        """The collection as this release reads it, with ``_ts`` and ``_diff`` (Arrow). A read
        has no effect, so it is repeated whole, as any request is retried: after a lost
        connection or an answer cut short, a 503, or (with several sidecars) a refusal that
        says another leads."""
        path = self._read_path(collection, as_of)

        def attempt(index: int) -> pa.Table:
            connection = self._new_connection(index)
            try:
                headers = self._with_token({"Accept": ARROW_STREAM_TYPE})
                connection.request("GET", path, headers=headers)
                answer = connection.getresponse()
                if not 200 <= answer.status < 300:
                    raise _error_of(answer.status, answer.read(), Headers(answer.getheaders()))
                return _arrow().ipc.open_stream(answer).read_all()
            finally:
                connection.close()

        return self._retrying(attempt)

    def read_batches(
        self, collection: str, *, as_of: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The same read, batch by batch as the sidecar streams them: a collection larger than
        memory is read in bounded memory."""
        with self.stream(
            "GET", self._read_path(collection, as_of), headers={"Accept": ARROW_STREAM_TYPE}
        ) as answer:
            yield from _arrow().ipc.open_stream(answer)

    def read_rows(self, collection: str, *, as_of: int | None = None) -> list[dict[str, Any]]:
        """The same rows as JSON values (times ISO 8601, bytes base64)."""
        _, _, body = self._call("GET", self._read_path(collection, as_of), None, {})
        return [json.loads(line) for line in body.splitlines() if line.strip()]

    def status(self, *, coverage: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = self._json(
            self._call("GET", "/status" + ("?coverage" if coverage else ""), None, {})
        )
        return data

    def promote(self, deploy_generation: int | None = None) -> dict[str, Any]:
        """Promote ``deploy_generation`` (default: the sidecar's own)."""
        body = json.dumps({"deploy_generation": deploy_generation}).encode()
        data: dict[str, Any] = self._json(
            self._call("POST", "/promote", body, {"Content-Type": JSON_TYPE})
        )
        return data

    def finalize(self, version: str | None = None) -> dict[str, Any]:
        """Make the pending upgrade (of ``version``, when given) final."""
        path = "/finalize" + (f"?{urlencode({'version': version})}" if version else "")
        data: dict[str, Any] = self._json(
            self._call("POST", path, b"", {"Content-Type": JSON_TYPE})
        )
        return data

    def collections(self) -> dict[str, Any]:
        """``GET /collections``: the release's version and each collection it serves, with
        its fields (names, Arrow types, nullability)."""
        data: dict[str, Any] = self._json(self._call("GET", "/collections", None, {}))
        return data

    def schema(self, collection: str) -> pa.Schema:
        """The Arrow schema an append to ``collection`` must carry, as the sidecar lists it:
        ``pa.Table.from_pylist(rows, schema=...)`` builds a table it takes, and
        ``schema.empty_table()`` an empty one. ValueError when the release has no such
        collection."""
        listed = self.collections()
        for entry in listed["collections"]:
            if entry["name"] == collection:
                return arrow_schema(entry["fields"])
        raise ValueError(
            f"release {listed.get('version')} serves no collection {collection} "
            "(name it SCHEMA.NAME)"
        )

    def metrics(self) -> str:
        """The Prometheus exposition of ``/metrics``."""
        _, _, body = self._call("GET", "/metrics", None, {})
        return body.decode()

    def openapi(self) -> dict[str, Any]:
        """The API's OpenAPI description, as the sidecar serves it."""
        data: dict[str, Any] = self._json(self._call("GET", "/openapi.json", None, {}))
        return data

    def ready(self) -> bool:
        """Whether ``/readyz`` answers 200 (no retry)."""
        try:
            status, _, _ = self._once("GET", "/readyz", None, {})
        except OSError:
            return False
        return status == 200

    def close(self) -> None:
        """Close every connection this client keeps (each thread's); a request after it opens
        a new one."""
        with self._lock:
            opened, self._opened = self._opened, set()
        for connection in opened:
            connection.close()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the raw exchange --------------------------------------------------------------------

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """One request as given (no retry, no key added), its answer whatever the status;
        status 0 when the sidecar could not be reached. A body (or a POST) without a
        Content-Type is sent as JSON lines, the type every POST of the API takes."""
        sent = dict(headers or {})
        typed = any(k.lower() == "content-type" for k in sent)
        if (body is not None or method == "POST") and not typed:
            sent["Content-Type"] = JSON_LINES_TYPE
        try:
            status, answer_headers, data = self._once(method, path, body, sent)
        except (OSError, http.client.HTTPException) as exc:
            return Answer(status=0, body=b"", error=f"{type(exc).__name__}: {exc}")
        return Answer(status=status, body=data, headers=answer_headers)

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[http.client.HTTPResponse]:
        """One request on a connection of its own, its successful answer open for reading as it
        arrives (a refusal raises :class:`SidecarError`; no retry: a read is repeated whole)."""
        connection = self._new_connection()
        try:
            connection.request(method, path, body=body, headers=self._with_token(headers or {}))
            answer = connection.getresponse()
            if not 200 <= answer.status < 300:  # its Retry-After and request id too
                raise _error_of(answer.status, answer.read(), Headers(answer.getheaders()))
            yield answer
        except (OSError, http.client.HTTPException) as exc:
            # With several sidecars, the next request (a read is repeated whole) asks another.
            self._current = (self._current + 1) % len(self._endpoints)
            raise SidecarUnavailableError(
                0, "unreachable", f"{type(exc).__name__}: {exc}", {}
            ) from exc
        finally:
            connection.close()

    # -- transport --------------------------------------------------------------------------

    @staticmethod
    def _read_path(collection: str, as_of: int | None) -> str:
        query = {"collection": collection, **({"as_of": str(as_of)} if as_of is not None else {})}
        return f"/read?{urlencode(query)}"

    @staticmethod
    def _json(answer: tuple[int, Headers, bytes]) -> Any:
        return json.loads(answer[2])

    def _call(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, Headers, bytes]:
        """One request, retried as :meth:`_retrying` says; any other refusal raises
        SidecarError."""

        def attempt(index: int) -> tuple[int, Headers, bytes]:
            status, answer_headers, data = self._once(method, path, body, headers, index)
            if not 200 <= status < 300:
                raise _error_of(status, data, answer_headers)
            return status, answer_headers, data

        return self._retrying(attempt)

    def _retrying(self, attempt: Callable[[int], _T]) -> _T:
        """``attempt`` on the sidecar that last answered, retried on a lost connection, a 503
        and a key in progress until the deadline (with several sidecars: on the next one,
        and also after a refusal that says another leads). Each detour is counted in
        :attr:`detours`."""
        self._local.request_id = new_request_id()  # one per call, its retries included
        try:
            return self._retry(attempt)
        finally:
            self._local.request_id = None

    def _retry(self, attempt: Callable[[int], _T]) -> _T:
        deadline = time.monotonic() + self._retry_deadline
        index = self._current
        tried = 0  # sidecars asked since the last wait
        while True:
            try:
                result = attempt(index)
            except SidecarError as error:
                followed = error.code in _FOLLOWED_CODES and len(self._endpoints) > 1
                if error.status != 503 and error.code not in _RETRIED_CODES and not followed:
                    raise
                last = error
                wait = 0.05 if followed else (error.retry_after or 1.0)
            except (OSError, http.client.HTTPException) as exc:
                last = SidecarUnavailableError(0, "unreachable", f"{type(exc).__name__}: {exc}", {})
                wait = 0.2
            else:
                self._current = index
                return result
            with self._lock:
                self.detours[f"{last.status} {last.code}" if last.status else last.code] += 1
            index = (index + 1) % len(self._endpoints)
            tried += 1
            if tried < len(self._endpoints):
                wait = 0.0  # another sidecar is still to be asked before any wait
            else:
                tried = 0
            if time.monotonic() + wait > deadline:
                raise SidecarUnavailableError(
                    last.status, last.code, f"gave up after {self._retry_deadline:g} s: "
                    f"{last.message}", last.details,
                )  # fmt: skip
            time.sleep(wait)

    def _once(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        index: int | None = None,
    ) -> tuple[int, Headers, bytes]:
        index = self._current if index is None else index
        connection = self._connection(index)
        try:
            connection.request(method, path, body=body, headers=self._with_token(headers))
            answer = connection.getresponse()
            data = answer.read()
        except BaseException:
            self._drop(index)
            raise
        if not self._keep_alive or answer.getheader("Connection", "").lower() == "close":
            self._drop(index)
        return answer.status, Headers(answer.getheaders()), data

    def _connection(self, index: int) -> http.client.HTTPConnection:
        """This thread's kept connection to sidecar ``index``."""
        connections: dict[int, http.client.HTTPConnection] = self._connections()
        connection = connections.get(index)
        if connection is not None and connection not in self._opened:  # closed by close()
            connection = None
        if connection is None:
            connection = connections[index] = self._new_connection(index)
            with self._lock:
                self._opened.add(connection)
        return connection

    def _connections(self) -> dict[int, http.client.HTTPConnection]:
        connections: dict[int, http.client.HTTPConnection] | None = getattr(
            self._local, "connections", None
        )
        if connections is None:
            connections = self._local.connections = {}
        return connections

    def _new_connection(self, index: int | None = None) -> http.client.HTTPConnection:
        endpoint = self._endpoints[self._current if index is None else index]
        if endpoint.https:
            return http.client.HTTPSConnection(
                endpoint.host, endpoint.port, timeout=self._timeout, context=self._context
            )
        return http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=self._timeout)

    def _drop(self, index: int) -> None:
        connection = self._connections().pop(index, None)
        if connection is not None:
            with self._lock:
                self._opened.discard(connection)
            connection.close()

    def _with_token(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` with the bearer token (read from its file each time), unless they carry
        their own Authorization, and the call's ``X-Request-Id`` (a request outside a call,
        :meth:`send` or :meth:`stream`, gets one of its own)."""
        sent = dict(headers)
        if not any(k.lower() == REQUEST_ID_HEADER.lower() for k in sent):
            sent[REQUEST_ID_HEADER] = getattr(self._local, "request_id", None) or new_request_id()
        if self._token_file is not None:
            token: str | None = self._token_file.read_text().strip()
        else:
            token = self._token
        if token is not None and not any(k.lower() == "authorization" for k in sent):
            sent["Authorization"] = f"Bearer {token}"
        return sent


def _arrow() -> Any:
    """pyarrow, imported on first use."""
    import pyarrow as pa

    return pa


def _error_of(status: int, data: bytes, headers: Headers | None = None) -> SidecarError:
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        error = SidecarError(status, "http", data[:200].decode("utf-8", "replace"), {})
    else:
        details = {k: v for k, v in body.items() if k not in ("error", "message")}
        error = SidecarError(status, str(body.get("error")), str(body.get("message")), details)
    error.retry_after = None if headers is None else retry_after_seconds(headers)
    if headers is not None:
        error.request_id = headers.get(REQUEST_ID_HEADER)
    return error


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The seconds an answer's ``Retry-After`` asks for (None: absent or not a number)."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None
