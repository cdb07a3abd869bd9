"""The status over HTTP: the live page and the documents it polls, for a sidecar and for
``catalog-upgrade status --serve`` (which needs no sidecar).

    GET /                     the live status page (orchestrator.status.page)
    GET /status[?coverage]    the ``status --json`` document (with lazy-migration coverage)
    GET /history              the upgrade history, oldest first (``history --json`` rows)
    GET /healthz              200 while the server runs (``status --serve`` only)

Both servers read ZooKeeper on every request; the page polls once a second.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import attrs
import structlog
from werkzeug.routing import Map, Rule
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

from catalog.consensus import Consensus
from catalog.errors import BadInputError, CatalogError
from orchestrator.history import read_history
from orchestrator.status.coverage import read_coverage
from orchestrator.status.page import STATUS_PAGE
from orchestrator.status.read import read_status

__all__ = ["StatusWebApp", "history_document", "status_document", "status_server"]

log = structlog.get_logger(__name__)

PAGE_TYPE = "text/html; charset=utf-8"


def status_document(consensus: Consensus, *, coverage: bool = False) -> dict[str, Any]:
    """``status --json``, plus ``coverage`` when asked."""
    document = read_status(consensus).to_json()
    if coverage:
        document["coverage"] = read_coverage(consensus).to_json()
    return document


def history_document(consensus: Consensus) -> list[dict[str, Any]]:
    return [record.to_json() for record in read_history(consensus)]


def page_response() -> Response:
    return Response(STATUS_PAGE, content_type=PAGE_TYPE, headers={"Cache-Control": "no-store"})


def json_response(value: Any, status: int = HTTPStatus.OK) -> Response:
    return Response(json.dumps(value, indent=2) + "\n", status=status,
                    content_type="application/json")  # fmt: skip


ROUTES = Map(
    [
        Rule("/", endpoint="page"),
        Rule("/status", endpoint="status"),
        Rule("/history", endpoint="history"),
        Rule("/healthz", endpoint="healthz"),
    ],
    strict_slashes=False,
)


@attrs.frozen
class StatusWebApp:
    """The WSGI application of ``status --serve``: read-only, one environment."""

    consensus: Consensus

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        try:
            endpoint, _ = ROUTES.bind_to_environ(environ).match()
            response = self._respond(endpoint, request)
        except CatalogError as exc:
            response = json_response(exc.to_json(), HTTPStatus.SERVICE_UNAVAILABLE)
        except Exception as exc:  # the response is an error, the server keeps serving
            if getattr(exc, "code", None) == HTTPStatus.NOT_FOUND:
                response = json_response({"error": "not-found"}, HTTPStatus.NOT_FOUND)
            else:
                log.exception("status_request_failed", path=request.path)
                response = json_response({"error": type(exc).__name__, "message": str(exc)},
                                         HTTPStatus.INTERNAL_SERVER_ERROR)  # fmt: skip
        return response(environ, start_response)

    def _respond(self, endpoint: str, request: Request) -> Response:
        if endpoint == "page":
            return page_response()
        if endpoint == "status":
            return json_response(
                status_document(self.consensus, coverage="coverage" in request.args)
            )
        if endpoint == "history":
            return json_response(history_document(self.consensus))
        return Response("ok\n", content_type="text/plain; charset=utf-8")


def status_server(consensus: Consensus, host: str, port: int) -> BaseWSGIServer:
    """A threaded HTTP server of the status page of ``consensus``'s environment, bound to
    ``host:port`` (call ``serve_forever``); BadInputError (exit 2) when it cannot bind."""
    try:
        server = make_server(host, port, StatusWebApp(consensus), threaded=True)
    except OSError as exc:
        raise BadInputError(
            f"cannot serve the status page on {host}:{port}: {exc.strerror or exc}",
            host=host,
            port=port,
        ) from exc
    log.info("status_page_serving", url=f"http://{host}:{server.server_port}/")
    return server
