"""Test certificates: a CA and the server and client certificates it signs (cryptography)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@attrs.frozen
class Identity:
    """A certificate and its key as PEM files, and both in one file (a ZooKeeper key store)."""

    cert: Path
    key: Path
    keystore: Path


def _pem(obj: x509.Certificate) -> bytes:
    return obj.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@attrs.define
class CertificateAuthority:
    """A certificate authority writing its files below ``directory``."""

    directory: Path
    name: str = "test-ca"
    key: ec.EllipticCurvePrivateKey = attrs.field(
        factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    cert: x509.Certificate = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file.write_bytes(_pem(self.cert))

    @property
    def ca_file(self) -> Path:
        return self.directory / f"{self.name}.pem"

    def issue(self, name: str, *, expired: bool = False) -> Identity:
        """A certificate for ``name`` valid for localhost and 127.0.0.1 (with ``expired``, one
        whose validity ended yesterday)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2 if expired else 0)
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        identity = Identity(
            cert=self.directory / f"{name}.pem",
            key=self.directory / f"{name}.key",
            keystore=self.directory / f"{name}-keystore.pem",
        )
        identity.cert.write_bytes(_pem(cert))
        identity.key.write_bytes(_key_pem(key))
        identity.keystore.write_bytes(_key_pem(key) + _pem(cert))
        return identity
