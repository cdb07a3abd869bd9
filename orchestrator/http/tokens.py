"""Bearer tokens of a server's HTTP credentials (the roles are in
orchestrator.http.authorization).

A token lives in a file (``--http-token-file``, ``--http-read-token-file``): one token of at
least 16 printable ASCII characters. A :class:`TokenFile` reads it again whenever the file
changes, so rotating a credential needs no restart (a file that does not hold a usable token
meanwhile keeps the previous one, and says so in the log), and warns when group or others may
read it. Tokens are compared in constant time and never printed.

A sidecar listening beyond loopback without a token would take promotions and appends from the
whole network: it refuses to start unless ``--http-insecure`` says that is meant.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
import threading
from pathlib import Path

import attrs
import structlog

from catalog.errors import ConfigurationError
from orchestrator.http.refusals import ForbiddenError, UnauthorizedError

__all__ = ["BearerToken", "TokenFile", "bearer_of", "check_exposure"]

log = structlog.get_logger(__name__)

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
        if not self.matches(bearer_of(authorization)):
            raise ForbiddenError("the bearer token is not valid")

    def matches(self, given: bytes) -> bool:
        """``given`` is this token (constant time)."""
        return hmac.compare_digest(given, self.value)


def bearer_of(authorization: str | None) -> bytes:
    """The token of an ``Authorization: Bearer <token>`` header; UnauthorizedError (HTTP 401)
    when there is none."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise UnauthorizedError("this endpoint needs an Authorization: Bearer <token> header")
    return given.strip().encode()


class TokenFile:
    """A token file, read again whenever it changes (rotation without a restart)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._token = BearerToken.from_file(self.path)  # ConfigurationError (exit 2) at start
        self._seen = self._stat()
        self._warn_if_exposed()

    @property
    def name(self) -> str:
        """How the audit names a caller holding this token: the file's name."""
        return self.path.name

    def current(self) -> BearerToken:
        """The token the file holds now (re-read when its size, time or inode changed)."""
        seen = self._stat()
        if seen != self._seen:
            with self._lock:
                if seen != self._seen:
                    self._reload(seen)
        return self._token

    def matches(self, given: bytes) -> bool:
        return self.current().matches(given)

    def _reload(self, seen: tuple[int, int, int] | None) -> None:
        self._seen = seen
        try:
            token = BearerToken.from_file(self.path)
        except ConfigurationError as exc:  # half-written or removed: keep the previous one
            log.warning("http_token_file_unusable", path=str(self.path), reason=exc.message)
            return
        if not token.matches(self._token.value):
            log.info("http_token_rotated", path=str(self.path))
        self._token = token
        self._warn_if_exposed()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return (found.st_mtime_ns, found.st_size, found.st_ino)

    def _warn_if_exposed(self) -> None:
        try:
            mode = stat.S_IMODE(os.stat(self.path).st_mode)
        except OSError:
            return
        if mode & 0o077:
            log.warning(
                "http_token_file_readable_by_others",
                path=str(self.path),
                mode=f"{mode:04o}",
                fix=f"chmod 600 {self.path}",
            )


def check_exposure(host: str, token: object | None, insecure: bool) -> None:
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
