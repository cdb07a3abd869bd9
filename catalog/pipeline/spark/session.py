"""The Spark session: one per process, started lazily with checks of Java and PySpark."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog

from catalog.errors import (
    ConfigurationError,
)
from catalog.pipeline.spark.config import (
    effective_settings,
    is_local_master,
    is_remote,
    resolve_master,
    spark_defaults,
)
from catalog.pipeline.spark.progress import HEARTBEAT_INTERVAL

log = structlog.get_logger(__name__)


MIN_JAVA = 17


MIN_PYSPARK = (4, 0)


_LOG4J_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


# PySpark warns about pandas 3 on every Arrow UDF; we never hand Spark pandas objects.
PANDAS_WARNING = "PySpark does not yet fully support pandas"


_JAVA_VERSION_RE = re.compile(r'version "(?P<version>[^"]+)"')


def java_version() -> str:
    """The version of the Java Spark will start (``$JAVA_HOME/bin/java``, else ``java``).

    Raises ConfigurationError when there is none or it is older than :data:`MIN_JAVA`.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    fix = f"install Java {MIN_JAVA} or newer and put it on PATH (or set JAVA_HOME)"
    if java is None or not Path(java).exists():
        raise ConfigurationError(f"Spark needs Java, none was found: {fix}", suggestion=fix)
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigurationError(f"{java} -version failed: {exc}", java=java) from exc
    found = _JAVA_VERSION_RE.search(done.stderr + done.stdout)
    if found is None:
        raise ConfigurationError(f"cannot tell the version of {java}", java=java, suggestion=fix)
    version = found.group("version")
    parts = version.split(".")
    major = int(parts[1] if parts[0] == "1" and len(parts) > 1 else re.sub(r"\D.*", "", parts[0]))
    if major < MIN_JAVA:
        raise ConfigurationError(
            f"Spark needs Java {MIN_JAVA}+, {java} is {version}: {fix}",
            java=java,
            version=version,
            suggestion=fix,
        )
    return version


def pyspark_version() -> str:
    """The installed PySpark version; ConfigurationError when missing or older than 4.0."""
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigurationError(
            "the spark engine needs PySpark: pip install 'pyspark[sql]>=4.0'"
        ) from exc
    version = str(pyspark.__version__)
    numbers = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if numbers < MIN_PYSPARK:
        raise ConfigurationError(
            f"the spark engine needs PySpark 4.0+, found {version}",
            version=version,
            suggestion="pip install 'pyspark[sql]>=4.0'",
        )
    return version


@attrs.frozen
class StageProgress:
    """Tasks of the running Spark stages: what a progress bar shows for a Spark job."""

    stages: int
    tasks: int
    completed: int


