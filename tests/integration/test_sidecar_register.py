"""A sidecar's registration when the answer of its create was lost (real ZooKeeper)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from catalog.consensus import Consensus, Create
from catalog.environment import PROCESSES_KEY
from catalog.errors import ConfigurationError
from catalog.release import Release
from orchestrator.process_node import ProcessNode
from orchestrator.sidecar import Sidecar, SidecarConfig
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration


def sidecar_on(client: KazooClient, zk_env: ZkEnv, process_id: str) -> Sidecar:
    """A sidecar bound to ``client``'s session, as its ``_run`` binds it after connecting."""
    sidecar = Sidecar(
        SidecarConfig(
            zk=zk_env.hosts,
            env=zk_env.name,
            release_ref="-",
            deploy_generation=1,
            process_id=process_id,
        ),
        Release(version="0.1.0", builtins=[], migrations=[]),
    )
    sidecar._client = client
    sidecar._consensus = Consensus(client, zk_env.root)
    return sidecar


def test_a_landed_create_whose_answer_was_lost_is_recognised(
    zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """The node our own session created (the lost answer's write) is ours: registration goes
    on instead of exiting "process id in use"."""
    sidecar = sidecar_on(zk_client, zk_env, "blue-1")
    store = Consensus(zk_client, zk_env.root)
    store.ensure(PROCESSES_KEY)
    key = f"{PROCESSES_KEY}/blue-1"
    store.commit([Create(key, sidecar.status().encode(), ephemeral=True)])  # landed, unanswered
    sidecar._register()
    assert sidecar._registered
    found = store.get(key)
    assert found is not None and ProcessNode.decode(key, found.value).id == "blue-1"


def test_a_node_of_another_live_session_is_still_refused(
    zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """Another process's node under the same id is a configuration error (exit 2)."""
    other = KazooClient(hosts=zk_env.hosts, timeout=6)
    other.start(timeout=15)
    try:
        sidecar_on(other, zk_env, "blue-1")._register()
        with pytest.raises(ConfigurationError) as caught:
            sidecar_on(zk_client, zk_env, "blue-1")._register()
        assert "in use by another live process" in caught.value.message
    finally:
        other.stop()
        other.close()
