"""The real ZooKeeper the project ships for development and tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.errors import ConfigurationError
from orchestrator.testing.zkserver import EmbeddedZooKeeper, find_java, free_port
from orchestrator.zookeeper.quorum import four_letter_word
from support.zookeeper import (
    ENV_VAR,
    ZkEnv,
    ZooKeeperEndpoint,
    containerized_zookeeper,
    docker_engine_answers,
    expire_session,
    kazoo_client,
)

pytestmark = pytest.mark.integration


def test_session_server_serves_kazoo(zk_server: ZooKeeperEndpoint, zk_client: KazooClient) -> None:
    """Whatever path the fixture took, kazoo can write and read (and ask the version via envi)."""
    path = f"/catalog-upgrade/probe-{os.getpid()}"
    zk_client.create(path, b"x", ephemeral=True, makepath=True)
    assert zk_client.server_version()[0] == 3


def test_env_var_path(zk_server: ZooKeeperEndpoint) -> None:
    """CATALOG_UPGRADE_TEST_ZK, when set, is the server every test uses."""
    if not os.environ.get(ENV_VAR):
        pytest.skip(f"{ENV_VAR} is not set")
    assert zk_server.kind == "env"
    assert zk_server.hosts == os.environ[ENV_VAR]


def test_testcontainers_path() -> None:
    """With a Docker engine, the official image starts and serves kazoo."""
    reason = docker_engine_answers()
    if reason is not None:
        pytest.skip(reason)
    with containerized_zookeeper() as endpoint:
        client = KazooClient(hosts=endpoint.hosts)
        client.start(timeout=30)
        client.ensure_path("/probe")
        assert client.exists("/probe") is not None
        client.stop()


def test_embedded_restart_keeps_data_and_port(tmp_path: Path) -> None:
    """A restarted embedded server answers on the same port with the same data."""
    with EmbeddedZooKeeper(data_dir=tmp_path / "zk") as server:
        client = kazoo_client(server.hosts)
        client.start(timeout=15)
        client.create("/kept", b"v1")
        port = server.port
        server.restart()
        assert server.port == port
        assert "Mode: standalone" in four_letter_word(server.host, server.port, "srvr")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                assert client.get("/kept")[0] == b"v1"
                break
            except Exception:  # reconnecting after the restart
                time.sleep(0.2)
        else:
            pytest.fail("client did not reconnect to the restarted server")
        client.stop()
    assert not server.running


def test_expire_session_ends_ephemerals(zk_env: ZkEnv) -> None:
    """The fault-injection helper really expires the session: its ephemeral node disappears."""
    owner = kazoo_client(zk_env.hosts, timeout=4)
    owner.start(timeout=15)
    path = f"{zk_env.root}/ephemeral"
    owner.create(path, b"", ephemeral=True, makepath=True)
    watcher = kazoo_client(zk_env.hosts)
    watcher.start(timeout=15)
    expire_session(owner, zk_env.hosts)
    deadline = time.monotonic() + 15
    while watcher.exists(path) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watcher.exists(path) is None
    owner.stop()
    watcher.stop()


@pytest.mark.slow
def test_cli_zookeeper_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`catalog-upgrade zookeeper` serves kazoo and exits 0 on SIGTERM, leaving no JVM behind."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "zookeeper",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "zk"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while "Mode:" not in four_letter_word("127.0.0.1", port, "srvr"):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        client = KazooClient(hosts=f"127.0.0.1:{port}")
        client.start(timeout=15)
        assert client.server_version()[0] == 3
        client.stop()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert four_letter_word("127.0.0.1", port, "srvr") == ""
    finally:
        if proc.poll() is None:
            proc.kill()


def test_missing_java_is_a_clear_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Java the error says so and how to fix it."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigurationError) as info:
        find_java()
    assert "Java" in info.value.message
