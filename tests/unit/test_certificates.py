"""Certificate files checked at start (orchestrator.certificates): an expired or not yet valid
certificate, or a file holding none, is refused naming the option and the file."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from catalog.errors import BadInputError
from orchestrator.certificates import check_certificates
from support.pki import CertificateAuthority


def test_valid_certificates_are_counted(tmp_path: Path) -> None:
    """A CA file and an issued certificate pass; the count is the certificates in the file."""
    ca = CertificateAuthority(tmp_path)
    assert check_certificates(ca.ca_file, "--zk-tls-ca") == 1
    assert check_certificates(ca.issue("c").cert, "--zk-tls-cert") == 1


def test_an_expired_certificate_names_the_option_file_and_date(tmp_path: Path) -> None:
    """The error carries the option, the path and the expiry date, and maps to exit 2."""
    identity = CertificateAuthority(tmp_path).issue("old", expired=True)
    with pytest.raises(BadInputError) as info:
        check_certificates(identity.keystore, "--tls-keystore")
    message = info.value.message
    assert "--tls-keystore" in message and str(identity.keystore) in message
    assert "expired on" in message and "CN=old" in message
    assert info.value.exit_code == 2
    assert info.value.details["not_after"]


def test_a_certificate_not_yet_valid_points_at_the_clock(tmp_path: Path) -> None:
    """Checked at a moment before the certificate's start: the message suspects the clock."""
    ca = CertificateAuthority(tmp_path)
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    with pytest.raises(BadInputError, match="not valid before"):
        check_certificates(ca.ca_file, "--zk-tls-ca", now=past)


def test_files_without_certificates_are_refused(tmp_path: Path) -> None:
    """Garbage and a missing file are refused naming the file."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(BadInputError, match="holds no PEM certificate"):
        check_certificates(garbage, "--zk-tls-ca")
    with pytest.raises(BadInputError, match="cannot read"):
        check_certificates(tmp_path / "missing.pem", "--zk-tls-ca")
