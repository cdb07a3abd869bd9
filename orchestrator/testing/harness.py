"""The sidecar harness: real ``catalog-upgrade sidecar`` child processes, started, signalled,
waited for and asked over HTTP. Shipped in the package (the way kazoo ships its test harness),
so the demo, the scenario fleet and the test suite start and talk to sidecars one way.

Every child is ``python -m orchestrator.cli sidecar ...`` with its own ZooKeeper session, HTTP
port and log file; nothing is simulated in-process. Children are forked by the fork server
(:mod:`orchestrator.testing.forkserver`), which paid for their imports once; one in a network
namespace is started with ``ip netns exec``. Faults are real signals: SIGKILL (crash),
SIGSTOP/SIGCONT (a paused "zombie"), SIGTERM (graceful stop). Waiting for a state watches the
process node (:func:`catalog.consensus.watch.wait_until`) and fails fast, with the log's tail,
when the child exits instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlencode

import attrs
from kazoo.client import KazooClient

from catalog.consensus import env_root
from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until, watched_data
from catalog_client import Answer, SidecarClient, retry_after_seconds
from catalog_client.media import JSON_LINES_TYPE
from orchestrator.failpoints import CRASH_BEFORE_WRITE_ENV, LOSE_ANSWER_AFTER_WRITE_ENV
from orchestrator.process_node import ProcessNode, process_key
from orchestrator.testing.forkserver import ENTRY, ForkedProcess, fork_server
from orchestrator.testing.netns import Namespace
from orchestrator.zookeeper.clients import close, connect

__all__ = [
    "SidecarExited",
    "SidecarProcess",
    "child_environment",
    "metric_samples",
    "sidecar_command",
]

# The directory holding the `catalog` and `orchestrator` packages, so children import the same
# code as their parent even when the project is not installed.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _spawn(
    command: Sequence[str],
    log_path: Path,
    failpoints: Mapping[str, str],
    forked: bool,
    exec_environment: Mapping[str, str] | None,
    cwd: Path | None,
) -> subprocess.Popen[bytes] | ForkedProcess:
    """A sidecar's process, its output appended to ``log_path``: forked from the fork server
    (its imports done once) when ``forked``, else exec'd with ``exec_environment`` added."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        if forked:
            return fork_server(child_environment()).spawn(
                list(command[3:]),  # after "python -m orchestrator.cli"
                env=child_environment(failpoints),
                cwd=cwd,
                stdout=out.fileno(),
                stderr=out.fileno(),
            )
        return subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**child_environment(failpoints), **(exec_environment or {})},
            cwd=cwd,
        )


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child ``catalog-upgrade`` process: this one, importing the same
    source, with no ZooKeeper, environment name or failpoint inherited (children get them as
    flags, and a failpoint only through ``extra``)."""
    environment = dict(os.environ)
    paths = [str(_SOURCE_ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    for name in (
        "CATALOG_UPGRADE_ZK",
        "CATALOG_UPGRADE_ENV",
        "CATALOG_UPGRADE_HTTP_TOKEN_FILE",
        CRASH_BEFORE_WRITE_ENV,
        LOSE_ANSWER_AFTER_WRITE_ENV,
    ):
        environment.pop(name, None)
    environment.update(extra or {})
    return environment


def metric_samples(text: str) -> dict[str, float]:
    """A ``/metrics`` page's samples, parsed by prometheus_client, by series as exposed:
    ``name`` or ``name{label="value",...}`` (labels in name order)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def sidecar_command(
    *,
    zk: str,
    env: str,
    release: Path | str,
    deploy_generation: int,
    process_id: str,
    http: str,
    blob: Path | str | None = None,
    session_timeout: float = 4.0,
    auto_promote: bool = False,
    log_level: str = "INFO",
    extra: Sequence[str] = (),
    python: str = sys.executable,
    finalize_after: str | None = "0",
) -> list[str]:
    """The exact command line of a sidecar child. ``finalize_after``: its
    ``--finalize-after`` (a rehearsal finalizes at once unless it asks for a window; None:
    the sidecar's default)."""
    command = [python, "-m", ENTRY, "--log-json", "--log-level", log_level]
    command += ["sidecar", "--zk", zk, "--env", env, "--release", str(release)]
    command += ["--deploy-generation", str(deploy_generation), "--process-id", process_id]
    command += ["--http", http, "--session-timeout", f"{session_timeout:g}"]
    if blob is not None:
        command += ["--blob", str(blob)]
    if auto_promote:
        command.append("--auto-promote")
    if finalize_after is not None:
        command += ["--finalize-after", finalize_after]
    return command + list(extra)


#: How long a child may take to start serving HTTP (imports, then the listener).
_ADDRESS_WAIT = 60.0


class SidecarExited(AssertionError):
    """The child exited (or never got there) while a state was awaited; the log tail says why."""


