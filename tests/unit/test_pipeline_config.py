"""catalog.pipeline's configuration checks and type mapping (no Spark session, no ZooKeeper)."""

from __future__ import annotations

import stat
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.errors import BadInputError, ConfigurationError, ShardError
from catalog.pipeline import (
    SPARK_MASTER_ENV,
    engine_for,
    java_version,
    resolve_master,
    restore_table,
    spark_type,
)


def fake_java(home: Path, banner: str) -> None:
    """A JAVA_HOME whose bin/java prints ``banner`` on stderr, as ``java -version`` does."""
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)


def test_java_older_than_17_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Java 11 is refused with ConfigurationError (exit 2) carrying the version found."""
    fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError) as info:
        java_version()
    assert info.value.details["version"] == "11.0.2"
    assert info.value.exit_code == 2


def test_java_8_version_scheme_is_understood(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old ``1.8.0_x`` scheme reads as Java 8, and is refused."""
    fake_java(tmp_path, 'java version "1.8.0_202"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError):
        java_version()


def test_java_17_is_accepted_and_missing_java_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Java 17 passes; a JAVA_HOME without bin/java is a ConfigurationError."""
    fake_java(tmp_path / "ok", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "ok"))
    assert java_version() == "17.0.15"
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "empty"))
    with pytest.raises(ConfigurationError):
        java_version()


def test_master_comes_from_the_option_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--spark-master wins over $SPARK_MASTER, which wins over local[<cores>]."""
    monkeypatch.delenv(SPARK_MASTER_ENV, raising=False)
    assert resolve_master().startswith("local[")
    monkeypatch.setenv(SPARK_MASTER_ENV, "spark://cluster:7077")
    assert resolve_master() == "spark://cluster:7077"
    assert resolve_master("local[1]") == "local[1]"


def test_unknown_engine_is_bad_input() -> None:
    """An engine name other than arrow, spark, auto is refused before anything runs."""
    with pytest.raises(BadInputError):
        engine_for("duckdb")
    assert engine_for("arrow").name == "arrow"


def test_types_spark_cannot_read_are_refused_with_their_path() -> None:
    """Nanosecond timestamps (nested too) name the column path; unsigned ints widen."""
    nested = pa.struct([pa.field("at", pa.timestamp("ns"))])
    with pytest.raises(ShardError) as info:
        spark_type(nested, "event")
    assert info.value.details["reason"] == "spark-unsupported-type"
    assert info.value.details["path"] == "event.at"
    assert spark_type(pa.uint64()).simpleString() == "decimal(20,0)"
    assert spark_type(pa.uint32()).simpleString() == "bigint"


def test_restore_table_brings_back_exact_arrow_types() -> None:
    """Spark's Arrow output (widened, plain, nullable) is restored to the stored types."""
    target = pa.schema(
        [
            pa.field("n", pa.uint32()),
            pa.field("s", pa.large_string()),
            pa.field(
                "st",
                pa.struct([pa.field("x", pa.int64(), nullable=False)]),
            ),
            pa.field("xs", pa.large_list(pa.field("item", pa.uint8()))),
        ]
    )
    from_spark = pa.table(
        {
            "n": pa.array([1, None], pa.int64()),
            "s": pa.array(["a", None], pa.string()),
            "st": pa.array([{"x": 1}, None], pa.struct([pa.field("x", pa.int64())])),
            "xs": pa.array([[1, 2], None], pa.list_(pa.int16())),
        }
    )
    restored = restore_table(from_spark, target)
    assert restored.schema == target
    assert restored.to_pylist() == from_spark.to_pylist()
