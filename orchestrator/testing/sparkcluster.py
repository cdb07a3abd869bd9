"""A real Spark standalone cluster on loopback, run from the pyspark wheel's jars.

The wheel has no ``start-master.sh``; its jars hold the standalone daemons, so a master is
``java -cp 'pyspark/jars/*' org.apache.spark.deploy.master.Master`` and each worker
``...deploy.worker.Worker spark://HOST:PORT``, with ``SPARK_HOME`` pointing at the wheel so
that workers can launch executors. Every worker has its own work directory and web UI port;
readiness is the master's JSON page listing the workers ALIVE. With ``connect_port`` it also
runs a Spark Connect server on the cluster (``SparkSubmit`` of the wheel's
``SparkConnectServer``, bound to loopback), so that commands reuse one warm Spark application
(``--spark-remote sc://HOST:PORT``) instead of starting a session each. For tests and for users
(``catalog-upgrade spark-cluster``, ``make spark-cluster``); a real deployment runs Spark's own
scripts or a Kubernetes operator instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import attrs
import structlog

from catalog.errors import ConfigurationError
from orchestrator.testing.child import ChildProcess, ManagedServer
from orchestrator.testing.zkserver import (
    QUICK_JVM_OPTIONS,
    find_java,
    free_port,
    pyspark_jars_dir,
)

log = structlog.get_logger(__name__)

_MASTER = "org.apache.spark.deploy.master.Master"


_WORKER = "org.apache.spark.deploy.worker.Worker"


_SUBMIT = "org.apache.spark.deploy.SparkSubmit"


_CONNECT = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _scala_version() -> str:
    """The Scala binary version of the wheel's jars (``spark-core_2.13-...jar``)."""
    for jar in pyspark_jars_dir().glob("spark-core_*.jar"):
        return jar.name.split("_", 1)[1].split("-", 1)[0]
    return "2.13"


@attrs.define
class _Daemon:
    """A master or a worker: its command and the child process that runs it."""

    name: str
    command: list[str]
    child: ChildProcess

    @property
    def log_file(self) -> Path:
        return self.child.log_file


@attrs.define
class SparkStandaloneCluster(ManagedServer):
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on ``host``."""

    data_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    host: str = "127.0.0.1"
    port: int = attrs.field(factory=free_port)
    ui_port: int = attrs.field(factory=free_port)
    # A Spark Connect server on the cluster at this port (None: none).
    connect_port: int | None = None
    _daemons: list[_Daemon] = attrs.field(factory=list, init=False)

    @property
    def master_url(self) -> str:
        """What ``--spark-master`` takes: ``spark://HOST:PORT``."""
        return f"spark://{self.host}:{self.port}"

    @property
    def remote_url(self) -> str | None:
        """What ``--spark-remote`` takes: ``sc://HOST:PORT`` (None without a Connect server)."""
        return None if self.connect_port is None else f"sc://{self.host}:{self.connect_port}"

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        classpath = str(pyspark_jars_dir() / "*")
        return [find_java(), f"-Xmx{heap}", *QUICK_JVM_OPTIONS, "-cp", classpath, main, *args]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(pyspark_jars_dir().parent)
        # What bin/load-spark-env.sh sets in a distribution: a worker's executor command
        # builder needs it (else "Cannot find any build directories").
        env.setdefault("SPARK_SCALA_VERSION", _scala_version())
        env.setdefault("SPARK_LOG_DIR", str(self.data_dir))
        return env

    def start(self, timeout: float = 120.0) -> SparkStandaloneCluster:
        """Start the master and the workers; return once every worker is ALIVE."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = self._env()
        ports = ["--port", str(self.port), "--webui-port", str(self.ui_port)]
        master_command = self._java(_MASTER, "--host", self.host, *ports)
        master = _Daemon("master", master_command, ChildProcess(self.data_dir / "master.log"))
        master.child.launch(master.command, env)
        self._daemons.append(master)
        for number in range(1, self.workers + 1):
            work = self.data_dir / f"worker{number}"
            work.mkdir(exist_ok=True)
            resources = ["--cores", str(self.cores), "--memory", self.memory]
            where = ["--webui-port", str(free_port()), "--work-dir", str(work)]
            command = self._java(_WORKER, "--host", self.host, *resources, *where, self.master_url)
            log_file = self.data_dir / f"worker{number}.log"
            worker = _Daemon(f"worker{number}", command, ChildProcess(log_file))
            worker.child.launch(worker.command, env)
            self._daemons.append(worker)
        try:
            self.wait_ready(timeout)
            if self.connect_port is not None:
                self.start_connect(self.connect_port, timeout)
        except BaseException:
            self.stop()
            raise
        log.info(
            "spark_cluster_started", master=self.master_url, workers=self.workers,
            remote=self.remote_url,
        )  # fmt: skip
        return self

    def start_connect(self, port: int, timeout: float = 120.0) -> str:
        """Start the Connect server (one Spark application on the cluster that clients share,
        with executors of 512m) on ``port``; its ``sc://`` URL once it listens."""
        self.connect_port = port
        env = self._env()
        env["PYSPARK_PYTHON"] = env.get("PYSPARK_PYTHON", sys.executable)
        conf = {
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.connect_port),
            "spark.ui.enabled": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.local.dir": str(self.data_dir / "connect"),
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": " ".join(QUICK_JVM_OPTIONS),
        }
        args = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
        command = self._java(
            _SUBMIT, "--master", self.master_url, "--class", _CONNECT, *args, "spark-internal",
            heap="1g",
        )  # fmt: skip
        daemon = _Daemon("connect server", command, ChildProcess(self.data_dir / "connect.log"))
        daemon.child.launch(daemon.command, env)
        self._daemons.append(daemon)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not daemon.child.running:
                raise ConfigurationError(
                    f"the Spark Connect server exited while starting: {daemon.child.tail(20)}",
                    log=str(daemon.log_file),
                )
            # An OSError of the connect (nothing listens yet) is suppressed: the body is skipped.
            with contextlib.suppress(OSError), socket.create_connection((self.host, port), 1):
                log.info("spark_connect_started", remote=self.remote_url)
                return str(self.remote_url)
            time.sleep(0.3)
        raise ConfigurationError(
            f"the Spark Connect server did not listen on {self.remote_url} within "
            f"{timeout:.0f} s: {daemon.child.tail(20)}",
            log=str(daemon.log_file),
        )

    def state(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, applications), or None while it does not answer."""
        url = f"http://{self.host}:{self.ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                data: dict[str, Any] = json.loads(answer.read())
                return data
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for daemon in self._daemons:
                if not daemon.child.running:
                    raise ConfigurationError(
                        f"Spark {daemon.name} exited while starting: {daemon.child.tail(20)}",
                        log=str(daemon.log_file),
                    )
            if self.alive_workers() >= self.workers:
                return
            time.sleep(0.3)
        raise ConfigurationError(
            f"Spark cluster at {self.master_url} had {self.alive_workers()} of {self.workers} "
            f"workers alive after {timeout:.0f} s: {self._daemons[0].child.tail(20)}",
            master=self.master_url,
        )

    def stop(self) -> None:
        """Workers first (so they do not try to reconnect), then the master."""
        for daemon in reversed(self._daemons):
            daemon.child.stop(15.0)
        self._daemons.clear()

    def terminate(self) -> None:
        """SIGTERM every daemon without waiting (safe inside a signal handler)."""
        for daemon in self._daemons:
            daemon.child.terminate()

    def wait(self) -> list[int]:
        """Block until every daemon exits; their exit codes."""
        return [d.child.wait() for d in list(self._daemons)]

