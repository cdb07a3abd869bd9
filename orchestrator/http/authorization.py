"""Who may ask a server what: its HTTP credentials, their roles, and the hosts it answers.

Each endpoint needs a role, once any token is configured (``--http-token-file``,
``--http-read-token-file``): ``open`` (anyone), ``read`` (the read token or the write token)
or ``write`` (the write token only). The API names the role of each of its endpoints
(:data:`orchestrator.sidecar.api.ROLES`); an endpoint it does not name needs the write token.

Without a token everything is open (a loopback listener; a wider one needs a token unless
``--http-insecure``). A missing token is 401, a wrong one (or the read token on a write) 403.

Hosts: a request's ``Host`` must name this machine's loopback (``localhost``, ``127.0.0.1``,
``[::1]``), the address the server listens on, or one of ``--http-allowed-host`` (``*``: any);
otherwise 421. That is what stops a web page in an operator's browser from reaching a
loopback sidecar through DNS rebinding. Probes (the endpoints the API names as such) are
exempt: kubelets send the pod's address.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from catalog.errors import ConfigurationError
from orchestrator.http.refusals import ForbiddenError
from orchestrator.http.tokens import TokenFile, bearer_of

OPEN: Final = "open"
READ: Final = "read"
WRITE: Final = "write"

_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(host: str) -> str:
    """The name in a ``Host`` header or an address, without its port or brackets, lowercased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


@attrs.frozen
class HttpAccess:
    """Who may ask a server what, as the ``--http-*`` access options give it (the sidecar's,
    ``status --serve``'s and ``fleet --serve``'s alike): the token files, the hosts answered
    besides loopback, whether metrics are public, whether a wide listener may go without a
    token, and the certificate and key of HTTPS."""

    token_file: str | None = None
    read_token_file: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    metrics_public: bool = False
    insecure: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


@attrs.frozen
class AccessPolicy:
    """A server's HTTP credentials, the role each endpoint needs, and the hosts it answers
    to."""

    write: TokenFile | None = None
    read: TokenFile | None = None
    #: The role of each endpoint, by name (one not named needs the write token).
    roles: Mapping[str, str] = attrs.field(factory=dict)
    #: Endpoints a Host check never refuses (probes carry whatever address the prober used).
    probes: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = _LOOPBACK_NAMES

    @classmethod
    def of(
        cls,
        *,
        write: TokenFile | None,
        read: TokenFile | None,
        roles: Mapping[str, str],
        probes: Iterable[str],
        listen_host: str,
        allowed_hosts: Iterable[str] = (),
    ) -> AccessPolicy:
        if read is not None and write is None:
            raise ConfigurationError(
                "--http-read-token-file needs --http-token-file: writes would be open to anyone "
                "while reads need a token",
                suggestion="add --http-token-file",
            )
        hosts = {host_name(h) for h in allowed_hosts} | _LOOPBACK_NAMES
        if host_name(listen_host) not in ("0.0.0.0", "::", ""):
            hosts.add(host_name(listen_host))
        return cls(write, read, roles, frozenset(probes), frozenset(hosts))

    @property
    def protected(self) -> bool:
        return self.write is not None

    def allows_host(self, endpoint: str, host: str | None) -> bool:
        """Whether a request to ``endpoint`` with header ``Host: host`` may be answered."""
        if endpoint in self.probes or "*" in self.allowed_hosts:
            return True
        return host is not None and host_name(host) in self.allowed_hosts

    def authorize(self, endpoint: str, authorization: str | None) -> str | None:
        """The caller's credential name (None: anonymous) if it may call ``endpoint``;
        UnauthorizedError (no token, 401) or ForbiddenError (a wrong one, 403) otherwise."""
        role = self.roles.get(endpoint, WRITE)
        if role == OPEN or self.write is None:
            return None
        given = bearer_of(authorization)
        if self.write.matches(given):
            return self.write.name
        if self.read is not None and self.read.matches(given):
            if role == READ:
                return self.read.name
            raise ForbiddenError(
                f"the read token ({self.read.name}) cannot {endpoint}: it needs the write token"
            )
        raise ForbiddenError("the bearer token is not valid")
