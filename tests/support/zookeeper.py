"""The real ZooKeeper every integration test runs against: one server per test session.

Resolution order (the first that applies wins; the others are never faked):
1. ``CATALOG_UPGRADE_TEST_ZK`` names a running server (``host:port``);
2. a Docker engine answers: testcontainers starts the official ``zookeeper`` image;
3. otherwise the embedded server (``orchestrator.testing.zkserver``) from the jars pyspark ships.

Each test gets its own environment (a fresh ZooKeeper root), deleted afterwards, and the server's
log tail is attached to the report of a failed test (kazoo's harness does the same).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from kazoo.client import KazooClient

from catalog.consensus import Consensus
from catalog.environment import CONTAINER_KEYS
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import reconnect_retry

ENV_VAR = "CATALOG_UPGRADE_TEST_ZK"
DOCKER_IMAGE = "zookeeper:3.9"


@attrs.frozen
class ZooKeeperEndpoint:
    """Where the session's server answers, how it was started, and how to reach its log."""

    hosts: str
    kind: str  # "env" | "testcontainers" | "embedded"
    embedded: EmbeddedZooKeeper | None = None
    log_tail: Callable[[], str] = lambda: ""


@attrs.frozen
class ZkEnv:
    """One test's isolated environment: a unique name under ``/catalog-upgrade``."""

    hosts: str
    name: str
    endpoint: ZooKeeperEndpoint

    @property
    def root(self) -> str:
        return f"/catalog-upgrade/{self.name}"


def kazoo_client(hosts: str, *, timeout: float = 10.0, **options: Any) -> KazooClient:
    """An unstarted test client of ``hosts`` with a ``timeout`` s session, reconnecting as the
    sidecars do (orchestrator.zookeeper.clients.reconnect_retry): kazoo's default backs off to
    an hour, so after an outage of a few seconds its next attempt could be half a minute away."""
    return KazooClient(
        hosts=hosts, timeout=timeout, connection_retry=reconnect_retry(timeout), **options
    )


def docker_engine_answers() -> str | None:
    """None when a Docker engine answers, otherwise the reason it does not."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # any failure means "no engine here"; the reason is reported
        return f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return None


@contextlib.contextmanager
def containerized_zookeeper() -> Iterator[ZooKeeperEndpoint]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    container = (
        DockerContainer(DOCKER_IMAGE)
        .with_exposed_ports(2181)
        .with_env("ZOO_4LW_COMMANDS_WHITELIST", "*")
        .with_env("ZOO_TICK_TIME", "500")
        .waiting_for(LogMessageWaitStrategy("binding to port"))
    )
    with container:
        hosts = f"{container.get_container_host_ip()}:{container.get_exposed_port(2181)}"

        def tail() -> str:
            out, err = container.get_logs()
            return (out + err).decode(errors="replace")[-4000:]

        yield ZooKeeperEndpoint(hosts=hosts, kind="testcontainers", log_tail=tail)


@contextlib.contextmanager
def embedded_zookeeper(data_dir: Path) -> Iterator[ZooKeeperEndpoint]:
    with EmbeddedZooKeeper(data_dir=data_dir) as server:
        yield ZooKeeperEndpoint(
            hosts=server.hosts, kind="embedded", embedded=server, log_tail=server.tail_log
        )


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEndpoint]:
    """The session's ZooKeeper server (see the module docstring for the order)."""
    hosts = os.environ.get(ENV_VAR)
    if hosts:
        yield ZooKeeperEndpoint(hosts=hosts, kind="env")
        return
    if docker_engine_answers() is None:
        with containerized_zookeeper() as endpoint:
            yield endpoint
        return
    with embedded_zookeeper(tmp_path_factory.mktemp("zookeeper")) as endpoint:
        yield endpoint


@pytest.fixture
def zk_env(zk_server: ZooKeeperEndpoint) -> Iterator[ZkEnv]:
    """A fresh environment for one test, removed afterwards."""
    env = ZkEnv(hosts=zk_server.hosts, name=f"t-{uuid.uuid4().hex[:12]}", endpoint=zk_server)
    yield env
    client = kazoo_client(zk_server.hosts)
    try:
        client.start(timeout=15)
        client.delete(env.root, recursive=True)
    except Exception:  # teardown only; a leftover test root harms nobody
        pass
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_client(zk_env: ZkEnv) -> Iterator[KazooClient]:
    """A connected kazoo client for the test's environment."""
    client = kazoo_client(zk_env.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def env_consensus(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    """A Consensus on the test's environment with every container key in place."""
    store = Consensus(zk_client, zk_env.root)
    store.ensure(*CONTAINER_KEYS)
    return store


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session from outside, the way kazoo's harness does.

    A second client joins the same session (id and password) and closes it: the server then
    expires the session for everyone, exactly what a long GC pause or partition causes.
    """
    session_id, password = client.client_id
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        endpoint = getattr(item, "funcargs", {}).get("zk_server")
        if endpoint is None:
            env = getattr(item, "funcargs", {}).get("zk_env")
            endpoint = env.endpoint if env is not None else None
        if endpoint is not None:
            with contextlib.suppress(Exception):
                report.sections.append(("ZooKeeper log (tail)", endpoint.log_tail()))
