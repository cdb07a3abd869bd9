"""catalog.consensus.watch against a real ZooKeeper: waits wake on watches, not on a polling
interval."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient

from catalog.consensus.watch import (
    NOT_YET,
    NotYet,
    WaitTimeout,
    Watch,
    wait_until,
    watched_children,
)
from catalog.consensus.watch import watched_data as read_watched
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration


@pytest.mark.quiet
def test_a_creation_wakes_the_wait_long_before_the_safety_interval(
    zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """A node created by another thread ends the wait at once: the watch on the missing node
    fires (safety None: nothing but the watch can wake it)."""
    path = f"{zk_env.root}/flag"
    zk_client.ensure_path(zk_env.root)
    looks = 0

    def look(watch: Watch) -> bytes | NotYet:
        nonlocal looks
        looks += 1
        found = read_watched(zk_client, path, watch)
        return found[0] if found is not None else NOT_YET

    timer = threading.Timer(0.3, lambda: zk_client.create(path, b"up"))
    timer.start()
    started = time.monotonic()
    try:
        assert wait_until(look, 20.0, safety=None) == b"up"
    finally:
        timer.cancel()
    assert time.monotonic() - started < 5.0
    assert looks <= 3  # one look before, one after the watch fired (plus a possible spurious)


@pytest.mark.quiet
def test_children_and_timeouts(zk_client: KazooClient, zk_env: ZkEnv) -> None:
    """watched_children sees a missing parent as None; a condition that never holds times out
    after the given seconds with WaitTimeout."""
    parent = f"{zk_env.root}/queue"
    assert watched_children(zk_client, parent, lambda _e: None) is None
    zk_client.ensure_path(f"{parent}/a")

    def still_queued(watch: Watch) -> bool | NotYet:
        return NOT_YET if watched_children(zk_client, parent, watch) else True

    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        wait_until(still_queued, 0.5, safety=0.1)
    assert 0.5 <= time.monotonic() - started < 3.0
    zk_client.delete(f"{parent}/a")
    assert wait_until(still_queued, 5.0) is True
