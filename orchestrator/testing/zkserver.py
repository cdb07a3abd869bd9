"""A real ZooKeeper server for development and tests, run from the jars that pyspark ships.

``pip install pyspark`` brings ``zookeeper-3.9.x.jar``, ``zookeeper-jute``, log4j and slf4j in
``pyspark/jars``: with Java 17 that is a complete standalone server, so a developer needs no extra
install. The server runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` with a generated
config file: loopback only, admin server off, every four-letter word whitelisted (kazoo's
``server_version()`` needs ``envi``; readiness uses ``srvr``), and a short ``tickTime`` so that
sessions as short as 1 s are allowed (failover benchmarks use 2 s sessions).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import structlog

from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until
from catalog.errors import ConfigurationError
from orchestrator.testing.child import ChildProcess, ManagedServer
from orchestrator.zookeeper.quorum import four_letter_word
from orchestrator.zookeeper.tls import ServerTls

if TYPE_CHECKING:
    from orchestrator.testing.netns import Namespace

log = structlog.get_logger(__name__)

_JAR_PREFIXES = ("zookeeper-", "log4j-", "slf4j-", "metrics-core-", "commons-io-", "snappy-java-")
_LOG4J2_CONFIG = """\
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1}} - %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
"""


def pyspark_jars_dir() -> Path:
    """The directory of jars shipped by the installed pyspark."""
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - pyspark is a hard dependency
        raise ConfigurationError(
            "pyspark is not installed; run `make demo` or `pip install -e .`"
        ) from exc
    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ConfigurationError(
            f"no ZooKeeper jar in {jars}; reinstall pyspark (>= 4.0 ships ZooKeeper)",
            path=str(jars),
        )
    return jars


def zookeeper_classpath(tls: bool = False) -> str:
    """Only the jars ZooKeeper needs (a full Spark classpath slows the JVM start); with
    ``tls`` also Netty's, for the Netty connection factory."""
    prefixes = (*_JAR_PREFIXES, "netty-") if tls else _JAR_PREFIXES
    jars = sorted(str(p) for p in pyspark_jars_dir().glob("*.jar") if p.name.startswith(prefixes))
    return os.pathsep.join(jars)


#: Options of the JVMs the harness starts for tests and the demo (servers, and through
#: ``SPARK_SUBMIT_OPTS`` the test processes' Spark drivers): the C1 compiler only and the
#: serial collector. A short-lived JVM spends most of its CPU in the C2 compiler's and the
#: parallel collector's threads; a local Spark start here takes 11 CPU-s with these, 20 without.
QUICK_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def find_java() -> str:
    """Path of the java executable: ``$JAVA_HOME/bin/java`` or ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ConfigurationError(
            "Java was not found: the embedded ZooKeeper needs Java 17+ "
            "(install a JDK/JRE, or set JAVA_HOME, or point CATALOG_UPGRADE_ZK at a running server)"
        )
    return found


#: How a server says the port it was given is bound already; and how often a start tries.
_PORT_TAKEN = re.compile(r"address already in use|port \d+ .*is not available", re.IGNORECASE)
_START_ATTEMPTS = 3


def port_taken(log_tail: str) -> bool:
    """Whether a server's log says the port it was to listen on is bound already."""
    return _PORT_TAKEN.search(log_tail) is not None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@attrs.define
