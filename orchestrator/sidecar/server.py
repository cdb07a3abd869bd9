"""The API's server: the HTTP server (:mod:`orchestrator.http`) answering with
:class:`~orchestrator.sidecar.api.SidecarApp`, as the ``--http-*`` options describe it. The
sidecar, ``status --serve`` and ``fleet --serve`` serve their APIs through it alike.
"""

from __future__ import annotations

import ssl
from importlib import metadata
from pathlib import Path

from orchestrator.http.authorization import AccessPolicy, HttpAccess
from orchestrator.http.exchange import ServerLimits
from orchestrator.http.server import HttpServer
from orchestrator.http.tls import server_context
from orchestrator.http.tokens import TokenFile, check_exposure
from orchestrator.sidecar.api import PROBES, Page, SidecarApi, SidecarApp, roles
from orchestrator.sidecar.openapi import openapi_document
from orchestrator.status.web import page_response

__all__ = ["api_server", "configured_server"]


def api_server(
    api: SidecarApi,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    policy: AccessPolicy | None = None,
    ssl_context: ssl.SSLContext | None = None,
    limits: ServerLimits | None = None,
    page: Page = page_response,
) -> HttpServer:
    """A server of ``api`` on ``host:port`` (port 0: a free one), not started: who may ask what
    (``policy``; default: anyone), HTTPS when ``ssl_context``, and what ``GET /`` answers."""
    limits = limits or ServerLimits()
    app = SidecarApp(
        api,
        policy or AccessPolicy(roles=roles(metrics_public=False), probes=PROBES),
        limits.max_append_rows,
        openapi_document(_version()),
        page,
    )
    return HttpServer(app, host, port, ssl_context, limits)


def configured_server(
    api: SidecarApi,
    http_host: str,
    http_port: int,
    *,
    access: HttpAccess | None = None,
    limits: ServerLimits | None = None,
    page: Page = page_response,
) -> HttpServer:
    """A server of ``api`` as the ``--http-*`` options describe it (the sidecar's, ``status
    --serve``'s and ``fleet --serve``'s alike): who may ask what (``access``: tokens, allowed
    hosts, TLS) and the limits. A listener beyond loopback without a token is refused (exit 2)
    unless ``access.insecure``."""
    access = access or HttpAccess()
    write = TokenFile(Path(access.token_file)) if access.token_file else None
    read = TokenFile(Path(access.read_token_file)) if access.read_token_file else None
    check_exposure(http_host, write, access.insecure)
    policy = AccessPolicy.of(
        write=write,
        read=read,
        roles=roles(metrics_public=access.metrics_public),
        probes=PROBES,
        listen_host=http_host,
        allowed_hosts=access.allowed_hosts,
    )
    cert, key = access.tls_cert, access.tls_key
    tls = server_context(cert, key) if cert and key else None
    return api_server(
        api, http_host, http_port, policy=policy, ssl_context=tls, limits=limits, page=page
    )


def _version() -> str:
    try:
        return metadata.version("catalog-upgrade")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"
