"""Scenario steps that inject faults: SIGKILL, SIGSTOP and SIGCONT, session expiry, ZooKeeper
restarts, ZooKeeper servers killed and started by number, and partitions (a process cut from
ZooKeeper or its clients, a ZooKeeper server cut from its peers)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import attrs
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until
from catalog.errors import BadInputError, CatalogError
from orchestrator.election import read_epoch
from orchestrator.scenario.format.steps import (
    ExpireStep,
    HealStep,
    HealZooKeeperStep,
    KillStep,
    KillZooKeeperStep,
    PartitionStep,
    PartitionZooKeeperStep,
    PauseStep,
    RestartZooKeeperStep,
    ResumeStep,
    StartZooKeeperStep,
    Step,
)
from orchestrator.scenario.results import (
    StepFailed,
)

if TYPE_CHECKING:
    from orchestrator.scenario.runner import ScenarioRun


@attrs.define
class FaultActions:
    """The fault steps of a run: one ``do_<action>`` method per step kind."""

    run: ScenarioRun

    def do_kill(self, step: KillStep) -> str:
        process = self.run.process_of(step)
        was_running = process.running
        code = process.kill()
        process.exit_expected = True
        return f"killed (exit {code})" if was_running else f"had already exited with {code}"

    def do_pause(self, step: PauseStep) -> str:
        process = self.run.process_of(step)
        if not process.running:
            raise StepFailed(f"{process.name} is not running (exit {process.returncode})")
        process.pause()
        return f"SIGSTOP pid {process.pid}"

    def do_resume(self, step: ResumeStep) -> str:
        process = self.run.process_of(step)
        process.resume()
        return f"SIGCONT pid {process.pid}"

    def do_expire(self, step: ExpireStep) -> str:
        """SIGSTOP until the server expires the session (its ephemeral node goes), SIGCONT."""
        process = self.run.process_of(step)
        if self.run.process_node(process.name) is None:
            raise StepFailed(f"{process.name} has no process node: nothing to expire")
        timeout = self.run.timeout_of(step, process.session_timeout * 4 + 10)
        started = time.monotonic()
        process.pause()

        def look(watch: Watch) -> bool | NotYet:
            return True if self.run.process_node(process.name, watch=watch) is None else NOT_YET

        try:
            wait_until(look, timeout, safety=1.0)
        except WaitTimeout:
            raise StepFailed(
                f"the session of {process.name} did not expire within {timeout:g} s"
            ) from None
        finally:
            process.resume()
        return f"session expired after {time.monotonic() - started:.2f} s paused"

    def do_partition(self, step: PartitionStep) -> str:
        """Drop the process's traffic with ZooKeeper (every server's client port) or with its
        clients (its HTTP port), in its network namespace."""
        process = self.run.process_of(step)
        namespace = process.netns
        if namespace is None:  # the runner starts every partitioned process isolated
            raise StepFailed(f"{process.name} does not run in a network namespace")
        if step.cut == "zookeeper":
            ports = sorted({int(h.rpartition(":")[2]) for h in self.run.zookeeper.hosts.split(",")})
        else:
            ports = [int(process.http.rpartition(":")[2])]
        try:
            namespace.cut(step.cut, ports)
        except CatalogError as exc:
            raise StepFailed(exc.message) from None
        return f"{process.name} ({namespace.ip}) cut from {step.cut} (ports {ports})"

    def do_heal(self, step: HealStep) -> str:
        process = self.run.process_of(step)
        if process.netns is None:
            raise StepFailed(f"{process.name} does not run in a network namespace")
        healed = process.netns.heal(step.cut)
        return f"healed {', '.join(healed) or 'nothing (no cut)'}"

    def do_restart_zookeeper(self, step: RestartZooKeeperStep) -> str:
        self._controlled(step)
        started = time.monotonic()
        self.run.zookeeper.restart(step.down, self.run.timeout_of(step))
        back = time.monotonic() - started
        self._wait_connected(self.run.timeout_of(step))
        return f"ZooKeeper back after {back:.2f} s"

    def do_kill_zookeeper(self, step: KillZooKeeperStep) -> str:
        self._controlled(step)
        try:
            number = self.run.zookeeper.kill(self._server_of(step.server))
        except BadInputError as exc:
            raise StepFailed(exc.message) from None
        detail = f"SIGKILL {_server(number, step.server)}"
        if not self.run.zookeeper.has_quorum:
            return detail + ": no quorum"
        # The survivors may hold an election first: the next step starts once they serve.
        started = time.monotonic()
        self._wait_answering(self.run.timeout_of(step))
        return detail + f"; the quorum answers after {time.monotonic() - started:.2f} s"

    def do_start_zookeeper(self, step: StartZooKeeperStep) -> str:
        self._controlled(step)
        started = time.monotonic()
        try:
            numbers = self.run.zookeeper.start(step.server, self.run.timeout_of(step))
        except CatalogError as exc:
            raise StepFailed(exc.message) from None
        if not numbers:
            return "every ZooKeeper server was running"
        self._wait_connected(self.run.timeout_of(step))
        if self.run.zookeeper.has_quorum:
            self._wait_answering(self.run.timeout_of(step))
        which = ", ".join(map(str, numbers))
        return f"ZooKeeper server(s) {which} serving after {time.monotonic() - started:.2f} s"

    def do_partition_zookeeper(self, step: PartitionZooKeeperStep) -> str:
        """Cut one server off from its peers; return once the majority's side answers."""
        self._controlled(step)
        try:
            number = self.run.zookeeper.isolate(self._server_of(step.server))
        except CatalogError as exc:
            raise StepFailed(exc.message) from None
        detail = _server(number, step.server)
        started = time.monotonic()
        self._wait_answering(self.run.timeout_of(step))
        answering = time.monotonic() - started
        # The minority side must stop serving: a server without its quorum answers nobody.
        deadline = started + self.run.timeout_of(step)
        while (mode := self.run.zookeeper.mode(number)) is not None:
            if time.monotonic() > deadline:
                raise StepFailed(
                    f"ZooKeeper server {number} still serves as {mode} "
                    f"{self.run.timeout_of(step):g} s after its peers were cut"
                )
            time.sleep(0.1)
        stopped = time.monotonic() - started
        # A cut leader answers a sync on its own until it notices it lost its quorum: the
        # runner's session may have stayed on it, and moves to the majority only now.
        self._wait_answering(max(1.0, deadline - time.monotonic()))
        return detail + (
            f" cut from its peers; the quorum answers after {answering:.2f} s, the cut server "
            f"stopped serving after {stopped:.2f} s"
        )

    def do_heal_zookeeper(self, step: HealZooKeeperStep) -> str:
        self._controlled(step)
        started = time.monotonic()
        try:
            numbers = self.run.zookeeper.rejoin(step.server, self.run.timeout_of(step))
        except CatalogError as exc:
            raise StepFailed(exc.message) from None
        if not numbers:
            return "no ZooKeeper server was partitioned"
        which = ", ".join(map(str, numbers))
        took = time.monotonic() - started
        return f"ZooKeeper server(s) {which} rejoined, serving after {took:.2f} s"

    def _server_of(self, which: int | str) -> int | str:
        """``leader-session``: the number of the server holding the session of the sidecar
        leader the epoch names; anything else as it is (the target resolves it)."""
        if which != "leader-session":
            return which
        epoch = read_epoch(self.run.consensus)
        if epoch is None or epoch.session is None:
            raise StepFailed("no sidecar leader has taken over: no leader session to find")
        try:
            return self.run.zookeeper.holding(epoch.session)
        except CatalogError as exc:
            raise StepFailed(f"leader {epoch.leader}: {exc.message}") from None

    def _wait_answering(self, timeout: float) -> None:
        """Until the runner's client completes a sync through a quorum."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.run.client.sync("/")
                return
            except KazooException as exc:
                if time.monotonic() > deadline:
                    raise StepFailed(
                        f"ZooKeeper did not answer within {timeout:g} s: {exc!r}"
                    ) from None
                time.sleep(0.1)

    def _controlled(self, step: Step) -> None:
        if not self.run.zookeeper.restartable:
            raise StepFailed(
                f"{step.action} needs the embedded ZooKeeper: this run uses an external "
                f"server ({self.run.zookeeper.hosts})"
            )

    def _wait_connected(self, timeout: float) -> None:
        """Until the runner's own client reconnected (its session outlives the restart)."""
        connected = threading.Event()

        def listener(state: str) -> None:
            if state == KazooState.CONNECTED:
                connected.set()

        self.run.client.add_listener(listener)
        try:
            if not self.run.client.connected:
                connected.wait(timeout)
            if not self.run.client.connected:
                raise StepFailed(f"the runner could not reconnect to ZooKeeper in {timeout:g} s")
        finally:
            self.run.client.remove_listener(listener)


def _server(number: int, asked: int | str) -> str:
    """``ZooKeeper server 2``, with ``(the leader)`` when the step named its role."""
    return f"ZooKeeper server {number}" + (f" (the {asked})" if isinstance(asked, str) else "")
