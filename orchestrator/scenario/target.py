"""The ZooKeeper a scenario runs against: an embedded server (restartable) or a given one."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

from orchestrator.zkserver import EmbeddedZooKeeper


@attrs.define
class ZooKeeperTarget:
    """Where scenarios find ZooKeeper: an external server, or an embedded one they may restart."""

    hosts: str
    server: EmbeddedZooKeeper | None = None

    @property
    def restartable(self) -> bool:
        return self.server is not None

    @classmethod
    @contextlib.contextmanager
    def open(cls, hosts: str | None, data_dir: Path | None = None) -> Iterator[ZooKeeperTarget]:
        """``hosts`` when given, otherwise an embedded server for the duration of the block."""
        if hosts:
            yield cls(hosts=hosts)
            return
        with contextlib.ExitStack() as stack:
            if data_dir is None:
                data_dir = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="catalog-upgrade-zk-"))
                )
            server = stack.enter_context(EmbeddedZooKeeper(data_dir=data_dir))
            yield cls(hosts=server.hosts, server=server)
