"""The scenario runner: one environment, its fleet of sidecars, and step execution."""

from __future__ import annotations

import contextlib
import logging

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from catalog.blob import BlobStore
from catalog.consensus import Consensus, env_root
from catalog.errors import ConnectionLostError
from orchestrator.scenario.actions import ProcessActions
from orchestrator.scenario.faults import FaultActions
from orchestrator.scenario.invariants import InvariantChecker
from orchestrator.scenario.results import (
    RUNNER_SESSION_TIMEOUT,
)


class ScenarioRun(ProcessActions, FaultActions):
    """One fresh environment and the steps executed in it (scenario files and simulate)."""

    __slots__ = ()

    def open(self) -> ScenarioRun:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        # The runner's own connection warnings (a restart_zookeeper step) are expected noise.
        quiet = logging.getLogger("orchestrator.scenario.kazoo")
        quiet.setLevel(logging.ERROR)
        client = KazooClient(
            hosts=self.zookeeper.hosts, timeout=RUNNER_SESSION_TIMEOUT, logger=quiet
        )
        try:
            client.start(timeout=30)
        except (KazooTimeoutError, OSError) as exc:
            with contextlib.suppress(Exception):
                client.close()
            raise ConnectionLostError(
                f"ZooKeeper at {self.zookeeper.hosts} did not answer within 30 s",
                zk=self.zookeeper.hosts,
            ) from exc
        self.client = client
        self.consensus = Consensus(client=client, root=env_root(self.env))
        if self.invariants:
            self.checker = InvariantChecker(
                self.consensus, BlobStore.from_uri(str(self.blob_dir)), list(self.history)
            )
        return self

    def close(self, *, delete_environment: bool = False) -> None:
        """Kill every process; drop the environment's znodes if asked; close the client."""
        self.fleet.close()
        client = getattr(self, "client", None)
        if client is None:
            return
        if delete_environment:
            with contextlib.suppress(Exception):
                self.consensus.delete_tree("")
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()

    def __enter__(self) -> ScenarioRun:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
