"""Spark failures as errors a user can act on: one line, naming the setting to change."""

from __future__ import annotations

from catalog.errors import ConfigurationError, ShardError


class SparkJobError(ShardError):
    """A Spark job failed for a reason of its own (not a worker's ShardError): one line."""

    @classmethod
    def of(cls, exc: BaseException, job: str) -> SparkJobError:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        # A Py4J error reads "An error occurred while calling X.\n: java...Exception: why".
        cause = [line[2:] for line in lines if line.startswith(": ")]
        first = (cause or lines or [type(exc).__name__])[0]
        return cls(
            f"the Spark job ({job}) failed: {first.strip()[:300]}",
            reason="spark-job-failed",
            job=job,
        )


def raise_resource_error(exc: BaseException) -> None:
    """Re-raise a Spark failure a setting explains as an error line naming the setting."""
    text = str(exc)
    if "S3AFileSystem" in text or 'No FileSystem for scheme "s3' in text:
        raise ConfigurationError(
            "Spark cannot open an s3:// blob store: this Spark has no Hadoop S3A file system "
            "(org.apache.hadoop.fs.s3a.S3AFileSystem, from the hadoop-aws jars, which the "
            "pyspark wheel lacks). Add hadoop-aws and its AWS SDK bundle to the cluster "
            "(--spark-conf spark.jars.packages=org.apache.hadoop:hadoop-aws:VERSION, VERSION "
            "that of its Hadoop), or use --engine arrow",
            missing="org.apache.hadoop.fs.s3a.S3AFileSystem",
            suggestion="--engine arrow",
        ) from exc
    if "maxResultSize" in text:
        raise ConfigurationError(
            "the result Spark sends to this process is larger than spark.driver.maxResultSize: "
            "raise it (--spark-conf spark.driver.maxResultSize=4g, 0 for no limit), and "
            "spark.driver.memory with it, or read fewer rows (--limit)",
            setting="spark.driver.maxResultSize",
            suggestion="--spark-conf spark.driver.maxResultSize=4g",
        ) from exc
    if "ExecutorLostFailure" in text or "OutOfMemoryError" in text:
        raise ConfigurationError(
            "a Spark executor was lost (out of memory or killed): give executors more memory "
            "(--spark-conf spark.executor.memory=4g) or more partitions "
            "(--spark-conf spark.sql.shuffle.partitions=N), and see the workers' logs",
            setting="spark.executor.memory",
            suggestion="--spark-conf spark.executor.memory=4g",
        ) from exc


def spark_errors() -> tuple[type[Exception], ...]:
    """The exceptions a failed Spark job raises in the driver."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JJavaError)
