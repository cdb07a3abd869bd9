"""The sidecars of one scenario environment, started through the package harness.

Every process is a real ``catalog-upgrade sidecar`` child (:mod:`orchestrator.testing.harness`) with
its own ZooKeeper session, HTTP port and log file. :meth:`Sidecars.close` kills every child
whatever happened, paused ones included (SIGKILL works on a stopped process).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import structlog

from catalog.errors import BadInputError
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.netns import Namespace

__all__ = ["Sidecars"]

log = structlog.get_logger(__name__)


@attrs.define
class Sidecars:
    """The sidecars of one scenario environment; ``close()`` kills every one of them."""

    zk: str
    env: str
    blob_dir: Path
    log_dir: Path
    python: str = sys.executable
    log_level: str = "INFO"
    processes: dict[str, SidecarProcess] = attrs.field(factory=dict)
    namespaces: list[Namespace] = attrs.field(factory=list)

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
        lose_answer_after_write: int | None = None,
        isolated: bool = False,
        finalize_after: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> SidecarProcess:
        """Start one sidecar child; its output goes to ``<log_dir>/<name>.log``. An
        ``isolated`` one runs in a network namespace of its own (a partition can cut it)."""
        if name in self.processes:
            raise BadInputError(f"process {name} was already started", process=name)
        netns = None
        if isolated:
            netns = Namespace.allocate()
            self.namespaces.append(netns)
        process = SidecarProcess.start(
            zk=self.zk,
            env=self.env,
            name=name,
            version=version,
            release_file=release_file,
            deploy_generation=deploy_generation,
            log_path=self.log_dir / f"{name}.log",
            blob=self.blob_dir,
            session_timeout=session_timeout,
            auto_promote=auto_promote,
            crash_before_write=crash_before_write,
            lose_answer_after_write=lose_answer_after_write,
            log_level=self.log_level,
            netns=netns,
            finalize_after=finalize_after or "0",
            extra=extra,
        )
        self.processes[name] = process
        log.debug("process_started", name=name, pid=process.pid, version=version)
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
        for namespace in self.namespaces:
            namespace.delete()
        self.namespaces.clear()
