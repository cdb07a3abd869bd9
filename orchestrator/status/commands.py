"""The commands status prints, each naming where it acts: the environment always, and the
ZooKeeper ensemble whenever it is not the default one. A command pasted from the status of
any environment acts on that environment, never on ``default`` by omission."""

from __future__ import annotations

import shlex

from catalog.consensus import Consensus
from orchestrator.zookeeper import DEFAULT_ZK

__all__ = ["command", "connection_of"]


def connection_of(consensus: Consensus) -> str:
    """The connection string ``consensus``'s client was made with (hosts as kazoo parsed
    them, IPv6 ones in brackets)."""
    hosts = getattr(consensus.client, "hosts", None) or []
    return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in hosts)


def command(environment: str, zk: str | None, verb: str, *arguments: str) -> str:
    """``catalog-upgrade VERB --env ENV [--zk HOSTS] ARGUMENTS``, quoted for a shell."""
    words = ["catalog-upgrade", *verb.split(), "--env", environment]
    if zk and zk != DEFAULT_ZK:
        words += ["--zk", zk]
    return shlex.join([*words, *arguments])
