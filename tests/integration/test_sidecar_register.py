"""A sidecar's registration when the answer of its create was lost (real ZooKeeper)."""

from __future__ import annotations

import threading

import pytest
import structlog

from catalog.consensus import Consensus, Create
from catalog.environment import PROCESSES_KEY
from catalog.errors import ConfigurationError
from orchestrator.machine.connection import SidecarConnection
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.process_node import ProcessNode
from orchestrator.sidecar import SidecarConfig
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration


def connection_of(zk_env: ZkEnv, process_id: str) -> SidecarConnection:
    """A sidecar's connection, connected as its ``run`` connects it (a real session)."""
    config = SidecarConfig(
        zk=zk_env.hosts,
        env=zk_env.name,
        release_ref="-",
        deploy_generation=1,
        process_id=process_id,
        session_timeout=6.0,
    )
    connection = SidecarConnection(config, SidecarMetrics(), structlog.get_logger(), print)
    client = connection.connect(threading.Event())
    connection.consensus = Consensus(client, zk_env.root)
    return connection


def status_of(process_id: str) -> bytes:
    return ProcessNode(
        id=process_id, version="0.1.0", deploy_generation=1, mode="read-only", state="starting"
    ).encode()


def test_a_landed_create_whose_answer_was_lost_is_recognised(zk_env: ZkEnv) -> None:
    """The node our own session created (the lost answer's write) is ours: registration goes
    on instead of exiting "process id in use"."""
    connection = connection_of(zk_env, "blue-1")
    try:
        assert connection.client is not None
        store = Consensus(connection.client, zk_env.root)
        store.ensure(PROCESSES_KEY)
        key = f"{PROCESSES_KEY}/blue-1"
        store.commit([Create(key, status_of("blue-1"), ephemeral=True)])  # landed, unanswered
        connection.register(lambda: status_of("blue-1"))
        assert connection.registered
        found = store.get(key)
        assert found is not None and ProcessNode.decode(key, found.value).id == "blue-1"
    finally:
        connection.close(deregister=True)


def test_a_node_of_another_live_session_is_still_refused(zk_env: ZkEnv) -> None:
    """Another process's node under the same id is a configuration error (exit 2)."""
    other = connection_of(zk_env, "blue-1")
    second = connection_of(zk_env, "blue-1")
    try:
        other.register(lambda: status_of("blue-1"))
        with pytest.raises(ConfigurationError) as caught:
            second.register(lambda: status_of("blue-1"))
        assert "in use by another live process" in caught.value.message
        assert not second.registered
    finally:
        second.close(deregister=False)
        other.close(deregister=True)