class EmbeddedZooKeeper(ManagedServer):
    """A ZooKeeper server child process; a context manager.

    ``restart()`` keeps the port and data directory, so clients reconnect to the same state:
    scenario tests use it to rehearse a ZooKeeper restart.
    """

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    tick_time_ms: int = 500
    log_level: str = "WARN"
    # A member of an ensemble (orchestrator.testing.ensemble): its number and every member's
    # (client, quorum, election) ports, by number. Empty: a standalone server.
    myid: int = 0
    peers: tuple[tuple[int, int, int], ...] = ()
    # Each member's address, by number (empty: every member at ``host``).
    peer_hosts: tuple[str, ...] = ()
    # The network namespace it runs in (orchestrator.testing.netns), where a cut isolates it.
    netns: Namespace | None = None
    # Clients connect with TLS only (orchestrator.zookeeper.tls), on ``port``.
    tls: ServerTls | None = None
    # Extra JVM system properties, e.g. ``-Djute.maxbuffer=100000`` (tests of small limits).
    jvm_options: tuple[str, ...] = ()
    _child: ChildProcess = attrs.field(init=False)
    # The port was picked here (not given) and never served yet: a start that finds it taken
    # (picked, released, then bound by another process) may pick again.
    _may_repick: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        if self.port == 0:
            self.port = free_port(self.host)
            self._may_repick = not self.peers
        self._child = ChildProcess(self.data_dir / "zookeeper.out")

    @property
    def hosts(self) -> str:
        """The connection string kazoo takes (loopback for a server on every address)."""
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        return f"{host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def running(self) -> bool:
        return self._child.running

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for its memory, in benchmarks)."""
        return self._child.pid

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    *self._client_port_lines(),
                    "maxClientCnxns=0",
                    f"minSessionTimeout={2 * self.tick_time_ms}",
                    "maxSessionTimeout=120000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=*",
                    "autopurge.purgeInterval=1",
                    *self._quorum_lines(),
                    "",
                ]
            )
        )
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONFIG.format(log_file=self.log_file, level=self.log_level))
        return cfg

    def _client_port_lines(self) -> list[str]:
        if self.tls is None:
            return [f"clientPort={self.port}", f"clientPortAddress={self.host}"]
        secure = [f"secureClientPort={self.port}", f"secureClientPortAddress={self.host}"]
        return [*secure, *self.tls.config_lines()]

    def _quorum_lines(self) -> list[str]:
        if not self.peers:
            return []
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data" / "myid").write_text(f"{self.myid}\n")
        lines = ["initLimit=10", "syncLimit=5", "standaloneEnabled=false"]
        for number, (_client, quorum, election) in enumerate(self.peers, start=1):
            host = self.peer_hosts[number - 1] if self.peer_hosts else self.host
            lines.append(f"server.{number}={host}:{quorum}:{election}")
        return lines

    def start(self, timeout: float = 60.0) -> EmbeddedZooKeeper:
        """Start the server and return once it answers ``srvr``. A first start on a port
        picked here that another process bound meanwhile picks another (three tries)."""
        if self.running:
            return self
        for attempt in range(_START_ATTEMPTS):
            self.launch()
            try:
                self.wait_serving(timeout)
            except ConfigurationError:
                taken = port_taken(self.tail_log())
                if not (self._may_repick and taken) or attempt == _START_ATTEMPTS - 1:
                    raise
                log.warning("zookeeper_port_taken", port=self.port, attempt=attempt + 1)
                self.port = free_port(self.host)
                continue
            self._may_repick = False
            break
        return self

    def launch(self) -> None:
        """Start the server process without waiting for it to serve (an ensemble member
        serves only once a quorum of members runs)."""
        if self.running:
            return
        cfg = self._write_config()
        main = (
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            if self.peers
            else "org.apache.zookeeper.server.ZooKeeperServerMain"
        )
        command = [
            find_java(),
            "-Xms64m",
            "-Xmx256m",
            *QUICK_JVM_OPTIONS,
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            zookeeper_classpath(tls=self.tls is not None),
            main,
            str(cfg),
        ]
        if self.netns is not None:
            command = self.netns.command(command)
        self._child.launch(command)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Return once the server reports a mode (standalone, leader or follower)."""
        assert self._child.launched, "launch() first"

        def look(_watch: Watch) -> bool | NotYet:
            if not self._child.running:
                raise ConfigurationError(
                    f"ZooKeeper exited with code {self._child.returncode} while starting on "
                    f"{self.hosts}: {self.tail_log()}",
                    hosts=self.hosts,
                )
            # `ruok` answers imok before the server can serve; `srvr` reports a Mode only then.
            return True if "Mode:" in self.four_letter_word("srvr", timeout=0.5) else NOT_YET

        try:
            wait_until(look, timeout, safety=0.1)  # four-letter words: nothing to watch
        except WaitTimeout:
            self.stop()
            raise ConfigurationError(
                f"ZooKeeper did not answer on {self.hosts} within {timeout:.0f}s"
            ) from None
        log.info("zookeeper_started", hosts=self.hosts, data_dir=str(self.data_dir))

    def four_letter_word(self, word: str, timeout: float = 1.0) -> str:
        """A four-letter word to this server (over TLS when it serves TLS)."""
        context = self.tls.client_context() if self.tls else None
        return four_letter_word(self.host, self.port, word, timeout, context)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self._child.stop(timeout):
            log.info("zookeeper_stopped", hosts=self.hosts)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (its data stay for a restart)."""
        self._child.kill()

    def terminate(self) -> None:
        """Ask the server to stop without waiting (safe inside a signal handler, unlike stop())."""
        self._child.terminate()

    def restart(self) -> None:
        self.stop()
        self.start()

    def wait(self) -> int:
        """Block until the server process exits; its exit code."""
        return self._child.wait()

    def tail_log(self, lines: int = 40) -> str:
        """The last lines of the server's log and console output, for error reports."""
        out: list[str] = []
        for path in (self.data_dir / "zookeeper.out", self.log_file):
            if path.exists():
                out.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(out[-lines:])

