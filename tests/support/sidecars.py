"""Real sidecar processes for integration tests, and waits driven by ZooKeeper watches.

``SidecarProcess.start`` runs ``python -m orchestrator.cli sidecar ...`` with its logs in a file;
``wait_state`` blocks on a kazoo ``DataWatch`` of the process node (never a fixed sleep) and
fails fast, with the log tail, when the process exits instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import DataWatch

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "scenarios" / "releases"


def release_file(version: str) -> Path:
    """The example history's file of ``version`` (``0.10.0`` -> ``v0_10_0.py``)."""
    return RELEASES / f"v{version.replace('.', '_')}.py"


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``catalog-upgrade ARGS`` in a subprocess; its completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@attrs.define
class SidecarProcess:
    """One running ``catalog-upgrade sidecar`` child process."""

    process_id: str
    process: subprocess.Popen[bytes]
    log_file: Path
    node_path: str
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
        http: str = "127.0.0.1:0",
        release: str | None = None,
        extra: Sequence[str] = (),
    ) -> SidecarProcess:
        args = [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "--log-level",
            "DEBUG",
            "--log-json",
            "sidecar",
            "--zk",
            hosts,
            "--env",
            env,
            "--release",
            release or str(release_file(version)),
            "--deploy-generation",
            str(generation),
            "--http",
            http,
            "--process-id",
            process_id,
            "--session-timeout",
            str(session_timeout),
        ]
        if blob is not None:
            args += ["--blob", str(blob)]
        if auto_promote:
            args.append("--auto-promote")
        args += list(extra)
        log_file = log_dir / f"{process_id}.log"
        with log_file.open("wb") as log:
            process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=log_dir
            )
        return cls(
            process_id=process_id,
            process=process,
            log_file=log_file,
            node_path=f"/catalog-upgrade/{env}/processes/{process_id}",
            client=client,
        )

    # -- waiting ------------------------------------------------------------------------------

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_node(
        self, predicate: Callable[[Mapping[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """The process node's value once ``predicate`` holds (a DataWatch, not polling)."""
        matched = threading.Event()
        seen: dict[str, Any] = {}

        def watch(data: bytes | None, _stat: object, _event: object = None) -> bool:
            if matched.is_set():
                return False
            if data:
                value = json.loads(data)
                seen.clear()
                seen.update(value)
                if predicate(value):
                    matched.set()
                    return False
            return True

        DataWatch(self.client, self.node_path, watch)
        deadline = time.monotonic() + timeout
        # Wake now and then only to notice a process that died instead of changing state.
        while not matched.wait(min(0.25, max(0.0, deadline - time.monotonic()))):
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.process_id} exited with {self.process.returncode} while waited on; "
                    f"last node {seen}\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.process_id}: condition not met within {timeout} s; last node {seen}\n"
                    f"{self.log_tail()}"
                )
        return dict(seen)

    def wait_state(self, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_node(lambda node: node.get("state") in states, timeout)

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.process_id} did not exit within {timeout} s\n{self.log_tail()}"
            ) from None

    # -- HTTP ---------------------------------------------------------------------------------

    def base_url(self) -> str:
        data, _ = self.client.get(self.node_path)
        return f"http://{json.loads(data)['http']}"

    def http(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        return http_call(method, self.base_url() + path, body)

    # -- stopping -----------------------------------------------------------------------------

    def signal(self, signum: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def http_call(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One HTTP request; (status, body) for success and error statuses alike."""
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def json_lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def tree_digest(client: KazooClient, path: str) -> str:
    """A digest of every znode's path and data below ``path`` ('' when it does not exist)."""
    digest = hashlib.sha256()

    def walk(node: str) -> None:
        try:
            data, _ = client.get(node)
            children = client.get_children(node)
        except NoNodeError:
            return
        digest.update(node.encode() + b"\0" + data + b"\0")
        for child in sorted(children):
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
