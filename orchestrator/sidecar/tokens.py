"""Bearer tokens for the sidecar's writing endpoints.

``POST /promote`` and ``POST /append`` change the environment; with ``--http-token-file`` they
require ``Authorization: Bearer <token>``: 401 (with ``WWW-Authenticate: Bearer``) without one,
403 with a wrong one, compared in constant time. Probes (``/healthz``, ``/readyz``) and
``/metrics`` stay open for kubelets and scrapers; ``/status`` and ``GET /read`` answer anyone who
can reach the port, as before.

A sidecar listening beyond loopback without a token would take promotions and appends from the
whole network: it refuses to start unless ``--http-insecure`` says that is meant.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

import attrs

from catalog.errors import ConfigurationError, ForbiddenError, UnauthorizedError

__all__ = ["BearerToken", "check_exposure"]

_MIN_LENGTH = 16


@attrs.frozen(repr=False)
class BearerToken:
    """The token a writing request must carry (never printed: ``repr`` hides it)."""

    value: bytes
    source: str = ""

    def __repr__(self) -> str:
        return f"BearerToken(from {self.source or 'memory'})"

    @classmethod
    def from_file(cls, path: Path) -> BearerToken:
        """The token in ``path`` (surrounding whitespace ignored); ConfigurationError (exit 2)
        naming the file when it cannot be read or holds no usable token."""
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"cannot read the HTTP token file {path}: {getattr(exc, 'strerror', None) or exc}",
                path=str(path),
            ) from exc
        if len(text) < _MIN_LENGTH or any(c.isspace() for c in text) or not text.isascii():
            raise ConfigurationError(
                f"the HTTP token file {path} must hold one token of at least {_MIN_LENGTH} "
                "printable ASCII characters without spaces",
                path=str(path),
            )
        return cls(text.encode(), str(path))

    def check(self, authorization: str | None) -> None:
        """Pass, or UnauthorizedError (no bearer token, HTTP 401) / ForbiddenError (a wrong
        one, HTTP 403)."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise UnauthorizedError(
                "this endpoint needs an Authorization: Bearer <token> header",
            )
        if not hmac.compare_digest(given.strip().encode(), self.value):
            raise ForbiddenError("the bearer token is not valid")


def check_exposure(host: str, token: BearerToken | None, insecure: bool) -> None:
    """ConfigurationError (exit 2) for a non-loopback listener without a token, unless
    ``insecure`` was asked for explicitly."""
    if token is not None or insecure or _is_loopback(host):
        return
    raise ConfigurationError(
        f"--http {host} listens beyond loopback without --http-token-file: anyone reaching the "
        "port could promote and append. Give a token file, or --http-insecure if that is meant",
        host=host,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