@attrs.define
class SparkSessionProvider:
    """Starts the process's one SparkSession on first use and hands it out (thread-safe).

    Spark allows one SparkContext per process, so pass one provider around (or use
    :func:`spark_provider`, which caches one per configuration). ``conf`` (the user's
    ``--spark-conf``) and ``spark-defaults.conf`` win over this project's defaults: UI off,
    logs at ERROR through a log4j2 file written at start, Arrow transfer on, UTC session time
    zone, and on a local master a 1g driver and a shuffle of one partition per core.
    """

    master: str = attrs.field(factory=resolve_master)
    app_name: str = "catalog-upgrade"
    driver_memory: str = "1g"
    shuffle_partitions: int | None = None
    conf: Mapping[str, str] = attrs.field(factory=dict)
    _session: Any = attrs.field(default=None, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)
    _log_dir: Path | None = attrs.field(default=None, init=False, repr=False)

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> Any:
        """The SparkSession (``pyspark.sql.SparkSession``), started on first call."""
        with self._lock:
            if self._session is None:
                self._session = self._start()
            return self._session

    def _start(self) -> Any:
        if is_remote(self.master):
            return self._connect()
        java = java_version()
        version = pyspark_version()
        from pyspark.sql import SparkSession

        # Python workers must run this interpreter: it has pyarrow and the catalog package.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
        self._log_dir = Path(tempfile.mkdtemp(prefix="catalog-upgrade-spark-"))
        log4j = self._log_dir / "log4j2.properties"
        log4j.write_text(_LOG4J_PROPERTIES)
        ours = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            # Batches Spark's own writer stores (compaction): timestamps as Parquet's
            # TIMESTAMP_MICROS, not the legacy INT96 (readers restore either exactly).
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
            "spark.local.dir": str(self._log_dir),
            # Executors report the metrics of running tasks this often (default 10 s): a long
            # step's progress counts the rows its running tasks read
            # (catalog.pipeline.spark.progress).
            "spark.executor.heartbeatInterval": HEARTBEAT_INTERVAL,
        }
        if is_local_master(self.master):
            # One machine: a bounded driver, and one shuffle partition per core (AQE then
            # coalesces); a cluster keeps Spark's own sizing, set by the user if needed.
            ours["spark.driver.memory"] = self.driver_memory
            ours["spark.sql.shuffle.partitions"] = str(
                self.shuffle_partitions or max(2, os.cpu_count() or 2)
            )
        defaults = spark_defaults()
        settings = effective_settings(ours, defaults, self.conf)
        builder = SparkSession.builder.master(self.master).appName(self.app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        started = time.perf_counter()
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        if not is_local_master(self.master):
            # Executors elsewhere import the pipeline's worker functions from this package:
            # ship the driver's own copy, so both run the same code.
            session.sparkContext.addPyFile(str(self._ship_package()))
        actual = session.sparkContext.master
        if actual != self.master:
            raise ConfigurationError(
                f"this process already runs Spark on {actual}, not {self.master}: "
                "one SparkSession per process",
                master=self.master,
                running=actual,
            )
        log.info(
            "spark_started",
            master=self.master,
            user_settings=sorted(self.conf),
            spark_defaults=sorted(defaults),
            spark=version,
            java=java,
            seconds=round(time.perf_counter() - started, 2),
        )
        return session

    def _connect(self) -> Any:
        """A Spark Connect session to the server at ``master`` (``sc://HOST:PORT``): no local
        JVM, the server's application is warm. Runtime settings go with the session; the
        ``catalog`` package goes as an artifact, as ``addPyFile`` ships it to a cluster."""
        version = pyspark_version()
        try:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.remote(self.master)
        except ImportError as exc:
            raise ConfigurationError(
                "--spark-remote needs PySpark's Connect client: pip install 'pyspark[connect]'",
                suggestion="pip install 'pyspark[connect]'",
            ) from exc
        warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
        ours = {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        }
        for key, value in effective_settings(ours, {}, self.conf).items():
            builder = builder.config(key, value)
        started = time.perf_counter()
        try:
            session = builder.getOrCreate()
            session.range(1).count()  # the server answers (getOrCreate alone does not ask)
        except Exception as exc:  # gRPC errors have no common base worth naming
            raise ConfigurationError(
                f"Spark Connect server {self.master} did not answer: {exc}".splitlines()[0],
                remote=self.master,
            ) from exc
        self._log_dir = Path(tempfile.mkdtemp(prefix="catalog-upgrade-spark-"))
        session.addArtifacts(str(self._ship_package()), pyfile=True)
        log.info(
            "spark_connected",
            remote=self.master,
            user_settings=sorted(self.conf),
            spark=version,
            seconds=round(time.perf_counter() - started, 2),
        )
        return session

    def cancel(self) -> None:
        """Cancel every job this process runs (Ctrl-C of a long command)."""
        session = self._session
        if session is None:
            return
        if is_remote(self.master):
            session.interruptAll()
        else:
            session.sparkContext.cancelAllJobs()

    def _ship_package(self) -> Path:
        """A zip of the ``catalog`` package for ``addPyFile`` (in the session's temp dir)."""
        import catalog

        assert self._log_dir is not None
        package = Path(catalog.__file__).parent
        archive = shutil.make_archive(
            str(self._log_dir / "catalog-package"), "zip", package.parent, package.name
        )
        return Path(archive)

    def stop(self) -> None:
        """Stop the session (tests and benchmarks; a CLI process just exits)."""
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None
            if self._log_dir is not None:
                shutil.rmtree(self._log_dir, ignore_errors=True)
                self._log_dir = None

    def stage_progress(self) -> StageProgress | None:
        """Tasks of the active stages, or None when Spark is not running or idle."""
        session = self._session
        if session is None or is_remote(self.master):
            return None  # a Connect client sees no stages
        tracker = session.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        infos = [i for i in infos if i is not None]
        if not infos:
            return None
        return StageProgress(
            stages=len(infos),
            tasks=sum(i.numTasks for i in infos),
            completed=sum(i.numCompletedTasks for i in infos),
        )


@functools.cache
def _cached_provider(master: str, conf: tuple[tuple[str, str], ...]) -> SparkSessionProvider:
    return SparkSessionProvider(master=master, conf=dict(conf))


def spark_provider(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSessionProvider:
    """The process's provider for ``master`` (resolved by :func:`resolve_master`) and the
    user's ``conf``.

    Cached so that every caller of one process shares one session (Spark allows only one
    SparkContext per process anyway); the cache is the only process-wide state here.
    """
    return _cached_provider(resolve_master(master), tuple(sorted((conf or {}).items())))
