"""The scenario runner: one environment, its sidecars, what it observes in ZooKeeper,
and step execution through its process and fault actions."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from catalog.blob import BlobStore
from catalog.consensus import CONNECTION_ERRORS, Consensus, env_root
from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until, watched_data
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    FINALIZE_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
)
from catalog.errors import EXIT_FENCED, EXIT_OK, ConnectionLostError
from catalog.release import Release
from catalog.retry import Retry
from catalog_client import Answer
from orchestrator.process_node import READY_STATES, ProcessNode, ProcessState, process_key
from orchestrator.scenario.format import (
    Step,
)
from orchestrator.scenario.invariants import InvariantChecker, Violation
from orchestrator.scenario.results import (
    READYZ_GRACE,
    RUNNER_SESSION_TIMEOUT,
    WRITING_ACTIONS,
    AppendRecord,
    StepFailed,
)
from orchestrator.scenario.sidecars import Sidecars
from orchestrator.scenario.target import ZooKeeperTarget
from orchestrator.scenario.workload import Workload, leaders_of
from orchestrator.testing.harness import SidecarProcess
from orchestrator.zookeeper.clients import reconnect_retry


@attrs.define
class ScenarioRun:
    """One fresh environment and the steps executed in it (scenario files and simulate)."""

    zookeeper: ZooKeeperTarget
    work_dir: Path
    env: str
    release_files: Mapping[str, Path]
    default_timeout: float = 30.0
    default_session_timeout: float = 2.0
    rng: random.Random = attrs.field(factory=random.Random)
    history: Sequence[Release] = ()
    invariants: bool = False
    # Processes to start in network namespaces of their own (a partition step cuts them).
    partitioned: frozenset[str] = frozenset()
    isolate_all: bool = False  # every process in a namespace (simulate --partitions)
    checker: InvariantChecker | None = attrs.field(default=None, init=False)
    sidecars: Sidecars = attrs.field(init=False)
    client: KazooClient = attrs.field(init=False)
    consensus: Consensus = attrs.field(init=False)
    acked: list[AppendRecord] = attrs.field(factory=list, init=False)
    # What executes steps: objects with a ``do_<action>`` method each (acting.with_actions).
    handlers: tuple[Any, ...] = attrs.field(default=(), init=False)
    # The scenario's clients, when it declares a [workload] (orchestrator.scenario.workload).
    workload: Workload | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.sidecars = Sidecars(
            zk=self.zookeeper.hosts,
            env=self.env,
            blob_dir=self.work_dir / "blob",
            log_dir=self.work_dir / "logs",
        )

    @property
    def blob_dir(self) -> Path:
        return self.sidecars.blob_dir

    def status(self) -> dict[str, Any]:
        """``status --json`` of the environment (the same function the CLI calls)."""
        from orchestrator.status import read_status

        return read_status(self.consensus).to_json()

    def process_node(self, name: str, *, watch: Watch | None = None) -> ProcessNode | None:
        """The process node (None when absent), optionally leaving ``watch`` on it."""
        key = process_key(name)
        path = self.consensus.path(key)
        if watch is not None:
            found = watched_data(self.client, path, watch)
            return None if found is None else ProcessNode.decode(key, found[0])
        try:
            data, _stat = self.client.get(path)
        except NoNodeError:
            return None
        return ProcessNode.decode(key, data)

    def arm_status_watches(self, watch: Watch) -> None:
        for key in (CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY):
            self.client.exists(self.consensus.path(key), watch=watch)
        for key in (PROCESSES_KEY, FINALIZE_KEY):
            path = self.consensus.path(key)
            try:
                names = self.client.get_children(path, watch=watch)
            except NoNodeError:
                self.client.exists(path, watch=watch)
                continue
            if key == PROCESSES_KEY:
                for name in names:
                    with contextlib.suppress(NoNodeError):
                        self.client.get(f"{path}/{name}", watch=watch)

    def check_invariants(self, step: Step, *, rows: bool = False) -> list[Violation]:
        """The invariants after ``step`` (none when the run checks none)."""
        if self.checker is None or not self.zookeeper.has_quorum:
            return []  # without a quorum nothing can be read (nor written)
        writes = step.action in WRITING_ACTIONS or self.workload is not None
        checker = self.checker
        # The runner's own session may be moving between servers (a server just cut, killed or
        # restarted): a read it lost is the runner's, not the product's, and is read again.
        again = Retry(
            retryable=(ConnectionLostError,),
            max_attempts=1000,
            deadline=RUNNER_SESSION_TIMEOUT,
            base_delay=0.1,
            max_delay=1.0,
        )
        return again(lambda: checker.check(writes_expected=writes, rows=rows))

    def leaders(self) -> list[SidecarProcess]:
        """Running processes, the one whose node says it leads and serves first (where a
        client sends its writes)."""
        leader = None
        for name, process in self.sidecars.processes.items():
            if not process.running:
                continue
            with contextlib.suppress(*CONNECTION_ERRORS):
                node = self.process_node(name)
                if node is not None and node.mode == "leader" and node.state == "serving":
                    leader = name
                    break
        return leaders_of(dict(self.sidecars.processes), leader)

    def unexpected_exits(self) -> list[str]:
        """Processes that exited while no step expected it."""
        return [
            f"process {p.name} exited with code {p.returncode} and no step expected it"
            for p in self.sidecars.processes.values()
            if not p.running and not p.exit_expected
        ]

    def execute(self, step: Step) -> str:
        """Run one step; its outcome detail. StepFailed when an expectation does not hold."""
        name = f"do_{step.action}"
        actions = next((h for h in self.handlers if hasattr(h, name)), None)
        if actions is None:
            raise StepFailed(f"this run has no action for step {step.action}")
        handler: Callable[[Step], str] = getattr(actions, name)
        return handler(step)

    def use(self, *handlers: Any) -> ScenarioRun:
        """Execute steps with ``handlers`` (the first with a ``do_<action>`` method wins)."""
        self.handlers = handlers
        return self

    def timeout_of(self, step: Step, default: float | None = None) -> float:
        """The step's own ``timeout`` (for kinds that take one), else ``default``, else the
        scenario's."""
        timeout: float | None = getattr(step, "timeout", None)
        if timeout is not None:
            return timeout
        return default if default is not None else self.default_timeout

    def process_of(self, step: Step) -> SidecarProcess:
        return self.sidecars.get(step.process)

    def wait_state(self, process: SidecarProcess, state: str, timeout: float) -> str:
        """Wait until ``process`` reaches ``state`` (see the module docstring); the detail."""
        started = time.monotonic()
        deadline = started + timeout
        if state == "exited":
            code = process.wait_exit(timeout)
            if code is None:
                raise StepFailed(f"{process.name} still runs after {timeout:g} s")
            return f"exited with code {code}"
        last: ProcessNode | None = None

        def look(watch: Watch) -> str | NotYet:
            nonlocal last
            try:
                node = self.process_node(process.name, watch=watch)
            except CONNECTION_ERRORS:
                node = None  # ZooKeeper restarting: the watch re-arms on the next turn
            if node is not None:
                last = node
                if node.state == state:
                    if node.in_states(READY_STATES):
                        self._confirm_readyz(process, deadline)
                    return f"{state} after {time.monotonic() - started:.2f} s"
            code = process.returncode
            if code is not None:
                fenced, failed = ProcessState.FENCED.value, ProcessState.FAILED.value
                if (state == fenced and code == EXIT_FENCED) or (
                    state == failed and code not in (EXIT_OK, EXIT_FENCED)
                ):
                    return f"exited with code {code} ({state})"
                seen = f" (last state {last.state})" if last else ""
                raise StepFailed(
                    f"{process.name} exited with code {code} while waiting for {state}{seen}"
                )
            return NOT_YET

        try:
            # The watch wakes us on any change; the safety interval notices the child exiting.
            return wait_until(look, timeout, safety=0.2)
        except WaitTimeout:
            seen = "no process node" if last is None else f"state {last.state}"
            error = last.error if last else None
            raise StepFailed(
                f"{process.name} did not reach {state} within {timeout:g} s ({seen}"
                + (f", error {json.dumps(error)}" if error else "")
                + ")"
            ) from None

    def _confirm_readyz(self, process: SidecarProcess, deadline: float) -> None:
        """The node says ready/serving: /readyz must agree (docs/design-contract.md)."""
        limit = max(deadline, time.monotonic() + READYZ_GRACE)
        while True:
            answer = process.request("GET", "/readyz?verbose", timeout=2.0)
            if answer.status == 200:
                return
            if time.monotonic() >= limit or not process.running:
                raise StepFailed(
                    f"{process.name}'s node says ready but /readyz answers {answer.summary()}"
                )
            time.sleep(0.05)

    def read_rows(
        self, process: SidecarProcess, collection: str, as_of: int | None, timeout: float
    ) -> tuple[Answer, list[dict[str, Any]]]:
        query = f"/read?collection={collection}" + (f"&as_of={as_of}" if as_of is not None else "")
        answer = process.request("GET", query, timeout=timeout)
        rows = []
        if answer.ok:
            rows = [json.loads(line) for line in answer.text().splitlines() if line.strip()]
        return answer, rows

    def open(self) -> ScenarioRun:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        # The runner's own connection warnings (a restart_zookeeper step) are expected noise.
        quiet = logging.getLogger("orchestrator.scenario.kazoo")
        quiet.setLevel(logging.ERROR)
        # The sidecars' reconnection policy: kazoo's own backs off to an hour, so after a
        # restart_zookeeper step the runner could sleep past its step's timeout.
        client = KazooClient(
            hosts=self.zookeeper.hosts,
            timeout=RUNNER_SESSION_TIMEOUT,
            logger=quiet,
            connection_retry=reconnect_retry(RUNNER_SESSION_TIMEOUT),
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
        self.sidecars.close()
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
