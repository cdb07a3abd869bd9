"""The scenario runner: real sidecar processes, a real ZooKeeper, real faults.

``run_files`` validates every scenario file first (``orchestrator.scenario_format``; nothing
runs if one is invalid), then runs each in a fresh environment: its own environment name under
the ZooKeeper root, its own blob directory and log directory in a temporary directory. Each step
is executed by :class:`ScenarioRun`, which :mod:`orchestrator.simulate` drives as well.

How steps wait (never a fixed sleep, except the ``sleep`` action itself):

* ``wait``: a ZooKeeper watch on the process node ``processes/<id>``, re-armed on every change,
  plus the child's exit status; ``ready``/``serving`` are confirmed by ``/readyz`` answering 200;
* ``expire``: the process is stopped (SIGSTOP) until the server deletes its ephemeral process
  node -- which happens exactly when the server expires its session -- then continued (SIGCONT).
  That is a real session expiry; the process learns about it when it next talks to ZooKeeper;
* ``expect_status`` with a ``timeout``: re-read on watches of the catalog, epoch, promotion
  target, process and finalization directories.

A scenario passes only if every step held and no process exited without a step expecting it
(``stop``, ``kill``, ``expect_exit``). Whatever happens, every child is killed at the end.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from catalog.blob import BlobStore
from catalog.consensus import CONNECTION_ERRORS, Consensus, env_root
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    FINALIZE_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
)
from catalog.errors import BadInputError, CatalogError, ConnectionLostError
from catalog.release import Release
from orchestrator.fleet import Fleet, HttpAnswer, SidecarProcess, child_environment
from orchestrator.invariants import InvariantChecker, Violation, describe
from orchestrator.scenario_format import (
    ReleaseIndex,
    Scenario,
    Step,
    is_missing,
    load_scenario,
    resolve_path,
)
from orchestrator.zkserver import EmbeddedZooKeeper

__all__ = [
    "FAULT_ACTIONS",
    "AppendRecord",
    "ScenarioResult",
    "ScenarioRun",
    "StepFailed",
    "StepResult",
    "ZooKeeperTarget",
    "compare",
    "row_multiset",
    "run_files",
    "run_scenario",
]

log = structlog.get_logger(__name__)

FAULT_ACTIONS = frozenset({"kill", "pause", "expire", "restart_zookeeper"})
# Steps after which durable changes by leaders are expected (the read-only invariant skips them).
WRITING_ACTIONS = frozenset({"append", "promote"})
# How long ready/serving may take to show on /readyz once the process node says so.
READYZ_GRACE = 3.0
# The runner's own ZooKeeper session outlives a server restart.
RUNNER_SESSION_TIMEOUT = 30.0


class StepFailed(Exception):
    """An expectation of a step did not hold (the message says what and what was seen)."""


@attrs.frozen
class StepResult:
    """What one step did: ok or not, how long it took, and a short description of the outcome."""

    number: int
    line: int
    action: str
    description: str
    ok: bool
    seconds: float
    detail: str = ""
    error: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class ScenarioResult:
    """The outcome of one scenario run."""

    path: str
    name: str
    env: str
    seed: int
    ok: bool
    seconds: float
    steps: tuple[StepResult, ...]
    error: str | None = None
    status: Mapping[str, Any] | None = None
    logs: Mapping[str, str] = attrs.field(factory=dict)
    work_dir: str | None = None
    faults: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "env": self.env,
            "seed": self.seed,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "faults": self.faults,
            "steps": [s.to_json() for s in self.steps],
            "error": self.error,
            "status": self.status,
            "logs": dict(self.logs),
            "work_dir": self.work_dir,
        }


@attrs.frozen
class AppendRecord:
    """Rows a process acknowledged (HTTP 200), with its answer (shard id, ts, upper)."""

    process: str
    collection: str
    rows: tuple[Mapping[str, Any], ...]
    answer: Mapping[str, Any]


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


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _canonical_row(row: Mapping[str, Any]) -> str:
    """A row as comparable text: keys sorted, null values dropped (TOML has no null)."""
    return json.dumps(
        {k: v for k, v in row.items() if v is not None and k not in _UPDATE_COLUMNS},
        sort_keys=True,
        default=_json_default,
    )


_UPDATE_COLUMNS = frozenset({"_ts", "_diff"})


def row_multiset(rows: Sequence[Mapping[str, Any]]) -> collections.Counter[str]:
    """Rows as a multiset of canonical texts; a row carrying ``_diff`` counts that many times."""
    counts: collections.Counter[str] = collections.Counter()
    for row in rows:
        diff = row.get("_diff", 1)
        counts[_canonical_row(row)] += int(diff) if isinstance(diff, int) else 1
    return +counts


def _answer_summary(answer: HttpAnswer) -> str:
    if answer.status == 0:
        return f"unreachable ({answer.error})"
    body = answer.text().strip()
    with contextlib.suppress(ValueError):
        body = json.dumps(json.loads(body), separators=(",", ":"))
    body = body.replace("\n", " ")
    return f"HTTP {answer.status}" + (f": {body[:300]}" if body else "")


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
    checker: InvariantChecker | None = attrs.field(default=None, init=False)
    fleet: Fleet = attrs.field(init=False)
    client: KazooClient = attrs.field(init=False)
    consensus: Consensus = attrs.field(init=False)
    acked: list[AppendRecord] = attrs.field(factory=list, init=False)
    _changed: threading.Event = attrs.field(factory=threading.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self.fleet = Fleet(
            zk=self.zookeeper.hosts,
            env=self.env,
            blob_dir=self.work_dir / "blob",
            log_dir=self.work_dir / "logs",
        )

    @property
    def blob_dir(self) -> Path:
        return self.fleet.blob_dir

    # -- lifecycle ------------------------------------------------------------------------

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

    # -- observation ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``status --json`` of the environment (the same function the CLI calls)."""
        from orchestrator.status import read_status

        return read_status(self.consensus).to_json()

    def process_node(self, name: str, *, watch: bool = False) -> dict[str, Any] | None:
        """The process node's JSON (None when absent), optionally leaving a watch on it."""
        path = self.consensus.path(f"{PROCESSES_KEY}/{name}")
        watcher = self._on_change if watch else None
        try:
            data, _stat = self.client.get(path, watch=watcher)
        except NoNodeError:
            if watch and self.client.exists(path, watch=watcher) is not None:
                self._changed.set()
            return None
        value = json.loads(data) if data else None
        return value if isinstance(value, dict) else None

    def _on_change(self, _event: object) -> None:
        self._changed.set()

    def _arm_status_watches(self) -> None:
        for key in (CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY):
            self.client.exists(self.consensus.path(key), watch=self._on_change)
        for key in (PROCESSES_KEY, FINALIZE_KEY):
            path = self.consensus.path(key)
            try:
                names = self.client.get_children(path, watch=self._on_change)
            except NoNodeError:
                self.client.exists(path, watch=self._on_change)
                continue
            if key == PROCESSES_KEY:
                for name in names:
                    with contextlib.suppress(NoNodeError):
                        self.client.get(f"{path}/{name}", watch=self._on_change)

    def check_invariants(self, step: Step, *, rows: bool = False) -> list[Violation]:
        """The invariants after ``step`` (none when the run checks none)."""
        if self.checker is None:
            return []
        return self.checker.check(writes_expected=step.action in WRITING_ACTIONS, rows=rows)

    def unexpected_exits(self) -> list[str]:
        """Processes that exited while no step expected it."""
        return [
            f"process {p.name} exited with code {p.returncode} and no step expected it"
            for p in self.fleet.processes.values()
            if not p.running and not p.exit_expected
        ]

    # -- steps ------------------------------------------------------------------------------

    def execute(self, step: Step) -> str:
        """Run one step; its outcome detail. StepFailed when an expectation does not hold."""
        handler: Callable[[Step], str] = getattr(self, f"_do_{step.action}")
        return handler(step)

    def _timeout(self, step: Step, default: float | None = None) -> float:
        if step.timeout is not None:
            return step.timeout
        return default if default is not None else self.default_timeout

    def _process(self, step: Step) -> SidecarProcess:
        return self.fleet.get(step.process)

    def _do_start(self, step: Step) -> str:
        assert step.release is not None and step.generation is not None
        release_file = self.release_files[step.release]
        names = list(step.processes)
        self.rng.shuffle(names)  # concurrent starts in a seed-chosen order
        started = []
        for name in names:
            process = self.fleet.start(
                name,
                release_file,
                step.release,
                step.generation,
                auto_promote=step.auto_promote,
                session_timeout=step.session_timeout or self.default_session_timeout,
                crash_before_write=step.crash_before_write,
            )
            started.append(f"{name} pid {process.pid}")
        return ", ".join(started)

    def _do_wait(self, step: Step) -> str:
        assert step.state is not None
        process = self._process(step)
        return self.wait_state(process, step.state, self._timeout(step))

    def wait_state(self, process: SidecarProcess, state: str, timeout: float) -> str:
        """Wait until ``process`` reaches ``state`` (see the module docstring); the detail."""
        started = time.monotonic()
        deadline = started + timeout
        if state == "exited":
            code = process.wait_exit(timeout)
            if code is None:
                raise StepFailed(f"{process.name} still runs after {timeout:g} s")
            return f"exited with code {code}"
        last: dict[str, Any] | None = None
        while True:
            self._changed.clear()
            try:
                node = self.process_node(process.name, watch=True)
            except CONNECTION_ERRORS:
                node = None  # ZooKeeper restarting: the watch re-arms on the next turn
            if node is not None:
                last = node
                if node.get("state") == state:
                    if state in ("ready", "serving"):
                        self._confirm_readyz(process, deadline)
                    return f"{state} after {time.monotonic() - started:.2f} s"
            code = process.returncode
            if code is not None:
                if (state == "fenced" and code == 3) or (state == "failed" and code not in (0, 3)):
                    return f"exited with code {code} ({state})"
                seen = f" (last state {last.get('state')})" if last else ""
                raise StepFailed(
                    f"{process.name} exited with code {code} while waiting for {state}{seen}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = "no process node" if last is None else f"state {last.get('state')}"
                error = last.get("error") if last else None
                raise StepFailed(
                    f"{process.name} did not reach {state} within {timeout:g} s ({seen}"
                    + (f", error {json.dumps(error)}" if error else "")
                    + ")"
                )
            # The watch wakes us on any change; the cap notices the child exiting.
            self._changed.wait(min(remaining, 0.2))

    def _confirm_readyz(self, process: SidecarProcess, deadline: float) -> None:
        """The node says ready/serving: /readyz must agree (DESIGN.md section 8)."""
        limit = max(deadline, time.monotonic() + READYZ_GRACE)
        while True:
            answer = process.request("GET", "/readyz?verbose", timeout=2.0)
            if answer.status == 200:
                return
            if time.monotonic() >= limit or not process.running:
                raise StepFailed(
                    f"{process.name}'s node says ready but /readyz answers "
                    f"{_answer_summary(answer)}"
                )
            time.sleep(0.05)

    def _do_promote(self, step: Step) -> str:
        assert step.generation is not None
        if step.process:
            process = self._process(step)
            answer = process.request(
                "POST",
                f"/promote?deploy_generation={step.generation}",
                b"",
                timeout=self._timeout(step),
            )
            expected = step.expect_http or (200,)
            if answer.status not in expected:
                raise StepFailed(
                    f"POST /promote to {process.name} answered {_answer_summary(answer)}, "
                    f"expected HTTP {'/'.join(map(str, expected))}"
                )
            return _answer_summary(answer)
        command = [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "promote",
            "--deploy-generation",
            str(step.generation),
            "--zk",
            self.zookeeper.hosts,
            "--env",
            self.env,
        ]
        if step.wait is not None:
            command += ["--wait", f"{step.wait:g}"]
        timeout = self._timeout(step, (step.wait or 0.0) + self.default_timeout)
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                timeout=timeout,
                env=child_environment(),
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise StepFailed(f"`catalog-upgrade promote` still runs after {timeout:g} s") from exc
        expected_code = step.code if step.code is not None else 0
        output = (done.stdout + done.stderr).decode(errors="replace").strip()
        if done.returncode != expected_code:
            raise StepFailed(
                f"`catalog-upgrade promote --deploy-generation {step.generation}` exited "
                f"{done.returncode}, expected {expected_code}: {output[-600:]}"
            )
        said = (done.stdout if done.returncode == 0 else done.stderr).decode(errors="replace")
        lines = [line for line in said.splitlines() if line.strip() and not line.startswith("{")]
        shown = lines[0] if done.returncode else (lines[-1] if lines else "")
        return f"exit {done.returncode}" + (f": {shown.strip()}" if shown else "")

    def _do_append(self, step: Step) -> str:
        assert step.collection is not None
        process = self._process(step)
        body = "".join(json.dumps(row, default=_json_default) + "\n" for row in step.rows)
        answer = process.request(
            "POST",
            f"/append?collection={step.collection}",
            body.encode(),
            timeout=self._timeout(step, 15.0),
        )
        if step.refused:
            if answer.ok:
                raise StepFailed(
                    f"{process.name} acknowledged a write that must be refused: "
                    f"{_answer_summary(answer)}"
                )
            return f"refused: {_answer_summary(answer)}"
        expected = step.expect_http or (200,)
        if answer.status not in expected:
            raise StepFailed(
                f"append to {process.name} answered {_answer_summary(answer)}, expected HTTP "
                f"{'/'.join(map(str, expected))}"
            )
        if answer.ok:
            data = json.loads(answer.body or b"{}")
            self.acked.append(AppendRecord(process.name, step.collection, step.rows, data))
            return f"HTTP {answer.status}: ts {data.get('ts')}, shard {data.get('shard_id')}"
        return _answer_summary(answer)

    def read_rows(
        self, process: SidecarProcess, collection: str, as_of: int | None, timeout: float
    ) -> tuple[HttpAnswer, list[dict[str, Any]]]:
        query = f"/read?collection={collection}" + (f"&as_of={as_of}" if as_of is not None else "")
        answer = process.request("GET", query, timeout=timeout)
        rows = []
        if answer.ok:
            rows = [json.loads(line) for line in answer.text().splitlines() if line.strip()]
        return answer, rows

    def _do_read(self, step: Step) -> str:
        assert step.collection is not None
        process = self._process(step)
        answer, rows = self.read_rows(
            process, step.collection, step.as_of, self._timeout(step, 30.0)
        )
        expected_http = step.expect_http or (200,)
        if answer.status not in expected_http:
            raise StepFailed(
                f"read from {process.name} answered {_answer_summary(answer)}, expected HTTP "
                f"{'/'.join(map(str, expected_http))}"
            )
        if not answer.ok:
            return _answer_summary(answer)
        count = sum(row_multiset(rows).values())
        if step.expect_count is not None and count != step.expect_count:
            raise StepFailed(
                f"read {count} row(s) of {step.collection} from {process.name}, expected "
                f"{step.expect_count}: {rows[:5]}"
            )
        if step.expect_rows is not None:
            got = row_multiset(rows)
            want = row_multiset(step.expect_rows)
            if got != want:
                missing = list((want - got).elements())
                extra = list((got - want).elements())
                raise StepFailed(
                    f"rows of {step.collection} read from {process.name} differ: missing "
                    f"{missing[:5]}, unexpected {extra[:5]}"
                )
        return f"{count} row(s)"

    def _do_kill(self, step: Step) -> str:
        process = self._process(step)
        was_running = process.running
        code = process.kill()
        process.exit_expected = True
        return f"killed (exit {code})" if was_running else f"had already exited with {code}"

    def _do_pause(self, step: Step) -> str:
        process = self._process(step)
        if not process.running:
            raise StepFailed(f"{process.name} is not running (exit {process.returncode})")
        process.pause()
        return f"SIGSTOP pid {process.pid}"

    def _do_resume(self, step: Step) -> str:
        process = self._process(step)
        process.resume()
        return f"SIGCONT pid {process.pid}"

    def _do_expire(self, step: Step) -> str:
        """SIGSTOP until the server expires the session (its ephemeral node goes), SIGCONT."""
        process = self._process(step)
        if self.process_node(process.name) is None:
            raise StepFailed(f"{process.name} has no process node: nothing to expire")
        timeout = self._timeout(step, process.session_timeout * 4 + 10)
        started = time.monotonic()
        process.pause()
        try:
            while True:
                self._changed.clear()
                if self.process_node(process.name, watch=True) is None:
                    break
                remaining = started + timeout - time.monotonic()
                if remaining <= 0:
                    raise StepFailed(
                        f"the session of {process.name} did not expire within {timeout:g} s"
                    )
                self._changed.wait(min(remaining, 1.0))
        finally:
            process.resume()
        return f"session expired after {time.monotonic() - started:.2f} s paused"

    def _do_restart_zookeeper(self, step: Step) -> str:
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

    def _do_stop(self, step: Step) -> str:
        process = self._process(step)
        process.terminate()
        timeout = self._timeout(step, 15.0)
        code = process.wait_exit(timeout)
        process.exit_expected = True
        if code is None:
            raise StepFailed(f"{process.name} did not exit within {timeout:g} s of SIGTERM")
        expected = step.code if step.code is not None else 0
        if code != expected:
            raise StepFailed(f"{process.name} exited with code {code}, expected {expected}")
        return f"exited {code}"

    def _do_expect_exit(self, step: Step) -> str:
        assert step.code is not None
        process = self._process(step)
        timeout = self._timeout(step)
        code = process.wait_exit(timeout)
        if code is None:
            raise StepFailed(
                f"{process.name} still runs after {timeout:g} s (expected exit {step.code})"
            )
        process.exit_expected = True
        if code != step.code:
            raise StepFailed(f"{process.name} exited with code {code}, expected {step.code}")
        if step.log_contains and step.log_contains not in process.log_text():
            raise StepFailed(f"the log of {process.name} does not mention {step.log_contains!r}")
        return f"exited {code}"

    def _do_expect_status(self, step: Step) -> str:
        assert step.path is not None
        deadline = time.monotonic() + (step.timeout or 0.0)
        while True:
            self._changed.clear()
            if step.timeout is not None:
                with contextlib.suppress(*CONNECTION_ERRORS):
                    self._arm_status_watches()
            value: Any = None
            problem: str | None
            try:
                document = self.status()
            except CatalogError as exc:
                problem = f"status unreadable: {exc.message}"
            else:
                value = resolve_path(document, step.path)
                problem = compare(value, step.comparator or "equals", step.expected)
            if problem is None:
                shown = "absent" if is_missing(value) else json.dumps(value, default=str)[:200]
                return f"{step.path} = {shown}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepFailed(f"status {step.path}: {problem}")
            self._changed.wait(min(remaining, 0.5))

    def _do_sleep(self, step: Step) -> str:
        assert step.seconds is not None
        time.sleep(step.seconds)  # deliberate: the scenario lets time pass
        return f"slept {step.seconds:g} s"


def _numbers_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_numbers_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_numbers_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def compare(value: Any, comparator: str, expected: Any) -> str | None:
    """None when ``value`` satisfies the comparison, else what was seen."""
    shown = "absent" if is_missing(value) else json.dumps(value, default=str)[:300]
    if comparator == "exists":
        present = not is_missing(value) and value is not None
        return None if present == expected else f"is {shown}, expected exists = {expected}"
    if is_missing(value):
        return f"is absent, expected {comparator} {expected!r}"
    if comparator == "equals":
        return None if _numbers_equal(value, expected) else f"is {shown}, expected {expected!r}"
    if comparator == "not_equals":
        return None if not _numbers_equal(value, expected) else f"is {shown}, expected otherwise"
    if comparator == "length":
        if not isinstance(value, (list, dict, str)):
            return f"is {shown}, which has no length"
        return None if len(value) == expected else f"has length {len(value)}: {shown}"
    if comparator == "contains":
        if isinstance(value, str):
            ok = isinstance(expected, str) and expected in value
        elif isinstance(value, (list, dict)):
            ok = any(_numbers_equal(v, expected) for v in value) or expected in value
        else:
            ok = False
        return None if ok else f"is {shown}, which does not contain {expected!r}"
    raise AssertionError(comparator)


# --- running scenario files ----------------------------------------------------------------


def _environment_name(scenario: Scenario) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in scenario.path.stem.lower())[:30]
    return f"scenario-{slug}-{uuid.uuid4().hex[:8]}"


