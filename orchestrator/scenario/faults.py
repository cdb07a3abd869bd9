"""Scenario steps that inject faults: SIGKILL, SIGSTOP and SIGCONT, session expiry, restarts."""

from __future__ import annotations

import threading
import time

from kazoo.protocol.states import KazooState

from catalog.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until
from orchestrator.scenario.format.steps import (
    ExpireStep,
    KillStep,
    PauseStep,
    RestartZooKeeperStep,
    ResumeStep,
)
from orchestrator.scenario.results import (
    StepFailed,
)
from orchestrator.scenario.run_core import RunCore


class FaultActions(RunCore):
    """The ``_do_<action>`` methods of the fault actions."""

    __slots__ = ()

    def _do_kill(self, step: KillStep) -> str:
        process = self._process(step)
        was_running = process.running
        code = process.kill()
        process.exit_expected = True
        return f"killed (exit {code})" if was_running else f"had already exited with {code}"

    def _do_pause(self, step: PauseStep) -> str:
        process = self._process(step)
        if not process.running:
            raise StepFailed(f"{process.name} is not running (exit {process.returncode})")
        process.pause()
        return f"SIGSTOP pid {process.pid}"

    def _do_resume(self, step: ResumeStep) -> str:
        process = self._process(step)
        process.resume()
        return f"SIGCONT pid {process.pid}"

    def _do_expire(self, step: ExpireStep) -> str:
        """SIGSTOP until the server expires the session (its ephemeral node goes), SIGCONT."""
        process = self._process(step)
        if self.process_node(process.name) is None:
            raise StepFailed(f"{process.name} has no process node: nothing to expire")
        timeout = self._timeout(step, process.session_timeout * 4 + 10)
        started = time.monotonic()
        process.pause()
        def look(watch: Watch) -> bool | NotYet:
            return True if self.process_node(process.name, watch=watch) is None else NOT_YET

        try:
            wait_until(look, timeout, safety=1.0)
        except WaitTimeout:
            raise StepFailed(
                f"the session of {process.name} did not expire within {timeout:g} s"
            ) from None
        finally:
            process.resume()
        return f"session expired after {time.monotonic() - started:.2f} s paused"

    def _do_restart_zookeeper(self, step: RestartZooKeeperStep) -> str:
        server = self.zookeeper.server
        if server is None:
            raise StepFailed(
                "restart_zookeeper needs the embedded ZooKeeper: this run uses an external "
                f"server ({self.zookeeper.hosts})"
            )
        started = time.monotonic()
        server.stop()
        if step.down:
            time.sleep(step.down)  # the outage itself is what the step rehearses
        server.start()
        back = time.monotonic() - started
        self._wait_connected(self._timeout(step))
        return f"ZooKeeper back after {back:.2f} s"

    def _wait_connected(self, timeout: float) -> None:
        """Until the runner's own client reconnected (its session outlives the restart)."""
        connected = threading.Event()

        def listener(state: str) -> None:
            if state == KazooState.CONNECTED:
                connected.set()

        self.client.add_listener(listener)
        try:
            if not self.client.connected:
                connected.wait(timeout)
            if not self.client.connected:
                raise StepFailed(f"the runner could not reconnect to ZooKeeper in {timeout:g} s")
        finally:
            self.client.remove_listener(listener)
