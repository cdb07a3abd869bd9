"""Certificate files checked before they are used: every certificate in a PEM file must be
valid now.

An expired (or not yet valid) certificate fails only at the TLS handshake otherwise, where
ZooKeeper's client sees a connection that "did not answer" and the HTTP server a client that
hangs up: neither names the file. Every TLS option (``--zk-tls-ca``, ``--zk-tls-cert``,
``--http-tls-cert``, the embedded server's ``--tls-keystore`` and ``--tls-truststore``) is
checked here at start, so the error names the file, the certificate's subject and its dates.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from catalog.errors import BadInputError

__all__ = ["check_certificates"]


def check_certificates(
    path: str | Path, option: str, *, now: datetime.datetime | None = None
) -> int:
    """How many certificates ``path`` holds, each valid at ``now`` (default: the current
    time); BadInputError (exit 2) naming ``option``, the file and the certificate when one is
    expired, not yet valid, or when the file holds no certificate."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError(
            f"{option}: cannot read {path}: {exc.strerror or exc}", option=option, path=str(path)
        ) from exc
    # Imported here: cryptography adds 35 ms to the start of every process, and only one
    # configured for TLS reads a certificate.
    from cryptography import x509

    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise BadInputError(
            f"{option}: {path} holds no PEM certificate: {exc}", option=option, path=str(path)
        ) from exc
    moment = now or datetime.datetime.now(datetime.UTC)
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string() or "(no subject)"
        before, after = certificate.not_valid_before_utc, certificate.not_valid_after_utc
        if moment > after:
            raise BadInputError(
                f"{option}: the certificate {subject} in {path} expired on "
                f"{after:%Y-%m-%d %H:%M:%S} UTC: renew it",
                option=option,
                path=str(path),
                not_after=after.isoformat(),
            )
        if moment < before:
            raise BadInputError(
                f"{option}: the certificate {subject} in {path} is not valid before "
                f"{before:%Y-%m-%d %H:%M:%S} UTC (is this machine's clock right?)",
                option=option,
                path=str(path),
                not_before=before.isoformat(),
            )
    return len(certificates)
