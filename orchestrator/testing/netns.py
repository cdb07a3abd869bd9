"""Network partitions for tests and scenarios: a process in a network namespace of its own,
linked to the host by a veth pair, and nftables rules that drop what a partition cuts.

A namespace ``cu<n>`` holds one end of the pair at ``10.231.<n>.2``; the host's end is
``10.231.<n>.1``, where the process reaches ZooKeeper (which then listens on every address).
Clients reach the process at its own address. A cut is an nftables table in the namespace
dropping TCP to and from some ports (ZooKeeper's, or the process's HTTP port), so the other
traffic flows: a leader cut from ZooKeeper still answers its clients, as in the classic
partition of Jepsen's ZooKeeper and etcd analyses. Needs root, ``ip`` (iproute2) and ``nft``
(nftables); :func:`unavailable` says why not where they are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import attrs
import structlog

from catalog.errors import ConfigurationError

__all__ = ["Namespace", "unavailable"]

log = structlog.get_logger(__name__)

_PREFIX = "cu"


def unavailable() -> str | None:
    """Why partitions cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (Debian package {package})"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns` fails: {probe.stderr.strip()}"
    return None


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigurationError(
            f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}",
            command=list(command),
        )


@attrs.define
class Namespace:
    """One network namespace for one process (``index`` 1 to 250: its name and addresses,
    unique on the machine while it exists)."""

    index: int
    cuts: set[str] = attrs.field(factory=set)

    @classmethod
    def allocate(cls) -> Namespace:
        """A new namespace with the lowest free index (taken by creating it: races between
        runs on one machine are settled by ``ip netns add``)."""
        for index in range(1, 251):
            namespace = cls(index)
            added = subprocess.run(
                ["ip", "netns", "add", namespace.name], capture_output=True, check=False
            )
            if added.returncode == 0:
                return namespace.create()
        raise ConfigurationError("no free network namespace index (1 to 250): clean up cu*")

    @property
    def name(self) -> str:
        return f"{_PREFIX}{self.index}"

    @property
    def host_ip(self) -> str:
        """The host's end of the link: where the process reaches services of the host."""
        return f"10.231.{self.index}.1"

    @property
    def ip(self) -> str:
        """The process's address."""
        return f"10.231.{self.index}.2"

    @property
    def _host_link(self) -> str:
        return f"{self.name}h"

    def create(self) -> Namespace:
        """Link the (added) namespace to the host."""
        inner = f"{self.name}n"
        subprocess.run(["ip", "link", "del", self._host_link], capture_output=True, check=False)
        _run("ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", self._host_link, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", self.name)
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self._host_link)
        _run("ip", "link", "set", self._host_link, "up")
        _run("ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.ip}/24", "dev", inner)
        _run("ip", "netns", "exec", self.name, "ip", "link", "set", inner, "up")
        log.info("netns_created", namespace=self.name, ip=self.ip)
        return self

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, name: str, ports: Sequence[int]) -> None:
        """Drop TCP to and from ``ports`` in this namespace (a table named ``name``)."""
        table = f"cut_{name}"
        listed = ", ".join(str(p) for p in ports)
        rules = (
            f"table inet {table} {{\n"
            f"  chain out {{ type filter hook output priority 0; tcp dport {{ {listed} }} drop; "
            f"tcp sport {{ {listed} }} drop; }}\n"
            f"  chain in {{ type filter hook input priority 0; tcp sport {{ {listed} }} drop; "
            f"tcp dport {{ {listed} }} drop; }}\n"
            "}\n"
        )
        done = subprocess.run(
            ["ip", "netns", "exec", self.name, "nft", "-f", "-"],
            input=rules,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ConfigurationError(f"nft refused the cut {name}: {done.stderr.strip()}")
        self.cuts.add(name)
        log.info("netns_cut", namespace=self.name, cut=name, ports=list(ports))

    def heal(self, name: str | None = None) -> list[str]:
        """Remove the cut ``name`` (None: every cut); the cuts removed."""
        healed = sorted(self.cuts if name is None else {name} & self.cuts)
        for cut in healed:
            _run("ip", "netns", "exec", self.name, "nft", "delete", "table", "inet", f"cut_{cut}")
            self.cuts.discard(cut)
        log.info("netns_healed", namespace=self.name, cuts=healed)
        return healed

    def delete(self) -> None:
        """Remove the link and the namespace (nothing when they do not exist)."""
        for command in (
            ["ip", "link", "del", self._host_link],
            ["ip", "netns", "del", self.name],
        ):
            subprocess.run(command, capture_output=True, check=False)
        self.cuts.clear()
