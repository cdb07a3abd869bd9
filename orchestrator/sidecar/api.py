"""The sidecar's HTTP API: health, readiness, status, metrics, promotion and the data plane.

Endpoints (docs/design-contract.md)::

    GET  /healthz                      200 while the process runs
    GET  /readyz[?verbose]             200 only in state ready or serving, else 503;
                                       ``verbose`` lists the checks behind the answer
    GET  /                             the live status page (orchestrator.status.web)
    GET  /status[?coverage]            the ``status --json`` object (with coverage)
    GET  /history                      the upgrade history (``history --json`` rows)
    GET  /metrics                      Prometheus text format
    GET  /openapi.json                 the OpenAPI 3.1 description of this API
    POST /promote[?deploy_generation=G]   (or JSON body {"deploy_generation": G}; default: own)
    POST /finalize[?version=V]         make the pending upgrade final (202; the serving leader
                                       completes it within its finalize interval; 200 when it
                                       was final already)
    POST /append?collection=SCHEMA.NAME   JSON lines of rows, or an Arrow IPC stream
                                       (Content-Type application/vnd.apache.arrow.stream);
                                       leader only (409 on read-only); an ``Idempotency-Key``
                                       header makes a retry return the first answer
                                       (``Idempotent-Replayed: true``), no write
    GET  /read?collection=SCHEMA.NAME[&as_of=T]   JSON lines, migrated to this release's
                                       schema; an Arrow IPC stream with ``Accept:
                                       application/vnd.apache.arrow.stream``

The server only translates HTTP to calls on a :class:`SidecarApi` and errors to status codes; it
never changes the process's state itself. Errors answer a JSON body: ``CatalogError.to_json()``
or ``{"error": ..., "message": ...}``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from http import HTTPStatus
from typing import Any, Final, Protocol

import attrs
import pyarrow as pa
import structlog
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from catalog.errors import (
    CatalogError,
)
from catalog_client.media import ARROW_STREAM_TYPE, JSON_LINES_TYPE, JSON_TYPE
from catalog_client.requestids import REQUEST_ID_HEADER, usable_request_id
from orchestrator.dataplane.idempotency import IDEMPOTENCY_HEADER
from orchestrator.dataplane.writer import AppendRequest
from orchestrator.http.authorization import OPEN, READ, WRITE, AccessPolicy
from orchestrator.http.exchange import BODY_LIMIT_KEY, MAX_APPEND_ROWS
from orchestrator.http.refusals import HttpError, json_response
from orchestrator.machine.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestrator.machine.readiness import Readiness
from orchestrator.sidecar.refusals import body_of, refusal_of
from orchestrator.status.web import page_response
from orchestrator.wire.ipc import READ_BATCH_ROWS, EncodedStreams, stream_chunks
from orchestrator.wire.jsonvalues import loads
from orchestrator.wire.ndjson import json_lines

log = structlog.get_logger(__name__)

#: What a POST body must be (415 otherwise): a simple cross-site request cannot send these.
POST_TYPES = frozenset({JSON_TYPE, JSON_LINES_TYPE, ARROW_STREAM_TYPE})
#: Seconds a 503 answer asks the client to wait (Retry-After), unless the error says.
RETRY_AFTER = 1


#: Makes the answer of ``GET /``: a self-contained HTML page.
Page = Callable[[], Response]


class SidecarApi(Protocol):
    """What the HTTP server needs from the sidecar; every method is safe from any thread."""

    def readiness(self) -> Readiness: ...

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]: ...

    def history_json(self) -> list[dict[str, Any]]: ...

    def collections_json(self) -> Mapping[str, Any]: ...

    def metrics_text(self) -> bytes: ...

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]: ...

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]: ...

    def append(self, request: AppendRequest) -> Mapping[str, Any]: ...

    def read_table(self, collection: str, as_of: int | None) -> pa.Table: ...

    def refused(self, error: str) -> None:
        """A request was refused with ``error`` (counted for alerts)."""


#: The role each endpoint needs once a token is configured (orchestrator.http.authorization):
#: ``metrics`` is open with ``--metrics-public``.
ROLES: Final[Mapping[str, str]] = {
    "healthz": OPEN,
    "openapi": OPEN,
    "readyz": OPEN,
    "page": OPEN,
    "metrics": READ,
    "status": READ,
    "history": READ,
    "collections": READ,
    "read": READ,
    "promote": WRITE,
    "finalize": WRITE,
    "append": WRITE,
}

#: Endpoints a Host check never refuses (probes carry whatever address the prober used).
PROBES: Final = frozenset({"healthz", "readyz"})


def roles(*, metrics_public: bool) -> Mapping[str, str]:
    """:data:`ROLES`, with ``metrics`` open when ``metrics_public``."""
    return {**ROLES, "metrics": OPEN} if metrics_public else ROLES


ROUTES = Map(
    [
        Rule("/", endpoint="page", methods=["GET"]),
        Rule("/history", endpoint="history", methods=["GET"]),
        Rule("/healthz", endpoint="healthz", methods=["GET"]),
        Rule("/readyz", endpoint="readyz", methods=["GET"]),
        Rule("/status", endpoint="status", methods=["GET"]),
        Rule("/collections", endpoint="collections", methods=["GET"]),
        Rule("/metrics", endpoint="metrics", methods=["GET"]),
        Rule("/read", endpoint="read", methods=["GET"]),
        Rule("/promote", endpoint="promote", methods=["POST"]),
        Rule("/finalize", endpoint="finalize", methods=["POST"]),
        Rule("/append", endpoint="append", methods=["POST"]),
        Rule("/openapi.json", endpoint="openapi", methods=["GET"]),
    ],
    strict_slashes=False,
)

_TEXT = "text/plain; charset=utf-8"


REPLAYED_HEADER = "Idempotent-Replayed"


def _body(request: Request) -> bytes:
    """The request's body, which the server read whole, or 413 when it passed the limit (the
    server stopped reading there; the limit is in the environ)."""
    limit = request.environ.get(BODY_LIMIT_KEY)
    if limit is not None:
        raise HttpError(
                        "body-too-large",
            f"request body is above the {limit}-byte limit (--http-max-body); reading stopped "
            "there",
            limit=limit,
        )
    return request.get_data()


def _media_type(request: Request) -> str:
    return (request.headers.get("Content-Type") or "").partition(";")[0].strip().lower()


@attrs.frozen
class SidecarApp:
    """The WSGI application: checks the Host and the caller's credential, routes a request to
    one endpoint, errors to status codes."""

    api: SidecarApi
    policy: AccessPolicy = attrs.field(factory=lambda: AccessPolicy(roles=ROLES, probes=PROBES))
    max_rows: int = MAX_APPEND_ROWS
    #: The OpenAPI description served at ``/openapi.json`` (orchestrator.sidecar.openapi).
    description: Mapping[str, Any] = attrs.field(factory=dict)
    #: What ``GET /`` answers (the live status page unless told).
    page_of: Page = page_response
    #: The Arrow streams of the tables answered whole (a snapshot kept in memory is answered
    #: again and again).
    streams: EncodedStreams = attrs.field(factory=EncodedStreams)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        # The client's id of the call (or one made here): every log line of the request
        # carries it, and the answer gives it back.
        request_id = usable_request_id(request.headers.get(REQUEST_ID_HEADER))
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            began = time.monotonic()
            response = self.respond(request)
            seconds = round(time.monotonic() - began, 4)
            # Refusals at info, with their code (what an operator looks for by a client's id),
            # the rest at debug: thousands of appends a second would drown the log.
            if response.status_code >= 400:
                log.info(
                    "http_answered", method=request.method, path=request.path,
                    status=response.status_code, error=_error_code(response), seconds=seconds,
                )  # fmt: skip
            else:
                log.debug(
                    "http_answered", method=request.method, path=request.path,
                    status=response.status_code, seconds=seconds,
                )  # fmt: skip
        response.headers[REQUEST_ID_HEADER] = request_id
        return response(environ, start_response)

    def respond(self, request: Request) -> Response:
        try:
            endpoint, _args = ROUTES.bind_to_environ(request.environ).match()
            handler: Callable[[Request], Response] = getattr(self, endpoint)
            host = request.headers.get("Host")
            if not self.policy.allows_host(endpoint, host):
                raise HttpError(
                                        "misdirected-host",
                    f"this sidecar does not answer to Host {host!r}: name it with "
                    "--http-allowed-host (a guard against DNS rebinding)",
                    host=host,
                )
            self.policy.authorize(endpoint, request.headers.get("Authorization"))
            if request.method == "POST" and _media_type(request) not in POST_TYPES:
                raise HttpError(
                                        "unsupported-media-type",
                    f"POST {request.path} takes Content-Type {' or '.join(sorted(POST_TYPES))}, "
                    f"not {_media_type(request) or 'none'}",
                )
            return handler(request)
        except MethodNotAllowed as exc:
            methods = "/".join(m for m in exc.valid_methods or () if m != "HEAD")
            response = json_response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": "method-not-allowed", "message": f"{request.path} takes {methods}"},
            )
            response.headers["Allow"] = ", ".join(exc.valid_methods or ())  # RFC 9110
            return response
        except NotFound:
            return json_response(
                HTTPStatus.NOT_FOUND,
                {"error": "not-found", "message": f"no endpoint {request.path}"},
            )
        except HTTPException as exc:  # werkzeug's own (a body it could not parse)
            return json_response(
                HTTPStatus.BAD_REQUEST, {"error": "bad-request", "message": exc.description}
            )
        except HttpError as exc:
            self.api.refused(exc.error)
            return json_response(exc.status, exc.body)
        except CatalogError as exc:
            refusal = refusal_of(exc)
            status = refusal.status
            self.api.refused(refusal.code)
            response = json_response(status, body_of(exc))
            if status == HTTPStatus.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = 'Bearer realm="catalog-upgrade"'
            if status == HTTPStatus.SERVICE_UNAVAILABLE:  # a state that passes: say when to retry
                response.headers["Retry-After"] = str(exc.details.get("retry_after", RETRY_AFTER))
            return response
        except Exception as exc:  # a bug: answer 500 and keep serving
            log.exception("http_handler_failed", path=request.path)
            return json_response(
                HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "unexpected", "message": str(exc)}
            )

    # -- endpoints --------------------------------------------------------------------------

    def openapi(self, _request: Request) -> Response:
        return json_response(HTTPStatus.OK, self.description)

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
        return self.page_of()

    def history(self, _request: Request) -> Response:
        return json_response(HTTPStatus.OK, self.api.history_json())

    def status(self, request: Request) -> Response:
        return json_response(
            HTTPStatus.OK, self.api.status_json(coverage="coverage" in request.args)
        )

    def collections(self, _request: Request) -> Response:
        return json_response(HTTPStatus.OK, self.api.collections_json())

    def metrics(self, _request: Request) -> Response:
        return Response(self.api.metrics_text(), content_type=METRICS_CONTENT_TYPE)

    def promote(self, request: Request) -> Response:
        body = _body(request)
        generation = _int_param(request.args, "deploy_generation")
        if generation is None and body.strip():
            try:  # numbers as strict as in appends: 1.5 is no generation, nor is NaN
                data = loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise HttpError(
                    "bad-json", f"promote body is not JSON: {exc}"
                ) from exc
            if (
                not isinstance(data, (dict, int))
                or isinstance(data, bool)
                or (isinstance(data, dict) and set(data) != {"deploy_generation"})
            ):
                raise HttpError(
                                        "bad-json",
                    'promote body must be {"deploy_generation": G} (or G)',
                )
            raw = data.get("deploy_generation") if isinstance(data, dict) else data
            generation = _as_int(raw, "deploy_generation")
        who = self.policy.authorize("promote", request.headers.get("Authorization"))
        caller = f"http:{who or 'anonymous'}@{request.remote_addr or '?'}"
        log.info("promotion_requested", deploy_generation=generation, requested_by=caller)
        return json_response(HTTPStatus.OK, self.api.promote(generation, caller))

    def finalize(self, request: Request) -> Response:
        _body(request)  # read (and bounded) like any body; nothing in it is used
        who = self.policy.authorize("finalize", request.headers.get("Authorization"))
        caller = f"http:{who or 'anonymous'}@{request.remote_addr or '?'}"
        log.info("finalization_requested_over_http", requested_by=caller)
        answer = self.api.finalize(request.args.get("version"), caller)
        status = HTTPStatus.OK if answer.get("already_final") else HTTPStatus.ACCEPTED
        return json_response(status, answer)

    def append(self, request: Request) -> Response:
        collection = _required(request.args, "collection")
        key = request.headers.get(IDEMPOTENCY_HEADER)
        body = _body(request)
        arrow = _media_type(request) == ARROW_STREAM_TYPE
        answer = self.api.append(AppendRequest(collection, body, key, arrow, self.max_rows))
        response = json_response(HTTPStatus.OK, answer)
        if answer.get("replayed"):
            response.headers[REPLAYED_HEADER] = "true"
        return response

    def read(self, request: Request) -> Response:
        collection = _required(request.args, "collection")
        as_of = _int_param(request.args, "as_of")
        table = self.api.read_table(collection, as_of)
        if ARROW_STREAM_TYPE in (request.headers.get("Accept") or "").lower():
            if table.num_rows <= READ_BATCH_ROWS:  # whole: encoded once per table
                return Response(self.streams.encoded(table), content_type=ARROW_STREAM_TYPE)
            return Response(stream_chunks(table), content_type=ARROW_STREAM_TYPE)
        return Response(_answer(json_lines(table), table), content_type=JSON_LINES_TYPE)


def _error_code(response: Response) -> str | None:
    """The ``error`` code of a refusal's JSON body (None: not one)."""
    try:
        body = json.loads(response.get_data())
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


