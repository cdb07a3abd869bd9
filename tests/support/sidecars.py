"""Real sidecar processes for integration tests, through the package harness.

:class:`SidecarProcess` binds :class:`orchestrator.testing.harness.SidecarProcess` (the one way the
project starts and talks to sidecars) to the test's ZooKeeper client; waits are on watches of
the process node and fail fast, with the log tail, when the process exits instead. The fixtures
``started`` (the sidecars a test started, killed at its end) and ``launch`` (start one in the
test's environment) are a pytest plugin (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from catalog.consensus import env_root
from catalog.environment import PROCESSES_KEY
from catalog.shard import LEASE_PREFIX
from catalog_client import SidecarClient
from orchestrator.testing import harness
from orchestrator.testing.forkserver import ForkedProcess, fork_server
from support.zookeeper import ZkEnv

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "scenarios" / "releases"


def release_file(version: str, directory: Path = RELEASES) -> Path:
    """The release file of ``version`` in ``directory`` (the example history by default):
    ``0.10.0`` -> ``v0_10_0.py``."""
    return directory / f"v{version.replace('.', '_')}.py"


def read_rows(process: SidecarProcess, collection: str) -> list[dict[str, Any]]:
    """``GET /read`` of ``collection`` through ``process``: its rows without ``_ts`` and
    ``_diff``, by ``id``."""
    status, answer = process.http("GET", f"/read?collection={collection}")
    assert status == 200, answer
    found = [{k: v for k, v in r.items() if k not in ("_ts", "_diff")} for r in json_lines(answer)]
    return sorted(found, key=lambda r: r["id"])


def cli(
    *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``catalog-upgrade ARGS`` in a child process (``env`` added to this process's
    environment); its completed process (text output)."""
    done = fork_server(harness.child_environment()).run(
        ["--log-level", "WARNING", *args],
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, _text(done.stdout), _text(done.stderr)
    )


def _text(output: bytes) -> str:
    """Output as ``subprocess.run(text=True)`` gives it: decoded, newlines universal."""
    return output.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


@attrs.define
class SidecarProcess:
    """A harness sidecar (:class:`orchestrator.testing.harness.SidecarProcess`) bound to the test's
    ZooKeeper client, with the shapes the tests assert on (node JSON, status and body)."""

    sidecar: harness.SidecarProcess
    client: KazooClient

    @classmethod
    def start(
        cls,
        client: KazooClient,
        hosts: str,
        env: str,
        version: str,
        generation: int,
        *,
        process_id: str,
        log_dir: Path,
        blob: Path | str | None = None,
        auto_promote: bool = False,
        session_timeout: float = 4.0,
        http: str | None = None,
        release: str | None = None,
        extra: Sequence[str] = (),
        crash_before_write: int | None = None,
        http_token_file: Path | None = None,
        exec_environment: Mapping[str, str] | None = None,
    ) -> SidecarProcess:
        sidecar = harness.SidecarProcess.start(
            zk=hosts,
            env=env,
            name=process_id,
            version=version,
            release_file=Path(release) if release else release_file(version),
            deploy_generation=generation,
            log_path=log_dir / f"{process_id}.log",
            blob=blob,
            session_timeout=session_timeout,
            auto_promote=auto_promote,
            log_level="DEBUG",
            extra=extra,
            crash_before_write=crash_before_write,
            http_token_file=http_token_file,
            cwd=log_dir,
            http=http,
            exec_environment=exec_environment,
        )
        return cls(sidecar=sidecar, client=client)

    @property
    def process_id(self) -> str:
        return self.sidecar.name

    @property
    def process(self) -> subprocess.Popen[bytes] | ForkedProcess:
        return self.sidecar.popen

    @property
    def node_path(self) -> str:
        return f"{env_root(self.sidecar.env)}/{PROCESSES_KEY}/{self.process_id}"

    @property
    def log_file(self) -> Path:
        return self.sidecar.log_path

    def log_tail(self, lines: int = 30) -> str:
        return self.sidecar.tail_log(lines)

    def wait_node(
        self, predicate: Callable[[Mapping[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """The process node's JSON once ``predicate`` holds (on a watch, not polling)."""
        node = self.sidecar.wait_node(self.client, lambda node: predicate(node.to_json()), timeout)
        return node.to_json()

    def wait_state(self, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_node(lambda node: node.get("state") in states, timeout)

    def wait_exit(self, timeout: float = 30.0) -> int:
        code = self.sidecar.wait_exit(timeout)
        if code is None:
            raise AssertionError(
                f"{self.process_id} did not exit within {timeout} s\n{self.log_tail()}"
            )
        return code

    def http(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        answer = self.sidecar.request(method, path, body, timeout=30.0)
        return answer.status, answer.body

    def signal(self, signum: int = signal.SIGTERM) -> None:
        if self.sidecar.running:
            self.sidecar.send_signal(signum)

    def kill(self) -> None:
        if self.sidecar.running:
            self.sidecar.kill()


def http_call(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One HTTP request; (status, body) for success and error statuses alike, OSError when
    nothing answers."""
    parts = urlsplit(url)
    client = SidecarClient(f"{parts.scheme}://{parts.netloc}", timeout=30.0, keep_alive=False)
    answer = client.send(method, parts.path + (f"?{parts.query}" if parts.query else ""), body)
    if answer.status == 0:
        raise OSError(answer.error)
    return answer.status, answer.body


def ndjson(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Rows as the JSON-lines body of ``POST /append``."""
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def json_lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def tree_digest(client: KazooClient, path: str, *, readers: bool = True) -> str:
    """A digest of every znode's path and data below ``path`` ('' when it does not exist);
    without ``readers``, reader leases and registrations (ephemeral ``lease-`` nodes a read
    holds, catalog.shard.readers) are left out."""
    digest = hashlib.sha256()

    def walk(node: str) -> None:
        try:
            data, _ = client.get(node)
            children = client.get_children(node)
        except NoNodeError:
            return
        digest.update(node.encode() + b"\0" + data + b"\0")
        for child in sorted(children):
            if readers or not child.startswith(LEASE_PREFIX):
                walk(f"{node}/{child}")

    if client.exists(path) is None:
        return ""
    walk(path)
    return digest.hexdigest()


@contextlib.contextmanager
def sidecars() -> Iterator[list[SidecarProcess]]:
    """Collects started sidecars and kills any still running at the end of the block."""
    started: list[SidecarProcess] = []
    try:
        yield started
    finally:
        for sidecar in started:
            sidecar.kill()


@pytest.fixture
def started() -> Iterator[list[SidecarProcess]]:
    """The sidecars a test starts; any still running are killed at its end."""
    with sidecars() as processes:
        yield processes


#: ``launch(version, generation, process_id, **SidecarProcess.start options)``
Launch = Callable[..., SidecarProcess]


@pytest.fixture
def launch(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, started: list[SidecarProcess]
) -> Launch:
    """Start a sidecar of the test's environment, its logs in tmp_path and its blob store
    below it unless ``blob`` is given (None: the one the catalog records); killed at the end."""

    def start(version: str, generation: int, process_id: str, **kwargs: Any) -> SidecarProcess:
        kwargs.setdefault("blob", tmp_path / "blob")
        process = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, version, generation, process_id=process_id,
            log_dir=tmp_path, **kwargs,
        )  # fmt: skip
        started.append(process)
        return process

    return start
