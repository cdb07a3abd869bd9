"""catalog.pipeline's configuration checks and type mapping (no Spark session, no ZooKeeper)."""

from __future__ import annotations

import stat
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.errors import BadInputError, ConfigurationError, ShardError
from catalog.pipeline import (
    SPARK_MASTER_ENV,
    SparkConfig,
    engine_for,
    java_version,
    parse_spark_conf,
    resolve_master,
    restore_table,
    spark_type,
)
from catalog.pipeline.spark.config import effective_settings, size_bytes, spark_defaults


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


def test_spark_conf_items_are_checked_and_name_the_bad_one() -> None:
    """KEY=VALUE items become settings; one without '=' or not a spark.* key is refused with
    exit 2, naming it."""
    assert parse_spark_conf(["spark.executor.memory=4g", "spark.a.b = x=y"]) == {
        "spark.executor.memory": "4g",
        "spark.a.b": "x=y",
    }
    for bad in ("spark.executor.memory", "executor.memory=4g", "=4g"):
        with pytest.raises(BadInputError) as info:
            parse_spark_conf([bad])
        assert info.value.exit_code == 2 and repr(bad) in info.value.message


def test_spark_defaults_and_user_settings_win_over_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark-defaults.conf (key value or key=value, # comments) is read from $SPARK_CONF_DIR;
    a key set there or by --spark-conf is never set by us; the user's setting is passed."""
    (tmp_path / "spark-defaults.conf").write_text(
        "# cluster defaults\nspark.driver.memory   8g\nspark.ui.enabled=true\n\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    defaults = spark_defaults()
    assert defaults == {"spark.driver.memory": "8g", "spark.ui.enabled": "true"}
    ours = {"spark.driver.memory": "1g", "spark.ui.enabled": "false", "spark.a": "ours"}
    user = {"spark.a": "user", "spark.b": "user"}
    assert effective_settings(ours, defaults, user) == {"spark.a": "user", "spark.b": "user"}
    (tmp_path / "spark-defaults.conf").write_text("justakey\n")
    with pytest.raises(ConfigurationError, match=r"spark-defaults\.conf:1"):
        spark_defaults()


def test_a_local_blob_path_with_a_cluster_master_is_refused_unless_shared() -> None:
    """Executors elsewhere cannot see a local path: exit 2 naming --blob-shared; a local
    master, a shared path or an object store pass."""
    cluster = SparkConfig.of("spark://cluster:7077")
    with pytest.raises(ConfigurationError) as info:
        cluster.check_blob("/data/blob", True)
    assert info.value.exit_code == 2 and "--blob-shared" in info.value.message
    cluster.check_blob("s3://bucket/blob", False)
    SparkConfig.of("spark://cluster:7077", blob_shared=True).check_blob("/data/blob", True)
    SparkConfig.of("local[2]").check_blob("/data/blob", True)
    with pytest.raises(ConfigurationError):  # the master of an injected session counts
        SparkConfig.of("local[2]").check_blob("/data/blob", True, "spark://other:7077")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1m", 1 << 20), ("512k", 512 << 10), ("4g", 4 << 30), ("1024", 1024), ("2GB", 2 << 30)],
)
def test_spark_sizes_are_read_as_spark_reads_them(text: str, expected: int) -> None:
    assert size_bytes(text) == expected


def test_a_size_that_is_not_one_is_named() -> None:
    with pytest.raises(BadInputError, match="'lots' is not a Spark size"):
        size_bytes("lots")


def test_compaction_partitions_follow_input_bytes_but_keep_every_core_busy() -> None:
    from catalog.pipeline.spark.compaction import partitions_for

    mib = 1 << 20
    assert partitions_for(0, 8) == 1
    assert partitions_for(10 * mib, 8) == 1  # too small to spread
    assert partitions_for(150 * mib, 2) == 2  # one file would leave a core idle
    assert partitions_for(150 * mib, 64) == 10  # at least 16 MiB of input each
    assert partitions_for(4000 * mib, 2) == 21  # files of about 192 MiB


def test_a_spark_without_s3a_is_one_line_naming_hadoop_aws() -> None:
    """What Spark's analysis raises when it has no S3A file system becomes exit 2 naming
    hadoop-aws and --engine arrow (the message of pyspark 4's Py4J error, first lines)."""
    from catalog.errors import ConfigurationError
    from catalog.pipeline.spark.failures import raise_resource_error

    text = (
        "An error occurred while calling o47.parquet.\n: java.lang.RuntimeException: "
        "java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found"
    )
    with pytest.raises(ConfigurationError) as caught:
        raise_resource_error(RuntimeError(text))
    assert "hadoop-aws" in caught.value.message and "--engine arrow" in caught.value.message
    assert "\n" not in caught.value.message
