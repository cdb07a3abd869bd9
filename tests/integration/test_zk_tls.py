"""TLS to a real ZooKeeper (orchestrator.zookeeper.tls): the embedded server serves clients over TLS
only, with certificates the test's own CA issues; the CLI and a sidecar connect with
--zk-tls-ca/--zk-tls-cert/--zk-tls-key; a client that does not trust the server's CA, or speaks
plain TCP, is refused; bad certificate files exit 2 naming the file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog_client import SidecarClient
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, new_client
from orchestrator.zookeeper.tls import ServerTls, ZkTls
from support.pki import CertificateAuthority, Identity
from support.sidecars import SidecarProcess, cli, release_file, sidecars

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def client_identity(ca: CertificateAuthority) -> Identity:
    return ca.issue("client")


@pytest.fixture(scope="module")
def server(
    ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedZooKeeper]:
    identity = ca.issue("zookeeper")
    tls = ServerTls(identity.keystore, ca.ca_file)
    with EmbeddedZooKeeper(data_dir=tmp_path_factory.mktemp("zk-tls"), tls=tls) as running:
        yield running


def tls_options(ca_file: Path, identity: Identity) -> list[str]:
    return ["--zk-tls-ca", str(ca_file), "--zk-tls-cert", str(identity.cert),
            "--zk-tls-key", str(identity.key)]  # fmt: skip


@pytest.mark.slow
def test_cli_and_a_sidecar_work_over_tls(
    server: EmbeddedZooKeeper, ca: CertificateAuthority, client_identity: Identity, tmp_path: Path
) -> None:
    tls = tls_options(ca.ca_file, client_identity)
    client = new_client(
        server.hosts,
        tls=ZkTls.of(*map(str, (ca.ca_file, client_identity.cert, client_identity.key))),
    )
    client.start(timeout=15)
    try:
        with sidecars() as started:
            leader = SidecarProcess.start(
                client, server.hosts, "tls", "0.10.0", 1, process_id="tls-leader",
                log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True, extra=tls,
            )  # fmt: skip
            started.append(leader)
            leader.wait_state("serving")
            done = cli("status", "--json", "--zk", server.hosts, "--env", "tls", *tls)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["leader"]["id"] == "tls-leader"
    finally:
        close(client)


def test_clients_that_do_not_trust_the_server_or_speak_plain_tcp_are_refused(
    server: EmbeddedZooKeeper, client_identity: Identity, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("CATALOG_UPGRADE_CONNECT_TIMEOUT", "3")
    other = CertificateAuthority(tmp_path / "other", name="other-ca")
    env = ["--zk", server.hosts, "--env", "tls"]
    done = cli("status", *env, *tls_options(other.ca_file, client_identity))
    assert done.returncode == 1 and "over TLS" in done.stderr, done.stderr
    done = cli("status", *env)
    assert done.returncode == 1 and "did not answer" in done.stderr, done.stderr


def test_bad_certificate_files_exit_2_naming_the_file(
    server: EmbeddedZooKeeper, ca: CertificateAuthority, client_identity: Identity, tmp_path: Path
) -> None:
    env = ["--zk", server.hosts, "--env", "tls"]
    stranger = ca.issue("stranger")
    mismatched = ["--zk-tls-ca", str(ca.ca_file), "--zk-tls-cert", str(client_identity.cert),
                  "--zk-tls-key", str(stranger.key)]  # fmt: skip
    done = cli("status", *env, *mismatched)
    assert done.returncode == 2 and str(client_identity.cert) in done.stderr, done.stderr
    missing = tmp_path / "nowhere.pem"
    done = cli("status", *env, "--zk-tls-ca", str(missing))
    assert done.returncode == 2 and str(missing) in done.stderr, done.stderr
    not_a_ca = tmp_path / "garbage.pem"
    not_a_ca.write_text("not a certificate\n")
    done = cli("status", *env, "--zk-tls-ca", str(not_a_ca))
    assert done.returncode == 2 and str(not_a_ca) in done.stderr, done.stderr


def test_expired_certificates_are_named_at_start_not_at_the_handshake(
    server: EmbeddedZooKeeper, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """An expired client certificate, HTTPS certificate or server key store exits 2 naming the
    option, the file and the date it expired, before any connection or server starts."""
    expired = ca.issue("expired-client", expired=True)
    env = ["--zk", server.hosts, "--env", "tls-expired"]
    done = cli("status", *env, *tls_options(ca.ca_file, expired))
    assert done.returncode == 2, done.stderr
    assert "--zk-tls-cert" in done.stderr and str(expired.cert) in done.stderr, done.stderr
    assert "expired on" in done.stderr, done.stderr
    done = cli(
        "zookeeper", "--data-dir", str(tmp_path / "zk"),
        "--tls-keystore", str(expired.keystore), "--tls-truststore", str(ca.ca_file),
    )  # fmt: skip
    assert done.returncode == 2 and str(expired.keystore) in done.stderr, done.stderr
    assert not (tmp_path / "zk").exists()
    done = cli(
        "sidecar", *env, "--release", str(release_file("0.10.0")), "--deploy-generation", "1",
        "--blob", str(tmp_path / "blob"), "--http-tls-cert", str(expired.cert),
        "--http-tls-key", str(expired.key), "--zk-tls-ca", str(ca.ca_file),
    )  # fmt: skip
    assert done.returncode == 2 and "--http-tls-cert" in done.stderr, done.stderr
    assert str(expired.cert) in done.stderr, done.stderr


@pytest.mark.slow
def test_the_sidecar_serves_https_and_refuses_bad_tls_files(
    server: EmbeddedZooKeeper, ca: CertificateAuthority, client_identity: Identity, tmp_path: Path
) -> None:
    """--http-tls-cert/--http-tls-key: the probes answer over HTTPS to a client trusting the
    CA, plain HTTP gets no answer; a key that does not match the certificate exits 2."""
    tls = tls_options(ca.ca_file, client_identity)
    web = ca.issue("sidecar-web")
    https = ["--http-tls-cert", str(web.cert), "--http-tls-key", str(web.key)]
    files = (ca.ca_file, client_identity.cert, client_identity.key)
    client = new_client(server.hosts, tls=ZkTls.of(*map(str, files)))
    client.start(timeout=15)
    try:
        with sidecars() as started:
            leader = SidecarProcess.start(
                client, server.hosts, "https", "0.10.0", 1, process_id="web",
                log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True, extra=[*tls, *https],
            )  # fmt: skip
            started.append(leader)
            leader.wait_state("serving")
            https_client = SidecarClient(f"https://{leader.sidecar.http}", ca_file=ca.ca_file)
            assert https_client.send("GET", "/healthz").status == 200
            assert https_client.ready()
            assert leader.http("GET", "/healthz")[0] == 0  # plain HTTP: no answer
        bad = ["--http-tls-cert", str(web.cert), "--http-tls-key", str(client_identity.key)]
        done = cli(
            "sidecar", "--zk", server.hosts, "--env", "https", "--release",
            str(release_file("0.10.0")), "--deploy-generation", "1", *tls, *bad,
        )  # fmt: skip
        assert done.returncode == 2 and str(web.cert) in done.stderr, done.stderr[-2000:]
    finally:
        close(client)
