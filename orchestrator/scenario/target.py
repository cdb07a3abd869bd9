"""The ZooKeeper of a scenario: an embedded server or ensemble it controls, or a given one.

Scenarios that rehearse ZooKeeper faults need servers they can stop: ``restart_zookeeper``
restarts every server; ``kill_zookeeper`` and ``start_zookeeper`` act on one member of an
ensemble by number (1-based, as ``myid``), or on its current ``leader`` or a ``follower`` (or,
resolved by the runner, the server holding the sidecar leader's session), and
so do ``partition_zookeeper`` and ``heal_zookeeper``, which cut a member off from its peers
and heal it (an isolated ensemble: orchestrator.testing.ensemble).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from catalog.errors import BadInputError
from orchestrator.testing.ensemble import ZooKeeperEnsemble
from orchestrator.testing.zkserver import EmbeddedZooKeeper

__all__ = ["ZooKeeperTarget"]


@attrs.define
class ZooKeeperTarget:
    """Where scenarios find ZooKeeper: an external server, an embedded one, or an embedded
    ensemble (``servers`` > 1) whose members they may kill and start."""

    hosts: str
    server: EmbeddedZooKeeper | None = None
    ensemble: ZooKeeperEnsemble | None = None

    @property
    def restartable(self) -> bool:
        return self.server is not None or self.ensemble is not None

    @property
    def isolates_servers(self) -> bool:
        """Whether each server runs in a network namespace of its own (``isolate`` can cut
        it off from its peers)."""
        return self.ensemble is not None and self.ensemble.isolated

    @property
    def size(self) -> int:
        """How many servers the target runs (0: an external one, not ours to control)."""
        if self.ensemble is not None:
            return self.ensemble.size
        return 1 if self.server is not None else 0

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        hosts: str | None,
        data_dir: Path | None = None,
        *,
        servers: int = 1,
        every_address: bool = False,
        isolated: bool = False,
    ) -> Iterator[ZooKeeperTarget]:
        """``hosts`` when given, otherwise an embedded server (or ensemble of ``servers``) for
        the duration of the block; one server listens on ``every_address`` when processes in
        network namespaces must reach it (orchestrator.testing.netns); an ``isolated``
        ensemble runs each server in a namespace of its own (``isolate`` can cut it)."""
        if hosts:
            yield cls(hosts=hosts)
            return
        with contextlib.ExitStack() as stack:
            if data_dir is None:
                data_dir = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="catalog-upgrade-zk-"))
                )
            if servers > 1:
                ensemble = stack.enter_context(
                    ZooKeeperEnsemble(data_dir, servers, isolated=isolated)
                )
                yield cls(hosts=ensemble.hosts, ensemble=ensemble)
                return
            host = "0.0.0.0" if every_address else "127.0.0.1"
            server = stack.enter_context(EmbeddedZooKeeper(data_dir=data_dir, host=host))
            yield cls(hosts=server.hosts, server=server)

    @property
    def has_quorum(self) -> bool:
        """Whether a majority of our servers runs (an external ZooKeeper: assumed)."""
        if not self.restartable:
            return True
        members = self._members()
        cut = set(self.ensemble.isolated_members()) if self.ensemble is not None else set()
        serving = [m.running and n not in cut for n, m in enumerate(members, start=1)]
        return sum(serving) * 2 > len(members)

    def _members(self) -> list[EmbeddedZooKeeper]:
        if self.ensemble is not None:
            return list(self.ensemble.members)
        if self.server is not None:
            return [self.server]
        raise BadInputError(
            f"this run uses an external ZooKeeper ({self.hosts}): its servers are not ours to "
            "stop; run without --zk/CATALOG_UPGRADE_ZK"
        )

    def resolve(self, which: int | str) -> int:
        """The member number ``which`` names now: a number, ``leader`` or ``follower`` (the
        lowest-numbered one serving as follower)."""
        members = self._members()
        if isinstance(which, int):
            if not 1 <= which <= len(members):
                raise BadInputError(
                    f"ZooKeeper has servers 1 to {len(members)}, not {which}", server=which
                )
            return which
        if self.ensemble is None:
            return 1  # a standalone server is its own leader
        modes = {n: self.ensemble.mode(n) for n in range(1, len(members) + 1)}
        found = [n for n, mode in modes.items() if mode == which]
        if not found:
            raise BadInputError(f"no ZooKeeper server is {which} now (modes: {modes})")
        return found[0]

    def holding(self, session: str) -> int:
        """The member that holds client session ``session`` now (an ensemble's ``cons``)."""
        if self.ensemble is None:
            return 1
        number = self.ensemble.holding(session)
        if number is None:
            raise BadInputError(f"no ZooKeeper server holds session {session} now")
        return number

    def kill(self, which: int | str) -> int:
        """SIGKILL member ``which``, as a crash would; the number killed."""
        number = self.resolve(which)
        self._members()[number - 1].kill()
        return number

    def start(self, number: int | None, timeout: float) -> list[int]:
        """Start member ``number`` (None: every member that is not running) and wait until
        each serves; the numbers started."""
        members = self._members()
        numbers = (
            [self.resolve(number)]
            if number is not None
            else [n for n, m in enumerate(members, start=1) if not m.running]
        )
        for n in numbers:
            members[n - 1].launch()
        for n in numbers:
            members[n - 1].wait_serving(timeout)
        return numbers

    def mode(self, number: int) -> str | None:
        """What member ``number`` serves as now (None: it does not serve)."""
        if self.ensemble is None:
            return None
        return self.ensemble.mode(number)

    def isolate(self, which: int | str) -> int:
        """Cut member ``which`` off from its peers (its clients still reach it); the number."""
        number = self.resolve(which)
        if self.ensemble is None:
            raise BadInputError("a standalone ZooKeeper server has no peers to be cut from")
        self.ensemble.isolate(number)
        return number

    def restore(self, timeout: float) -> str | None:
        """Undo what a run's faults left behind: heal every cut member and start every
        stopped one, each waited for until it serves; what was done (None: nothing was). A
        walk starts with it, so a shrink run or a soak's next seed finds every server
        serving whatever the run before it broke."""
        if not self.restartable:
            return None
        healed = self.rejoin(None, timeout)
        started = self.start(None, timeout)
        if (healed or started) and self.ensemble is not None:
            self.ensemble.wait_settled(timeout)
        done = [f"healed server(s) {healed}"] if healed else []
        done += [f"started server(s) {started}"] if started else []
        return "; ".join(done) or None

    def rejoin(self, number: int | None, timeout: float) -> list[int]:
        """Heal the cut of member ``number`` (None: of every cut member) and wait until each
        serves again; the numbers healed."""
        if self.ensemble is None:
            return []
        numbers = [self.resolve(number)] if number is not None else self.ensemble.isolated_members()
        healed = [n for n in numbers if self.ensemble.rejoin(n)]
        for n in healed:
            self.ensemble.member(n).wait_serving(timeout)
        return healed

    def restart(self, down: float | None, timeout: float) -> None:
        """Stop every server, keep them down ``down`` seconds, start them all again."""
        members = self._members()
        for member in members:
            member.stop()
        if down:
            time.sleep(down)  # the outage itself is what the step rehearses
        self.start(None, timeout)

    def tail_logs(self, lines: int = 20) -> dict[str, str]:
        """The last log lines of every server we run (for a failed scenario's report)."""
        if not self.restartable:
            return {}
        members = self._members()
        if len(members) == 1:
            return {"zookeeper": members[0].tail_log(lines)}
        return {f"zookeeper{n}": m.tail_log(lines) for n, m in enumerate(members, start=1)}