@attrs.define
class SidecarProcess:
    """One sidecar child process and what its parent knows about it."""

    name: str
    env: str
    version: str
    release_file: Path
    deploy_generation: int
    session_timeout: float
    #: The address asked for; with port 0 the child writes the one it bound to address_file.
    requested_http: str
    log_path: Path
    popen: subprocess.Popen[bytes] | ForkedProcess
    started_at: float
    paused: bool = False
    # Set once an expectation (stop, expect_exit, kill) accounted for how it ended.
    exit_expected: bool = False
    # The bearer token its writing endpoints need (sent with every POST), if it has one.
    http_token: str | None = attrs.field(default=None, repr=False)
    # The network namespace it runs in (orchestrator.testing.netns), where partitions cut it.
    netns: Namespace | None = None
    address_file: Path | None = None
    _bound: str | None = attrs.field(default=None, init=False, repr=False)

    @property
    def http(self) -> str:
        """``host:port`` the child serves on. A port the harness picked could be taken by
        another process before the child binds it, so children bind port 0 and write the
        port they got (``--http-address-file``): this waits for it."""
        if self._bound is not None:
            return self._bound
        if self.address_file is None:
            return self.requested_http
        deadline = time.monotonic() + _ADDRESS_WAIT
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                self._bound = self.address_file.read_text().strip()
                return self._bound
            if not self.running:
                raise SidecarExited(
                    f"{self.name} exited (code {self.returncode}) before serving HTTP:\n"
                    f"{self.tail_log()}"
                )
            time.sleep(0.02)
        raise SidecarExited(f"{self.name} did not serve HTTP within {_ADDRESS_WAIT:g} s")

    @classmethod
    def start(
        cls,
        *,
        zk: str,
        env: str,
        name: str,
        version: str,
        release_file: Path,
        deploy_generation: int,
        log_path: Path,
        blob: Path | str | None = None,
        session_timeout: float = 4.0,
        auto_promote: bool = False,
        crash_before_write: int | None = None,
        lose_answer_after_write: int | None = None,
        log_level: str = "INFO",
        extra: Sequence[str] = (),
        cwd: Path | None = None,
        http: str | None = None,
        http_token_file: Path | None = None,
        netns: Namespace | None = None,
        finalize_after: str | None = "0",
        exec_environment: Mapping[str, str] | None = None,
    ) -> SidecarProcess:
        """Start one child; its output (stdout and stderr) goes to ``log_path``. With
        ``crash_before_write`` it kills itself before that leader write
        (:mod:`orchestrator.failpoints`). ``http`` defaults to a free loopback port; with
        ``http_token_file`` the child requires that token and :meth:`request` sends it. With
        ``netns`` it runs in that network namespace: it listens on the namespace's address
        (without a token: ``--http-insecure``, a test's private link) and reaches ZooKeeper,
        which must then listen on every address, through the host's end of the link. With
        ``exec_environment`` (``LD_PRELOAD`` of libfaketime, say) it is exec'd with those
        variables added, not forked from the fork server (a preload needs an exec)."""
        address_file = None
        if http is None:  # the kernel's port, written back: never one another process took
            address_file = log_path.with_name(f"{log_path.name}.address")
            address_file.unlink(missing_ok=True)
            extra = [*extra, "--http-address-file", str(address_file)]
        if netns is not None:
            http = http or f"{netns.ip}:0"
            zk = zk.replace("127.0.0.1", netns.host_ip).replace("localhost", netns.host_ip)
            if http_token_file is None:
                extra = [*extra, "--http-insecure"]
        http = http or "127.0.0.1:0"
        if http_token_file is not None:
            extra = [*extra, "--http-token-file", str(http_token_file)]
        command = sidecar_command(
            zk=zk,
            env=env,
            release=release_file,
            deploy_generation=deploy_generation,
            process_id=name,
            http=http,
            blob=blob,
            session_timeout=session_timeout,
            auto_promote=auto_promote,
            log_level=log_level,
            extra=extra,
            finalize_after=finalize_after,
        )
        if netns is not None:
            command = netns.command(command)
        failpoints = {
            variable: str(value)
            for variable, value in (
                (CRASH_BEFORE_WRITE_ENV, crash_before_write),
                (LOSE_ANSWER_AFTER_WRITE_ENV, lose_answer_after_write),
            )
            if value is not None
        }
        forked = netns is None and exec_environment is None
        popen = _spawn(command, log_path, failpoints, forked, exec_environment, cwd)
        return cls(
            name=name,
            env=env,
            version=version,
            release_file=release_file,
            deploy_generation=deploy_generation,
            session_timeout=session_timeout,
            requested_http=http,
            log_path=log_path,
            popen=popen,
            started_at=time.monotonic(),
            http_token=None if http_token_file is None else http_token_file.read_text().strip(),
            netns=netns,
            address_file=address_file,
        )

    @property
    def process_id(self) -> str:
        """The id the sidecar registers under (``processes/<id>``)."""
        return self.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    # -- signals --------------------------------------------------------------------------

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signum)

    def kill(self) -> int:
        """SIGKILL and reap; the exit code (-9, or the code it had already exited with)."""
        self.send_signal(signal.SIGKILL)
        self.paused = False
        return self.popen.wait()

    def pause(self) -> None:
        self.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)
        self.paused = False

    def terminate(self) -> None:
        if self.paused:
            self.resume()
        self.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once it exits within ``timeout`` seconds, else None."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until ``/readyz`` answers 200; SidecarExited (with the log tail) if the process ends
        first, TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.request("GET", "/readyz", timeout=1).status == 200:
                return
            if not self.running:
                raise SidecarExited(f"{self.name} exited\n{self.tail_log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready within {timeout}s\n{self.tail_log()}")
            time.sleep(0.02)

    # -- what it says ---------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail_log(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """One HTTP request to the process's server (with its token, if it has one): the
        client's raw exchange, on a connection of its own."""
        return self.client(timeout=timeout, keep_alive=False).send(
            method, path, body, headers=headers
        )

    def append(
        self,
        collection: str,
        body: bytes,
        *,
        key: str,
        deadline: float,
        timeout: float = 10.0,
        retry_unanswered: bool = False,
    ) -> Answer:
        """``POST /append`` of JSON lines under ``key``, as a client does: a 503 is asked again
        after its ``Retry-After`` (0.2 s when it names none) with the same key, so the rows
        land at most once, while the wait ends before ``deadline`` (a monotonic time); so is
        an unanswered request with ``retry_unanswered``. The last answer."""
        headers = {"Idempotency-Key": key, "Content-Type": JSON_LINES_TYPE}
        path = f"/append?{urlencode({'collection': collection})}"
        while True:
            answer = self.request("POST", path, body, timeout=timeout, headers=headers)
            if answer.status != 503 and not (retry_unanswered and answer.status == 0):
                return answer
            wait = retry_after_seconds(answer.headers) or 0.2
            if time.monotonic() + wait > deadline:
                return answer
            time.sleep(wait)

    def client(self, *, timeout: float = 30.0, keep_alive: bool = True) -> SidecarClient:
        """A client of the process's server, with its token."""
        host, _, port = self.http.rpartition(":")
        if host.strip("[]") in ("0.0.0.0", "::", ""):  # a wildcard listener: ask on loopback
            host = "127.0.0.1"
        return SidecarClient(
            f"http://{host}:{port}", token=self.http_token, timeout=timeout, keep_alive=keep_alive
        )

    def wait_node(
        self,
        client: KazooClient,
        predicate: Callable[[ProcessNode], bool],
        timeout: float = 30.0,
    ) -> ProcessNode:
        """The process node once ``predicate`` holds, on a watch of the node; SidecarExited
        (with the log's tail) when the child exits first or the time runs out."""
        key = process_key(self.name)
        path = f"{env_root(self.env)}/{key}"
        last: ProcessNode | None = None

        def look(watch: Watch) -> ProcessNode | NotYet:
            nonlocal last
            found = watched_data(client, path, watch)
            if found is not None:
                last = ProcessNode.decode(key, found[0])
                if predicate(last):
                    return last
            if not self.running:
                raise SidecarExited(
                    f"{self.name} exited with {self.returncode} while waited on; last node "
                    f"{None if last is None else last.to_json()}\n{self.tail_log()}"
                )
            return NOT_YET

        try:
            # A watch wakes us on every change; the safety interval notices an exit.
            return wait_until(look, timeout, safety=0.25)
        except WaitTimeout:
            raise SidecarExited(
                f"{self.name}: condition not met within {timeout:g} s; last node "
                f"{None if last is None else last.to_json()}\n{self.tail_log()}"
            ) from None

    def wait_state(self, client: KazooClient, *states: str, timeout: float = 30.0) -> ProcessNode:
        """The process node once its state is one of ``states``."""
        return self.wait_node(client, lambda node: node.state in states, timeout)

    def wait_serving(self, zk: str, timeout: float = 60.0) -> ProcessNode:
        """The process node once it serves, on a ZooKeeper client of its own: what to wait
        for before appending to an ``--auto-promote`` process, which is ready (read-only)
        before it bootstraps."""
        client = connect(zk)
        try:
            return self.wait_state(client, "serving", timeout=timeout)
        finally:
            close(client)

    def describe(self) -> str:
        state = "paused" if self.paused else ("running" if self.running else "exited")
        code = "" if self.running else f" code {self.returncode}"
        return (
            f"{self.name} ({self.version} g{self.deploy_generation}, pid {self.pid}, "
            f"http {self.http}): {state}{code}"
        )