def run_scenario(
    scenario: Scenario,
    zookeeper: ZooKeeperTarget,
    *,
    seed: int,
    on_step: Callable[[StepResult], None] | None = None,
    keep_work_dir: bool = False,
) -> ScenarioResult:
    """Run one validated scenario in a fresh environment; never raises for a failed step."""
    env = _environment_name(scenario)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{env}-"))
    run = ScenarioRun(
        zookeeper=zookeeper,
        work_dir=work_dir,
        env=env,
        release_files=scenario.release_files,
        default_timeout=scenario.defaults.timeout,
        default_session_timeout=scenario.defaults.session_timeout,
        rng=random.Random(seed),
        history=scenario.history,
        invariants=scenario.defaults.invariants,
    )
    results: list[StepResult] = []
    started = time.monotonic()
    error: str | None = None
    try:
        run.open()
        for step in scenario.steps:
            step_started = time.monotonic()
            try:
                detail = run.execute(step)
                violations = run.check_invariants(step)
                if violations:
                    raise StepFailed(f"invariant violated: {describe(violations)}")
            except (StepFailed, CatalogError, KazooException) as exc:
                if isinstance(exc, StepFailed):
                    message = str(exc)
                else:
                    message = exc.message if isinstance(exc, CatalogError) else repr(exc)
                error = f"step {step.number} (line {step.line}) {step.action}: {message}"
                result = StepResult(
                    step.number,
                    step.line,
                    step.action,
                    step.describe(),
                    False,
                    time.monotonic() - step_started,
                    error=message,
                    note=step.note,
                )
            else:
                result = StepResult(
                    step.number,
                    step.line,
                    step.action,
                    step.describe(),
                    True,
                    time.monotonic() - step_started,
                    detail=detail,
                    note=step.note,
                )
            results.append(result)
            if on_step is not None:
                on_step(result)
            if not result.ok:
                break
        if error is None:
            unexpected = run.unexpected_exits()
            if unexpected:
                error = "; ".join(unexpected)
        status: Mapping[str, Any] | None = None
        logs: dict[str, str] = {}
        if error is not None:
            with contextlib.suppress(Exception):  # diagnostics only: never hide the failure
                status = run.status()
            logs = {name: p.tail_log() for name, p in run.fleet.processes.items()}
            if zookeeper.server is not None:
                logs["zookeeper"] = zookeeper.server.tail_log(20)
    finally:
        run.close(delete_environment=error is None)
    ok = error is None
    if ok and not keep_work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return ScenarioResult(
        path=str(scenario.path),
        name=scenario.name,
        env=env,
        seed=seed,
        ok=ok,
        seconds=time.monotonic() - started,
        steps=tuple(results),
        error=error,
        status=status,
        logs=logs,
        work_dir=None if ok and not keep_work_dir else str(work_dir),
        faults=sum(1 for r in results if r.action in FAULT_ACTIONS and r.ok),
    )


