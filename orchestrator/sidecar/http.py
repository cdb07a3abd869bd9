"""The sidecar's HTTP server: health, readiness, status, metrics, promotion and the data plane.

Endpoints (docs/design.md section 8)::

    GET  /healthz                      200 while the process runs
    GET  /readyz[?verbose]             200 only in state ready or serving, else 503;
                                       ``verbose`` lists the checks behind the answer
    GET  /status                       the ``status --json`` object
    GET  /metrics                      Prometheus text format
    POST /promote[?deploy_generation=G]   (or JSON body {"deploy_generation": G}; default: own)
    POST /append?collection=SCHEMA.NAME   JSON lines of rows; leader only (409 on read-only)
    GET  /read?collection=SCHEMA.NAME[&as_of=T]   JSON lines, migrated to this release's schema

The server only translates HTTP to calls on a :class:`SidecarApi` and errors to status codes; it
never changes the process's state itself. Errors answer a JSON body: ``CatalogError.to_json()``
or ``{"error": ..., "message": ...}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import attrs
import structlog

from catalog.errors import (
    BadInputError,
    CatalogError,
    ConnectionLostError,
    FencedError,
    MigrationRefusedError,
)
from orchestrator.sidecar.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
JSON_TYPE = "application/json"
JSON_LINES_TYPE = "application/x-ndjson"


@attrs.frozen
class ReadinessCheck:
    """One condition behind ``/readyz``."""

    name: str
    ok: bool
    detail: str = ""


@attrs.frozen
class Readiness:
    checks: tuple[ReadinessCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def render(self) -> str:
        """Kubernetes-style lines: ``[+]name ok`` / ``[-]name failed: detail``."""
        lines = [
            f"[+]{c.name} ok" if c.ok else f"[-]{c.name} failed: {c.detail}".rstrip(": ")
            for c in self.checks
        ]
        lines.append("readyz check passed" if self.ok else "readyz check failed")
        return "\n".join(lines) + "\n"


class HttpError(Exception):
    """A request the API refuses with a specific status (409 read-only, 503 paused, ...)."""

    def __init__(self, status: HTTPStatus, error: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": error, "message": message, **details}


class SidecarApi(Protocol):
    """What the HTTP server needs from the sidecar; every method is safe from any thread."""

    def readiness(self) -> Readiness: ...

    def status_json(self) -> Mapping[str, Any]: ...

    def metrics_text(self) -> bytes: ...

    def promote(self, deploy_generation: int | None) -> Mapping[str, Any]: ...

    def append(self, collection: str, body: bytes) -> Mapping[str, Any]: ...

    def read(self, collection: str, as_of: int | None) -> Iterable[Mapping[str, Any]]: ...


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


def status_for(exc: CatalogError) -> HTTPStatus:
    """The HTTP status that matches an error's exit code."""
    if isinstance(exc, BadInputError):
        return HTTPStatus.BAD_REQUEST
    if isinstance(exc, (FencedError, MigrationRefusedError)):
        return HTTPStatus.CONFLICT
    if isinstance(exc, ConnectionLostError):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.INTERNAL_SERVER_ERROR


