"""The sidecar's HTTP server: health, readiness, status, metrics, promotion and the data plane.

Endpoints (docs/design.md section 8)::

    GET  /healthz                      200 while the process runs
    GET  /readyz[?verbose]             200 only in state ready or serving, else 503;
                                       ``verbose`` lists the checks behind the answer
    GET  /                             the live status page (orchestrator.status.web)
    GET  /status[?coverage]            the ``status --json`` object (with coverage)
    GET  /history                      the upgrade history (``history --json`` rows)
    GET  /metrics                      Prometheus text format
    POST /promote[?deploy_generation=G]   (or JSON body {"deploy_generation": G}; default: own)
    POST /append?collection=SCHEMA.NAME   JSON lines of rows; leader only (409 on read-only);
                                       an ``Idempotency-Key`` header makes a retry return the
                                       first answer (``Idempotent-Replayed: true``), no write
    GET  /read?collection=SCHEMA.NAME[&as_of=T]   JSON lines, migrated to this release's schema

The server only translates HTTP to calls on a :class:`SidecarApi` and errors to status codes; it
never changes the process's state itself. Errors answer a JSON body: ``CatalogError.to_json()``
or ``{"error": ..., "message": ...}``.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, Protocol

import attrs
import structlog
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

from catalog.errors import (
    BadIdempotencyKeyError,
    BadInputError,
    BlobBucketMissingError,
    BlobDeniedError,
    BlobUnreachableError,
    BusyError,
    CatalogError,
    ConfigurationError,
    ConnectionLostError,
    FencedError,
    ForbiddenError,
    IdempotencyKeyReusedError,
    MigrationRefusedError,
    NoShardError,
    NotLeaderError,
    UnauthorizedError,
    UnknownCollectionError,
    WritesPausedError,
)
from orchestrator.sidecar.idempotency import IDEMPOTENCY_HEADER
from orchestrator.sidecar.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestrator.sidecar.readiness import Readiness
from orchestrator.status.web import page_response

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
#: Seconds a 503 answer asks the client to wait (Retry-After), unless the error says.
RETRY_AFTER = 1
JSON_TYPE = "application/json"
JSON_LINES_TYPE = "application/x-ndjson"


class HttpError(CatalogError):
    """A request this module refuses itself (a body too large, bad JSON, a missing parameter).

    Part of the one hierarchy; its JSON body names the refusal (``error``) instead of the class.
    The data plane's refusals are domain errors instead (:data:`REFUSALS`).
    """

    def __init__(self, status: HTTPStatus, error: str, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.status = status
        self.error = error

    @property
    def body(self) -> dict[str, Any]:
        return {"error": self.error, "message": self.message, **self.details}


class SidecarApi(Protocol):
    """What the HTTP server needs from the sidecar; every method is safe from any thread."""

    def readiness(self) -> Readiness: ...

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]: ...

    def history_json(self) -> list[dict[str, Any]]: ...

    def metrics_text(self) -> bytes: ...

    def promote(self, deploy_generation: int | None) -> Mapping[str, Any]: ...

    def append(
        self, collection: str, body: bytes, idempotency_key: str | None = None
    ) -> Mapping[str, Any]: ...

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


#: The domain's refusals of a request and their statuses; the body's ``error`` is the class's
#: ``code``.
REFUSALS: Mapping[type[CatalogError], HTTPStatus] = {
    BlobUnreachableError: HTTPStatus.SERVICE_UNAVAILABLE,
    BlobDeniedError: HTTPStatus.INTERNAL_SERVER_ERROR,
    BlobBucketMissingError: HTTPStatus.INTERNAL_SERVER_ERROR,
    UnknownCollectionError: HTTPStatus.NOT_FOUND,
    NoShardError: HTTPStatus.NOT_FOUND,
    BadIdempotencyKeyError: HTTPStatus.BAD_REQUEST,
    IdempotencyKeyReusedError: HTTPStatus.UNPROCESSABLE_ENTITY,
    NotLeaderError: HTTPStatus.CONFLICT,
    WritesPausedError: HTTPStatus.SERVICE_UNAVAILABLE,
    BusyError: HTTPStatus.GATEWAY_TIMEOUT,
    UnauthorizedError: HTTPStatus.UNAUTHORIZED,
    ForbiddenError: HTTPStatus.FORBIDDEN,
}


def status_for(exc: CatalogError) -> HTTPStatus:
    """The HTTP status that matches an error: a refusal's own, else by its exit code."""
    refusal = REFUSALS.get(type(exc))
    if refusal is not None:
        return refusal
    if isinstance(exc, BadInputError):
        return HTTPStatus.BAD_REQUEST
    if isinstance(exc, (FencedError, MigrationRefusedError)):
        return HTTPStatus.CONFLICT
    if isinstance(exc, ConnectionLostError):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.INTERNAL_SERVER_ERROR


