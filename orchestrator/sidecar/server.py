"""The sidecar's HTTP server: the listening socket (a taken port is our error, exit 2) and the
WSGI application (:mod:`orchestrator.sidecar.http`) served on a daemon thread."""

from __future__ import annotations

import socket
import ssl
import threading

import attrs
import structlog
from werkzeug.serving import BaseWSGIServer, make_server

from catalog.errors import BadInputError, ConfigurationError
from orchestrator.sidecar.access import AccessPolicy
from orchestrator.sidecar.http import MAX_BODY_BYTES, SidecarApi, SidecarApp

log = structlog.get_logger(__name__)


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
class SidecarHttpServer:
    """werkzeug's threaded WSGI server on its own daemon thread; ``address`` is the bound one."""

    api: SidecarApi
    host: str = "127.0.0.1"
    port: int = 0
    policy: AccessPolicy = attrs.field(factory=AccessPolicy)
    # HTTPS when given (orchestrator.sidecar.tls).
    ssl_context: ssl.SSLContext | None = None
    max_body: int = MAX_BODY_BYTES
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
                SidecarApp(self.api, self.policy, self.max_body),
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
