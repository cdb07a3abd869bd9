"""The refusals the HTTP layer makes itself, with their ``error`` codes and statuses.

The server refuses before any endpoint runs (a malformed request, one too slow, too many
connections); the application refuses a request's form (a body too large, a missing parameter)
or its credential. Each code is kebab-case and is one row of the API's table of every code
(:mod:`orchestrator.sidecar.refusals` adds the API's own to these).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

import attrs
from werkzeug.wrappers import Response

from catalog.errors import CatalogError
from catalog_client.media import JSON_TYPE

__all__ = [
    "APPLICATION",
    "HTTP",
    "HTTP_REFUSALS",
    "ForbiddenError",
    "HttpError",
    "Refusal",
    "UnauthorizedError",
    "json_response",
]

#: The layer that makes a refusal: the HTTP server itself, before any endpoint runs (every
#: endpoint may answer these), or the application behind it (the endpoints with a credential).
HTTP: Final = "http"
APPLICATION: Final = "application"


@attrs.frozen
class Refusal:
    """One ``error`` code: its status, when it is sent, and the errors that answer it."""

    code: str
    status: HTTPStatus
    when: str
    layer: str = APPLICATION
    #: The error class answered with this code (its subclasses too, unless they have their own).
    error: type[CatalogError] | None = None


def own(error: type[CatalogError], status: HTTPStatus, when: str) -> Refusal:
    """The refusal of an error class with a code of its own."""
    assert error.code is not None, error
    return Refusal(error.code, status, when, error=error)


class UnauthorizedError(CatalogError):
    """A request to a protected endpoint without a bearer token."""

    code = "unauthorized"


class ForbiddenError(CatalogError):
    """A request to a protected endpoint with a wrong bearer token."""

    code = "forbidden"


S: Final = HTTPStatus
#: The HTTP layer's codes, by status.
HTTP_REFUSALS: Final[tuple[Refusal, ...]] = (
    Refusal("bad-request", S.BAD_REQUEST, "a request that is not HTTP as the server reads it",
            HTTP),
    Refusal("bad-json", S.BAD_REQUEST, "a JSON body that is not the object the endpoint takes",
            HTTP),
    Refusal("missing-parameter", S.BAD_REQUEST, "a required query parameter is missing", HTTP),
    Refusal("bad-parameter", S.BAD_REQUEST, "a query parameter that is not of its form", HTTP),
    own(UnauthorizedError, S.UNAUTHORIZED, "no token"),
    own(ForbiddenError, S.FORBIDDEN, "a wrong token, or the read token where the write token "
        "is needed"),
    Refusal("not-found", S.NOT_FOUND, "no such endpoint", HTTP),
    Refusal("method-not-allowed", S.METHOD_NOT_ALLOWED, "a method the endpoint does not take "
            "(`Allow` lists those it takes)", HTTP),
    Refusal("request-timeout", S.REQUEST_TIMEOUT, "headers or body too slow", HTTP),
    Refusal("body-too-large", S.REQUEST_ENTITY_TOO_LARGE, "a body over `--http-max-body`", HTTP),
    Refusal("unsupported-media-type", S.UNSUPPORTED_MEDIA_TYPE, "a POST body of a type the "
            "endpoint does not take", HTTP),
    Refusal("misdirected-host", S.MISDIRECTED_REQUEST, "a `Host` the sidecar does not serve "
            "(`--http-allowed-host`)", HTTP),
    Refusal("headers-too-large", S.REQUEST_HEADER_FIELDS_TOO_LARGE, "a request line and headers "
            "past 64 KiB", HTTP),
    Refusal("unexpected", S.INTERNAL_SERVER_ERROR, "a defect: the log has its traceback"),
    Refusal("too-many-connections", S.SERVICE_UNAVAILABLE, "the server holds its most "
            "connections", HTTP),
    Refusal("stopping", S.SERVICE_UNAVAILABLE, "the process is stopping (it drains the "
            "requests it is answering): ask another sidecar", HTTP),
    Refusal("http-version-not-supported", S.HTTP_VERSION_NOT_SUPPORTED, "anything but HTTP/1.0 "
            "and 1.1", HTTP),
)  # fmt: skip

_STATUS: Final[Mapping[str, HTTPStatus]] = {r.code: r.status for r in HTTP_REFUSALS}


class HttpError(CatalogError):
    """A request the HTTP layer refuses itself (a body too large, bad JSON, a missing
    parameter), under one of its codes.

    Part of the one hierarchy; its JSON body names the refusal (``error``) instead of the class.
    An API's own refusals are domain errors instead (:mod:`orchestrator.sidecar.refusals`).
    """

    def __init__(self, error: str, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.status = _STATUS[error]  # the code's status: the table is its home
        self.error = error

    @property
    def body(self) -> dict[str, Any]:
        return {"error": self.error, "message": self.message, **self.details}


def json_response(status: HTTPStatus, value: Any) -> Response:
    """The API's JSON answer (errors included): one format for the app and the server."""
    return Response(json.dumps(value, indent=2) + "\n", status=status, content_type=JSON_TYPE)
