"""TLS for the HTTP server: ``--http-tls-cert`` and ``--http-tls-key`` (PEM files)."""

from __future__ import annotations

import ssl
from pathlib import Path

from catalog.errors import ConfigurationError
from orchestrator.certificates import check_certificates

__all__ = ["server_context"]


def server_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """The server's SSL context (TLS 1.2 or newer); ConfigurationError (exit 2) naming the files
    when they cannot be read or are not a certificate and its key."""
    check_certificates(cert, "--http-tls-cert")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigurationError(
            f"--http-tls-cert/--http-tls-key: {cert} and {key} are not a readable certificate "
            f"and its private key: {reason}",
            cert=str(cert),
            key=str(key),
        ) from exc
    return context
