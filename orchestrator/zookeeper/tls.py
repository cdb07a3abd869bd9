"""TLS to ZooKeeper: the client's CA, certificate and key, and a server's PEM stores.

Clients: ``--zk-tls-ca``, ``--zk-tls-cert`` and ``--zk-tls-key`` (or ``CATALOG_UPGRADE_ZK_TLS_CA``,
``..._CERT``, ``..._KEY``) name PEM files; they are checked when given (readable, a CA that loads,
a certificate that matches its key: exit 2 naming the file), then every kazoo client of the
process connects with TLS and verifies the server against the CA.

Servers (``orchestrator.testing.zkserver``): ZooKeeper's Netty connection factory on the secure
client port, with a PEM key store (private key and certificate in one file) and a PEM trust store
(the CA), requiring client certificates. The Netty jars come with pyspark, like ZooKeeper's own.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Final

import attrs

from catalog.errors import BadInputError
from orchestrator.certificates import check_certificates

CA_ENV: Final = "CATALOG_UPGRADE_ZK_TLS_CA"


CERT_ENV: Final = "CATALOG_UPGRADE_ZK_TLS_CERT"


KEY_ENV: Final = "CATALOG_UPGRADE_ZK_TLS_KEY"


def _readable(path: str, option: str) -> str:
    try:
        Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError(
            f"{option}: cannot read {path}: {exc.strerror or exc}", option=option, path=path
        ) from exc
    return path


@attrs.frozen
class ZkTls:
    """A client's TLS files: the CA that signs the servers, and its own certificate and key."""

    ca: str
    cert: str | None = None
    key: str | None = None

    @classmethod
    def of(cls, ca: str | None, cert: str | None = None, key: str | None = None) -> ZkTls | None:
        """Checked files (None when no TLS option is given); BadInputError (exit 2) naming the
        file that is unreadable, not a CA, or a certificate that does not match its key."""
        if not (ca or cert or key):
            return None
        if not ca:
            raise BadInputError("--zk-tls-cert/--zk-tls-key need --zk-tls-ca (the servers' CA)")
        if bool(cert) != bool(key):
            raise BadInputError("--zk-tls-cert and --zk-tls-key go together")
        tls = cls(
            _readable(ca, "--zk-tls-ca"),
            cert and _readable(cert, "--zk-tls-cert"),
            key and _readable(key, "--zk-tls-key"),
        )
        check_certificates(ca, "--zk-tls-ca")
        if cert:
            check_certificates(cert, "--zk-tls-cert")
        tls.context()  # loads every file: a bad one is refused now, not at the handshake
        return tls

    @classmethod
    def from_environment(cls) -> ZkTls | None:
        env = os.environ
        return cls.of(env.get(CA_ENV), env.get(CERT_ENV), env.get(KEY_ENV))

    def context(self) -> ssl.SSLContext:
        """An SSL context verifying servers against the CA, presenting our certificate."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        try:
            context.load_verify_locations(cafile=self.ca)
        except (ssl.SSLError, OSError) as exc:
            raise BadInputError(f"--zk-tls-ca: {self.ca} holds no usable CA certificate: {exc}",
                                path=self.ca) from exc  # fmt: skip
        if self.cert and self.key:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, OSError) as exc:
                raise BadInputError(
                    f"--zk-tls-cert/--zk-tls-key: {self.cert} and {self.key} are not a "
                    f"certificate and its private key: {exc}",
                    path=self.cert,
                ) from exc
        return context

    def kazoo_options(self) -> dict[str, object]:
        """The KazooClient arguments of this TLS setting."""
        return {
            "use_ssl": True,
            "verify_certs": True,
            "ca": self.ca,
            "certfile": self.cert,
            "keyfile": self.key,
        }


@attrs.frozen
class ServerTls:
    """A ZooKeeper server's TLS: its key store (key and certificate, PEM) and trust store (the
    CA, PEM); clients must present a certificate the CA signed."""

    keystore: Path
    truststore: Path

    @classmethod
    def of(cls, keystore: Path, truststore: Path) -> ServerTls:
        """Checked stores: BadInputError (exit 2) naming a file whose certificate expired or
        that holds none."""
        check_certificates(keystore, "--tls-keystore")
        check_certificates(truststore, "--tls-truststore")
        return cls(keystore.resolve(), truststore.resolve())

    def config_lines(self) -> list[str]:
        return [
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.truststore}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=need",
        ]

    def client_context(self) -> ssl.SSLContext:
        """A context for the server's own checks (four-letter words over TLS): trusts the CA
        and presents the server's certificate, which the same CA signed."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.truststore))
        context.load_cert_chain(str(self.keystore))
        return context