ROUTES = Map(
    [
        Rule("/", endpoint="page", methods=["GET"]),
        Rule("/history", endpoint="history", methods=["GET"]),
        Rule("/healthz", endpoint="healthz", methods=["GET"]),
        Rule("/readyz", endpoint="readyz", methods=["GET"]),
        Rule("/status", endpoint="status", methods=["GET"]),
        Rule("/metrics", endpoint="metrics", methods=["GET"]),
        Rule("/read", endpoint="read", methods=["GET"]),
        Rule("/promote", endpoint="promote", methods=["POST"]),
        Rule("/append", endpoint="append", methods=["POST"]),
    ],
    strict_slashes=False,
)

_TEXT = "text/plain; charset=utf-8"


REPLAYED_HEADER = "Idempotent-Replayed"


def _json(status: HTTPStatus, value: Any) -> Response:
    return Response(json.dumps(value, indent=2) + "\n", status=status, content_type=JSON_TYPE)


def _body(request: Request) -> bytes:
    length = request.content_length or 0
    if length > MAX_BODY_BYTES:
        raise HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "body-too-large",
            f"request body of {length} bytes is above the {MAX_BODY_BYTES} limit",
        )
    return request.get_data(cache=False)


# Endpoints that change the environment: they need the bearer token when one is configured.
PROTECTED = frozenset({"promote", "append"})


class TokenCheck(Protocol):
    def check(self, authorization: str | None) -> None: ...


