"""A real ZooKeeper ensemble on loopback, from the same jars as the embedded server.

Production ZooKeeper is 3 or 5 servers; a process must survive a follower's death, the
ensemble leader's death and a lost quorum. ``ZooKeeperEnsemble(n)`` runs ``n`` members, each a
:class:`~orchestrator.testing.zkserver.EmbeddedZooKeeper` with its own client, quorum and election
ports, data directory and ``myid``; ``hosts`` is the connection string of all of them. Members
are stopped and started by number (1-based), as scenario steps and tests need.

An ``isolated`` ensemble runs each member in a network namespace of its own, the namespaces
joined by a bridge (orchestrator.testing.netns): :meth:`ZooKeeperEnsemble.isolate` then cuts one
member off from its peers while its clients still reach it, the partition of a ZooKeeper server
from its quorum, and :meth:`ZooKeeperEnsemble.rejoin` heals it. Needs root, ``ip`` and ``nft``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import attrs
import structlog

from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until
from catalog.errors import BadInputError, ConfigurationError
from orchestrator.testing.child import ManagedServer
from orchestrator.testing.netns import Bridge, Namespace
from orchestrator.testing.zkserver import EmbeddedZooKeeper, free_port
from orchestrator.zookeeper.tls import ServerTls

__all__ = ["ZooKeeperEnsemble"]

log = structlog.get_logger(__name__)

# A cut member rejoins within seconds of the heal, not minutes. Two things would delay it:
# - its connections to its peers, established before the cut, are not closed by the cut; the
#   kernel retransmits into them at doubling intervals for about 15 minutes, and after the heal
#   the next retransmission may be a minute away. In an isolated member's namespace a connection
#   dies after PEER_TCP_RETRIES unanswered retransmissions (about 3 s), and a new one is made;
# - a server without its quorum repeats its election notifications at doubling intervals, up
#   to ZooKeeper's 60 s by default; ELECTION_RETRY_MAX_MS bounds them.
PEER_TCP_RETRIES = 3
ELECTION_RETRY_MAX_MS = 2000


@attrs.define
class ZooKeeperEnsemble(ManagedServer):
    """``size`` ZooKeeper servers forming one ensemble below ``data_dir``; a context manager."""

    data_dir: Path
    size: int = 3
    host: str = "127.0.0.1"
    # Every member serves clients over TLS only (the quorum's own links stay plain).
    tls: ServerTls | None = None
    # Each member in a network namespace of its own on one bridge (``isolate`` can cut it).
    isolated: bool = False
    members: list[EmbeddedZooKeeper] = attrs.field(factory=list, init=False)
    _bridge: Bridge | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.size < 1 or self.size % 2 == 0:
            raise BadInputError(
                f"an ensemble has an odd number of servers (1, 3, 5...), not {self.size}",
                servers=self.size,
            )
        self.data_dir = Path(self.data_dir).resolve()
        ports = [(free_port(), free_port(), free_port()) for _ in range(self.size)]
        peers = tuple(ports) if self.size > 1 else ()
        namespaces: list[Namespace | None] = [None] * self.size
        if self.isolated:
            self._bridge = Bridge.allocate()
            try:
                for number in range(1, self.size + 1):
                    namespace = Namespace.allocate(self._bridge, slot=number)
                    namespaces[number - 1] = namespace
                    namespace.set_tcp_retries(PEER_TCP_RETRIES)
            except BaseException:
                self._delete_network(namespaces)
                raise
        hosts = tuple(self.host if ns is None else ns.ip for ns in namespaces)
        self.members = [
            EmbeddedZooKeeper(
                data_dir=self.data_dir / f"server{number}",
                port=client,
                host=hosts[number - 1],
                myid=number,
                peers=peers,
                peer_hosts=hosts,
                tls=self.tls,
                netns=namespaces[number - 1],
                jvm_options=(
                    f"-Dzookeeper.fastleader.maxNotificationInterval={ELECTION_RETRY_MAX_MS}",
                ),
            )
            for number, (client, _quorum, _election) in enumerate(ports, start=1)
        ]

    @property
    def hosts(self) -> str:
        """The connection string of every member."""
        return ",".join(m.hosts for m in self.members)

    def member(self, number: int) -> EmbeddedZooKeeper:
        if not 1 <= number <= self.size:
            raise BadInputError(
                f"the ensemble has servers 1 to {self.size}, not {number}", server=number
            )
        return self.members[number - 1]

    def start(self, timeout: float = 90.0) -> ZooKeeperEnsemble:
        """Start every member, then wait until each serves (a quorum formed)."""
        for member in self.members:
            member.launch()
        for member in self.members:
            member.wait_serving(timeout)
        log.info("ensemble_started", hosts=self.hosts, leader=self.leader())
        return self

    def kill_member(self, number: int) -> None:
        """SIGKILL server ``number``, as a crash would."""
        self.member(number).kill()

    def start_member(self, number: int, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Start server ``number`` again (same ports and data); with ``wait``, until it serves
        (which needs a quorum of members running)."""
        member = self.member(number)
        member.launch()
        if wait:
            member.wait_serving(timeout)

    def isolate(self, number: int) -> None:
        """Cut server ``number`` off from every other member (both ways); its clients still
        reach it. Only an ``isolated`` ensemble can."""
        namespace = self._namespace(number)
        others = [m.host for n, m in enumerate(self.members, start=1) if n != number]
        namespace.cut("peers", addresses=others)

    def rejoin(self, number: int) -> bool:
        """Heal the cut of server ``number``; whether it was cut."""
        return bool(self._namespace(number).heal("peers"))

    def isolated_members(self) -> list[int]:
        """The numbers of the members cut off from their peers now."""
        return [
            n for n, m in enumerate(self.members, start=1)
            if m.netns is not None and "peers" in m.netns.cuts
        ]  # fmt: skip

    def _namespace(self, number: int) -> Namespace:
        namespace = self.member(number).netns
        if namespace is None:
            raise BadInputError(
                "this ensemble's servers share one network: start it isolated to cut one off "
                "from its peers",
                server=number,
            )
        return namespace

    def mode(self, number: int) -> str | None:
        """``leader``, ``follower`` (or ``standalone``) as server ``number`` reports it; None
        when it does not serve."""
        member = self.member(number)
        for line in member.four_letter_word("srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Return once every member serves at the same moment, one as leader and the rest as
        followers: after a heal and a restart the members that came back first may still be
        electing or syncing when the last one answers."""
        modes: dict[int, str | None] = {}

        def look(_watch: Watch) -> bool | NotYet:
            modes.update({n: self._mode_or_none(n) for n in range(1, self.size + 1)})
            roles = sorted(str(mode) for mode in modes.values())
            settled = roles == ["follower"] * (self.size - 1) + ["leader"]
            return True if settled or roles == ["standalone"] else NOT_YET

        try:
            wait_until(look, timeout, safety=0.2)  # four-letter words: nothing to watch
        except WaitTimeout:
            raise ConfigurationError(
                f"the ensemble {self.hosts} did not settle within {timeout:.0f}s (modes: {modes})",
                hosts=self.hosts,
            ) from None

    def _mode_or_none(self, number: int) -> str | None:
        try:
            return self.mode(number)
        except OSError:
            return None

    def holding(self, session: str) -> int | None:
        """The number of the member that holds client session ``session`` (``0x...``, as the
        epoch records it) now, by its ``cons`` listing; None when no member lists it."""
        wanted = f"sid={session.lower()}"
        for number, member in enumerate(self.members, start=1):
            with contextlib.suppress(OSError):
                if wanted in member.four_letter_word("cons").lower():
                    return number
        return None

    def leader(self) -> int | None:
        """The number of the ensemble's current leader, if one serves."""
        for number in range(1, self.size + 1):
            if self.mode(number) in ("leader", "standalone"):
                return number
        return None

    def stop(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):
                member.stop()
        self._delete_network([m.netns for m in self.members])

    def _delete_network(self, namespaces: list[Namespace | None]) -> None:
        for namespace in namespaces:
            if namespace is not None:
                namespace.delete()
        if self._bridge is not None:
            self._bridge.delete()
            self._bridge = None

