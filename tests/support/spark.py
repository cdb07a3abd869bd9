"""The local Spark session every ``spark`` test shares: one per test session.

Spark starts in about 6 s and allows one SparkContext per process, so tests never start their
own: they take the session-scoped ``spark`` fixture (a :class:`SparkSessionProvider`, whose
``session()`` is the SparkSession) and hand it to ``SparkEngine``. The master is
``$SPARK_MASTER`` or ``local[<cores>]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from catalog.pipeline import SparkSessionProvider, resolve_master
from orchestrator.testing.zkserver import QUICK_JVM_OPTIONS

#: What a test's Spark application on the cluster gives its executors (short-lived JVMs too).
EXECUTOR_JAVA_OPTIONS = ("spark.executor.extraJavaOptions", " ".join(QUICK_JVM_OPTIONS))

# PySpark warns about pandas 3 on every Arrow UDF; the pipeline hands Spark no pandas objects.
PANDAS_WARNING = "ignore:PySpark does not yet fully support pandas:FutureWarning"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", PANDAS_WARNING)
    # Every Spark driver of the suite (this process's, and those of the sidecars and commands
    # it starts, which inherit the environment) is a short-lived JVM: start it cheaply.
    os.environ.setdefault("SPARK_SUBMIT_OPTS", " ".join(QUICK_JVM_OPTIONS))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSessionProvider]:
    """The test session's Spark (started on first use, stopped at the end)."""
    provider = SparkSessionProvider(master=resolve_master(), driver_memory="1g")
    provider.session()
    yield provider
    provider.stop()