def _make_handler(api: SidecarApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "catalog-upgrade-sidecar"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http_request", client=self.client_address[0], line=format % args)

        # -- plumbing ---------------------------------------------------------------------

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: HTTPStatus, value: Any) -> None:
            self._send(status, (json.dumps(value, indent=2) + "\n").encode(), JSON_TYPE)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise HttpError(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    "body-too-large",
                    f"request body of {length} bytes is above the {MAX_BODY_BYTES} limit",
                )
            return self.rfile.read(length) if length else b""

        def _dispatch(self, routes: Mapping[str, Any]) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            route = routes.get(url.path.rstrip("/") or "/")
            try:
                if route is None:
                    allowed = {"GET": GET_PATHS, "POST": POST_PATHS}
                    other = "POST" if self.command in ("GET", "HEAD") else "GET"
                    if url.path.rstrip("/") in allowed[other]:
                        raise HttpError(
                            HTTPStatus.METHOD_NOT_ALLOWED,
                            "method-not-allowed",
                            f"{url.path} takes {other}",
                        )
                    raise HttpError(HTTPStatus.NOT_FOUND, "not-found", f"no endpoint {url.path}")
                route(query)
            except HttpError as exc:
                self._json(exc.status, exc.body)
            except CatalogError as exc:
                self._json(status_for(exc), exc.to_json())
            except Exception as exc:  # a bug: answer 500 and keep serving
                log.exception("http_handler_failed", path=url.path)
                self._json(
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    {"error": type(exc).__name__, "message": str(exc)},
                )

        # -- endpoints --------------------------------------------------------------------

        def healthz(self, _query: Mapping[str, list[str]]) -> None:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")

        def readyz(self, query: Mapping[str, list[str]]) -> None:
            readiness = api.readiness()
            status = HTTPStatus.OK if readiness.ok else HTTPStatus.SERVICE_UNAVAILABLE
            if "verbose" in query:
                body = readiness.render()
            elif readiness.ok:
                body = "ok\n"
            else:
                body = f"not ready: {', '.join(c.name for c in readiness.checks if not c.ok)}\n"
            self._send(status, body.encode(), "text/plain; charset=utf-8")

        def status(self, _query: Mapping[str, list[str]]) -> None:
            self._json(HTTPStatus.OK, api.status_json())

        def metrics(self, _query: Mapping[str, list[str]]) -> None:
            self._send(HTTPStatus.OK, api.metrics_text(), METRICS_CONTENT_TYPE)

        def promote(self, query: Mapping[str, list[str]]) -> None:
            body = self._body()
            generation = _int_param(query, "deploy_generation")
            if generation is None and body.strip():
                try:
                    data = json.loads(body)
                except json.JSONDecodeError as exc:
                    raise HttpError(
                        HTTPStatus.BAD_REQUEST, "bad-json", f"promote body is not JSON: {exc}"
                    ) from exc
                raw = data.get("deploy_generation") if isinstance(data, dict) else data
                generation = _as_int(raw, "deploy_generation")
            self._json(HTTPStatus.OK, api.promote(generation))

        def append(self, query: Mapping[str, list[str]]) -> None:
            collection = _required(query, "collection")
            self._json(HTTPStatus.OK, api.append(collection, self._body()))

        def read(self, query: Mapping[str, list[str]]) -> None:
            collection = _required(query, "collection")
            rows = api.read(collection, _int_param(query, "as_of"))
            body = "".join(json.dumps(row, default=str) + "\n" for row in rows).encode()
            self._send(HTTPStatus.OK, body, JSON_LINES_TYPE)

        # -- verbs ------------------------------------------------------------------------

        def do_GET(self) -> None:
            self._dispatch(
                {
                    "/healthz": self.healthz,
                    "/readyz": self.readyz,
                    "/status": self.status,
                    "/metrics": self.metrics,
                    "/read": self.read,
                }
            )

        do_HEAD = do_GET

        def do_POST(self) -> None:
            self._dispatch({"/promote": self.promote, "/append": self.append})

    return Handler


GET_PATHS = frozenset({"/healthz", "/readyz", "/status", "/metrics", "/read"})
POST_PATHS = frozenset({"/promote", "/append"})


def _required(query: Mapping[str, list[str]], name: str) -> str:
    values = query.get(name)
    if not values or not values[0]:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "missing-parameter", f"query parameter {name} is required"
        )
    return values[0]


def _int_param(query: Mapping[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values or values[0] == "":
        return None
    return _as_int(values[0], name)


def _as_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        return int(value)
    except (TypeError, ValueError):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "bad-parameter", f"{name} must be an integer, not {value!r}"
        ) from None


@attrs.define
class SidecarHttpServer:
    """A threading HTTP server on its own daemon thread; ``address`` is the bound one."""

    api: SidecarApi
    host: str = "127.0.0.1"
    port: int = 0
    _server: ThreadingHTTPServer | None = attrs.field(default=None, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)

    @property
    def address(self) -> str:
        """``host:port`` actually bound (the chosen port when 0 was asked)."""
        if self._server is None:
            return f"{self.host}:{self.port}"
        host, port = self._server.server_address[:2]
        host = str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> SidecarHttpServer:
        try:
            server = ThreadingHTTPServer((self.host, self.port), _make_handler(self.api))
        except OSError as exc:
            from catalog.errors import ConfigurationError

            raise ConfigurationError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}",
                address=f"{self.host}:{self.port}",
            ) from exc
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="sidecar-http",
            daemon=True,
        )
        self._thread.start()
        log.info("http_serving", address=self.address)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
