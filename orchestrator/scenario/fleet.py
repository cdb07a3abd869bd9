"""The sidecar processes a scenario runs: started, signalled, waited for and asked over HTTP.

Every process is a real ``catalog-upgrade sidecar`` child (``python -m orchestrator.cli``) with
its own ZooKeeper session, HTTP port and log file; nothing is simulated in-process. Faults are
real signals: SIGKILL (crash), SIGSTOP/SIGCONT (a paused "zombie", a long GC pause), SIGTERM
(graceful stop). :meth:`Fleet.close` kills every child whatever happened, paused ones included
(SIGKILL works on a stopped process).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs
import structlog

from catalog.errors import BadInputError
from orchestrator.failpoints import CRASH_BEFORE_WRITE_ENV
from orchestrator.zkserver import free_port

__all__ = ["Fleet", "HttpAnswer", "SidecarProcess", "child_environment"]

log = structlog.get_logger(__name__)

# The directory that holds the `catalog` and `orchestrator` packages, so children import the
# same code as the runner even when the project is not installed.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def child_environment() -> dict[str, str]:
    """The environment of a child ``catalog-upgrade`` process: this one, importing the same
    source, with no ZooKeeper or environment name inherited (children get them as flags)."""
    environment = dict(os.environ)
    paths = [str(_SOURCE_ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    environment.pop("CATALOG_UPGRADE_ZK", None)
    environment.pop("CATALOG_UPGRADE_ENV", None)
    environment.pop(CRASH_BEFORE_WRITE_ENV, None)  # only a start step sets it
    return environment


@attrs.frozen
class HttpAnswer:
    """An HTTP answer; ``status`` 0 when the process could not be reached at all."""

    status: int
    body: bytes
    error: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def summary(self) -> str:
        """One line for a step's outcome: the status and the body, JSON compacted."""
        if self.status == 0:
            return f"unreachable ({self.error})"
        body = self.text().strip()
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(body), separators=(",", ":"))
        body = body.replace("\n", " ")
        return f"HTTP {self.status}" + (f": {body[:300]}" if body else "")


@attrs.define
class SidecarProcess:
    """One sidecar child process and what the runner knows about it."""

    name: str
    version: str
    release_file: Path
    deploy_generation: int
    session_timeout: float
    http: str
    log_path: Path
    popen: subprocess.Popen[bytes]
    started_at: float
    paused: bool = False
    # Set once an expectation (stop, expect_exit, kill) accounted for how it ended.
    exit_expected: bool = False

    @property
    def process_id(self) -> str:
        """The id the sidecar registers under (``processes/<id>``): the scenario's name."""
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

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signum)

    def kill(self) -> int:
        """SIGKILL and reap; the exit code (-9, or the code it had already exited with)."""
        self._signal(signal.SIGKILL)
        self.paused = False
        return self.popen.wait()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False

    def terminate(self) -> None:
        if self.paused:
            self.resume()
        self._signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once it exits within ``timeout`` seconds, else None."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail_log(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def request(
        self, method: str, path: str, body: bytes | None = None, *, timeout: float = 10.0
    ) -> HttpAnswer:
        """One HTTP request to the process's server (never raises for HTTP or socket errors)."""
        request = urllib.request.Request(f"http://{self.http}{path}", data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/x-ndjson")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return HttpAnswer(status=answer.status, body=answer.read())
        except urllib.error.HTTPError as exc:
            return HttpAnswer(status=exc.code, body=exc.read())
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            return HttpAnswer(status=0, body=b"", error=f"{type(exc).__name__}: {reason}")

    def describe(self) -> str:
        state = "paused" if self.paused else ("running" if self.running else "exited")
        code = "" if self.running else f" code {self.returncode}"
        return (
            f"{self.name} ({self.version} g{self.deploy_generation}, pid {self.pid}, "
            f"http {self.http}): {state}{code}"
        )


@attrs.define
class Fleet:
    """The sidecars of one scenario environment; ``close()`` kills every one of them."""

    zk: str
    env: str
    blob_dir: Path
    log_dir: Path
    python: str = sys.executable
    log_level: str = "INFO"
    processes: dict[str, SidecarProcess] = attrs.field(factory=dict)

    def command(
        self,
        name: str,
        release_file: Path,
        deploy_generation: int,
        *,
        http: str,
        auto_promote: bool,
        session_timeout: float,
    ) -> list[str]:
        """The exact command line of a sidecar child."""
        command = [
            self.python,
            "-m",
            "orchestrator.cli",
            "--log-json",
            "--log-level",
            self.log_level,
            "sidecar",
            "--release",
            str(release_file),
            "--deploy-generation",
            str(deploy_generation),
            "--blob",
            str(self.blob_dir),
            "--http",
            http,
            "--process-id",
            name,
            "--session-timeout",
            f"{session_timeout:g}",
            "--zk",
            self.zk,
            "--env",
            self.env,
        ]
        if auto_promote:
            command.append("--auto-promote")
        return command

    def start(
        self,
        name: str,
        release_file: Path,
        version: str,
        deploy_generation: int,
        *,
        auto_promote: bool = False,
        session_timeout: float = 2.0,
        crash_before_write: int | None = None,
    ) -> SidecarProcess:
        """Start one sidecar child; its output goes to ``<log_dir>/<name>.log``. With
        ``crash_before_write`` it kills itself before that leader write
        (:mod:`orchestrator.failpoints`)."""
        if name in self.processes:
            raise BadInputError(f"process {name} was already started", process=name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        http = f"127.0.0.1:{free_port()}"
        log_path = self.log_dir / f"{name}.log"
        environment = child_environment()
        if crash_before_write is not None:
            environment[CRASH_BEFORE_WRITE_ENV] = str(crash_before_write)
        command = self.command(
            name,
            release_file,
            deploy_generation,
            http=http,
            auto_promote=auto_promote,
            session_timeout=session_timeout,
        )
        with log_path.open("ab") as out:
            popen = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
            )
        process = SidecarProcess(
            name=name,
            version=version,
            release_file=release_file,
            deploy_generation=deploy_generation,
            session_timeout=session_timeout,
            http=http,
            log_path=log_path,
            popen=popen,
            started_at=time.monotonic(),
        )
        self.processes[name] = process
        log.debug("process_started", name=name, pid=popen.pid, version=version)
        return process

    def get(self, name: str) -> SidecarProcess:
        try:
            return self.processes[name]
        except KeyError:
            raise BadInputError(f"no process named {name} was started", process=name) from None

    def running(self) -> list[SidecarProcess]:
        return [p for p in self.processes.values() if p.running]

    def close(self) -> None:
        """SIGKILL every child still running and reap them all."""
        for process in self.processes.values():
            if process.running:
                process.kill()
            else:
                process.popen.wait()
