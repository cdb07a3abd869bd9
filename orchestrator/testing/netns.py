"""Network partitions for tests and scenarios: a process in a network namespace of its own,
linked to the host by a veth pair, and nftables rules that drop what a partition cuts.

A namespace ``cu<n>`` holds one end of the pair at ``10.231.<n>.2``; the host's end is
``10.231.<n>.1``, where the process reaches ZooKeeper (which then listens on every address).
Clients reach the process at its own address. A cut is an nftables table in the namespace
dropping TCP to and from some ports (ZooKeeper's, or the process's HTTP port), so the other
traffic flows: a leader cut from ZooKeeper still answers its clients, as in the classic
partition of Jepsen's ZooKeeper and etcd analyses.

Processes that must reach each other, not only the host (the servers of a ZooKeeper ensemble),
run in namespaces joined by a :class:`Bridge` ``cub<n>``: one subnet ``10.232.<n>.0/24``, the
host at ``.254``, the member in slot ``k`` at ``.k``. A cut by address (:meth:`Namespace.cut`
with ``addresses``) then isolates one member from the others while the host still reaches it:
a ZooKeeper server cut from its quorum, its clients still connected.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables); :func:`unavailable` says why not where
they are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import attrs
import structlog

from catalog.errors import ConfigurationError

__all__ = ["Bridge", "Namespace", "unavailable"]

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
class Bridge:
    """A bridge on the host joining namespaces in one subnet (``index`` 1 to 250: its name and
    subnet, unique on the machine while it exists)."""

    index: int

    @classmethod
    def allocate(cls) -> Bridge:
        """A new bridge with the lowest free index (``ip link add`` settles races)."""
        for index in range(1, 251):
            bridge = cls(index)
            added = subprocess.run(
                ["ip", "link", "add", bridge.name, "type", "bridge"],
                capture_output=True,
                check=False,
            )
            if added.returncode == 0:
                _run("ip", "addr", "add", f"{bridge.host_ip}/24", "dev", bridge.name)
                _run("ip", "link", "set", bridge.name, "up")
                log.info("bridge_created", bridge=bridge.name, host_ip=bridge.host_ip)
                return bridge
        raise ConfigurationError("no free bridge index (1 to 250): clean up cub*")

    @property
    def name(self) -> str:
        return f"{_PREFIX}b{self.index}"

    @property
    def host_ip(self) -> str:
        """The host's address on the bridge."""
        return f"10.232.{self.index}.254"

    def address(self, slot: int) -> str:
        """The address of the member in ``slot`` (1 to 250)."""
        return f"10.232.{self.index}.{slot}"

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self.name], capture_output=True, check=False)


@attrs.define
class Namespace:
    """One network namespace for one process (``index`` 1 to 250: its name and addresses,
    unique on the machine while it exists), linked to the host, or to a :class:`Bridge` in
    ``slot``."""

    index: int
    cuts: set[str] = attrs.field(factory=set)
    bridge: Bridge | None = None
    slot: int = 0

    @classmethod
    def allocate(cls, bridge: Bridge | None = None, slot: int = 0) -> Namespace:
        """A new namespace with the lowest free index (taken by creating it: races between
        runs on one machine are settled by ``ip netns add``), on ``bridge`` in ``slot`` when
        given."""
        for index in range(1, 251):
            namespace = cls(index, bridge=bridge, slot=slot)
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
        return f"10.231.{self.index}.1" if self.bridge is None else self.bridge.host_ip

    @property
    def ip(self) -> str:
        """The process's address."""
        return f"10.231.{self.index}.2" if self.bridge is None else self.bridge.address(self.slot)

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
        if self.bridge is None:
            _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self._host_link)
        else:
            _run("ip", "link", "set", self._host_link, "master", self.bridge.name)
        _run("ip", "link", "set", self._host_link, "up")
        _run("ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.ip}/24", "dev", inner)
        _run("ip", "netns", "exec", self.name, "ip", "link", "set", inner, "up")
        log.info("netns_created", namespace=self.name, ip=self.ip)
        return self

    def set_tcp_retries(self, retries: int) -> None:
        """Let a TCP connection of this namespace die after ``retries`` unanswered
        retransmissions (``net.ipv4.tcp_retries2``, per namespace; the kernel's 15 take about
        15 minutes, 3 about 3 seconds)."""
        setting = "/proc/sys/net/ipv4/tcp_retries2"
        _run("ip", "netns", "exec", self.name, "sh", "-c", f"echo {int(retries)} > {setting}")

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, name: str, ports: Sequence[int] = (), addresses: Sequence[str] = ()) -> None:
        """Drop TCP to and from ``ports``, and every packet to and from ``addresses``, in this
        namespace (a table named ``name``)."""
        table = f"cut_{name}"
        out, into = [], []
        if ports:
            listed = ", ".join(str(p) for p in ports)
            out += [f"tcp dport {{ {listed} }} drop;", f"tcp sport {{ {listed} }} drop;"]
            into += [f"tcp sport {{ {listed} }} drop;", f"tcp dport {{ {listed} }} drop;"]
        if addresses:
            listed = ", ".join(addresses)
            out.append(f"ip daddr {{ {listed} }} drop;")
            into.append(f"ip saddr {{ {listed} }} drop;")
        rules = (
            f"table inet {table} {{\n"
            f"  chain out {{ type filter hook output priority 0; {' '.join(out)} }}\n"
            f"  chain in {{ type filter hook input priority 0; {' '.join(into)} }}\n"
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
        log.info(
            "netns_cut", namespace=self.name, cut=name, ports=list(ports), addresses=list(addresses)
        )

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