@attrs.frozen
class SidecarApp:
    """The WSGI application: routes a request to one endpoint, errors to status codes."""

    api: SidecarApi
    token: TokenCheck | None = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        response = self.respond(request)
        return response(environ, start_response)

    def respond(self, request: Request) -> Response:
        try:
            endpoint, _args = ROUTES.bind_to_environ(request.environ).match()
            handler: Callable[[Request], Response] = getattr(self, endpoint)
            if endpoint in PROTECTED and self.token is not None:
                self.token.check(request.headers.get("Authorization"))
            return handler(request)
        except MethodNotAllowed as exc:
            allowed = "/".join(m for m in exc.valid_methods or () if m != "HEAD")
            return _json(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": "method-not-allowed", "message": f"{request.path} takes {allowed}"},
            )
        except NotFound:
            return _json(
                HTTPStatus.NOT_FOUND,
                {"error": "not-found", "message": f"no endpoint {request.path}"},
            )
        except HTTPException as exc:
            return _json(HTTPStatus(exc.code or 500), {"error": "http", "message": exc.description})
        except HttpError as exc:
            return _json(exc.status, exc.body)
        except CatalogError as exc:
            status = status_for(exc)
            body = exc.to_json()
            if type(exc) in REFUSALS:  # named by the refusal, as an HTTP API's clients expect
                body["error"] = exc.code
                del body["exit_code"]
            response = _json(status, body)
            if status == HTTPStatus.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = 'Bearer realm="catalog-upgrade"'
            if status == HTTPStatus.SERVICE_UNAVAILABLE:  # a state that passes: say when to retry
                response.headers["Retry-After"] = str(exc.details.get("retry_after", RETRY_AFTER))
            return response
        except Exception as exc:  # a bug: answer 500 and keep serving
            log.exception("http_handler_failed", path=request.path)
            return _json(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                {"error": type(exc).__name__, "message": str(exc)},
            )

    # -- endpoints --------------------------------------------------------------------------

    def healthz(self, _request: Request) -> Response:
        return Response("ok\n", content_type=_TEXT)

    def readyz(self, request: Request) -> Response:
        readiness = self.api.readiness()
        status = HTTPStatus.OK if readiness.ok else HTTPStatus.SERVICE_UNAVAILABLE
        if "verbose" in request.args:
            body = readiness.render()
        elif readiness.ok:
            body = "ok\n"
        else:
            body = f"not ready: {', '.join(c.name for c in readiness.checks if not c.ok)}\n"
        return Response(body, status=status, content_type=_TEXT)

    def page(self, _request: Request) -> Response:
        return page_response()

    def history(self, _request: Request) -> Response:
        return _json(HTTPStatus.OK, self.api.history_json())

    def status(self, request: Request) -> Response:
        return _json(HTTPStatus.OK, self.api.status_json(coverage="coverage" in request.args))

    def metrics(self, _request: Request) -> Response:
        return Response(self.api.metrics_text(), content_type=METRICS_CONTENT_TYPE)

    def promote(self, request: Request) -> Response:
        body = _body(request)
        generation = _int_param(request.args, "deploy_generation")
        if generation is None and body.strip():
            try:
                data = json.loads(body)
            except json.JSONDecodeError as exc:
                raise HttpError(
                    HTTPStatus.BAD_REQUEST, "bad-json", f"promote body is not JSON: {exc}"
                ) from exc
            raw = data.get("deploy_generation") if isinstance(data, dict) else data
            generation = _as_int(raw, "deploy_generation")
        return _json(HTTPStatus.OK, self.api.promote(generation))

    def append(self, request: Request) -> Response:
        collection = _required(request.args, "collection")
        key = request.headers.get(IDEMPOTENCY_HEADER)
        answer = self.api.append(collection, _body(request), key)
        response = _json(HTTPStatus.OK, answer)
        if answer.get("replayed"):
            response.headers[REPLAYED_HEADER] = "true"
        return response

    def read(self, request: Request) -> Response:
        collection = _required(request.args, "collection")
        rows = self.api.read(collection, _int_param(request.args, "as_of"))
        body = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        return Response(body, content_type=JSON_LINES_TYPE)


def _required(query: Mapping[str, str], name: str) -> str:
    value = query.get(name)
    if not value:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "missing-parameter", f"query parameter {name} is required"
        )
    return value


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    return _as_int(value, name)


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
    """werkzeug's threaded WSGI server on its own daemon thread; ``address`` is the bound one."""

    api: SidecarApi
    host: str = "127.0.0.1"
    port: int = 0
    token: TokenCheck | None = None
    # HTTPS when given (orchestrator.sidecar.tls).
    ssl_context: ssl.SSLContext | None = None
    _server: BaseWSGIServer | None = attrs.field(default=None, init=False)
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
        # Bind here, so a taken port is our error (werkzeug would print and exit the process).
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            listener = socket.create_server((self.host, self.port), family=family)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}",
                address=f"{self.host}:{self.port}",
            ) from exc
        with listener:
            server = make_server(
                self.host,
                self.port,
                SidecarApp(self.api, self.token),
                threaded=True,
                fd=listener.fileno(),
                ssl_context=self.ssl_context,
            )
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="sidecar-http",
            daemon=True,
        )
        self._thread.start()
        log.info("http_serving", address=self.address, tls=self.ssl_context is not None)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