def _answer(chunks: Iterator[bytes], table: pa.Table) -> bytes | Iterator[bytes]:
    """A read's body: whole, with a Content-Length, when ``table`` is one batch of rows;
    else streamed batch by batch (chunked: the process holds one batch serialized). Each
    streamed chunk is made on a worker thread and handed to the server's loop, two thread
    switches that cost milliseconds each while appends keep the GIL busy: a catalog read,
    small, is answered in one."""
    return b"".join(chunks) if table.num_rows <= READ_BATCH_ROWS else chunks


def _required(query: Mapping[str, str], name: str) -> str:
    value = query.get(name)
    if not value:
        raise HttpError(
            "missing-parameter", f"query parameter {name} is required"
        )
    return value


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    """An integer parameter, None when absent; an empty one (``as_of=``) is refused as any
    other non-integer, not read as absent."""
    value = query.get(name)
    return None if value is None else _as_int(value, name)


def _as_int(value: Any, name: str) -> int | None:
    """An integer from a query parameter's text or a JSON integer: never a float, a boolean
    or a number in a string of another form (``1.5``, ``1e2``, `` 7``)."""
    if value is None:
        return None
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise HttpError(
        "bad-parameter", f"{name} must be an integer, not {value!r}"
    )


_INTEGER = re.compile(r"-?[0-9]{1,4000}")  # Python reads no longer integer text