def load_all(files: Sequence[Path], *, restartable: bool) -> list[Scenario]:
    """Validate every file before anything runs (BadInputError, exit 2, on the first bad one)."""
    indexes: dict[Path, ReleaseIndex] = {}
    scenarios = []
    for file in files:
        scenario = load_scenario(file, indexes=indexes)
        if scenario.uses_zookeeper_restart and not restartable:
            step = next(s for s in scenario.steps if s.action == "restart_zookeeper")
            raise BadInputError(
                f"{file}:{step.line}: step {step.number} restarts ZooKeeper, which only the "
                "embedded server allows: run without --zk/CATALOG_UPGRADE_ZK",
                path=str(file),
                step=step.number,
                line=step.line,
            )
        scenarios.append(scenario)
    return scenarios


def run_files(
    files: Sequence[Path],
    *,
    zk: str | None,
    seed: int,
    on_start: Callable[[Scenario], None] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
    on_done: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Validate all files, then run each in its own environment; the results in order."""
    scenarios = load_all(files, restartable=not zk)
    results = []
    with ZooKeeperTarget.open(zk) as target:
        for scenario in scenarios:
            if on_start is not None:
                on_start(scenario)
            result = run_scenario(scenario, target, seed=seed, on_step=on_step)
            results.append(result)
            if on_done is not None:
                on_done(result)
    return results
