"""The options the data commands (and the sidecar's Spark settings and HTTP limits) share, parsed
once."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, cast

import attrs
import click

from catalog.errors import BadInputError
from orchestrator.cli.root import F, zk_options
from orchestrator.durations import parse_duration


class Duration(click.ParamType):
    """A span of time: ``90s``, ``30m``, ``24h``, ``7d`` or plain seconds; as seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_duration(value, "the option")
        except BadInputError as exc:
            self.fail(exc.message.removeprefix("the option: "), param, ctx)


class Window(Duration):
    """A reversible window: a duration, ``0`` (at once) or ``never``; seconds or None."""

    name = "window"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip().lower()
        if value is None or text == "never":
            return None
        if text.rstrip("smhd") in ("0", "0.0"):
            return 0.0
        return super().convert(value, param, ctx)


def upgrade_window_options(func: F) -> F:
    """--finalize-after, --rollback-from and --discard-writes-to: how long an upgrade stays
    reversible, and what a rollback carries back or drops (orchestrator.migrate.rollback)."""
    func = click.option(
        "--discard-writes-to",
        "discard_writes_to",
        multiple=True,
        metavar="COLLECTION",
        help="A rollback may drop the rows the pending upgrade wrote to this collection, which "
        "its release cannot carry back (repeatable; recorded in the history).",
    )(func)
    func = click.option(
        "--rollback-from",
        "rollback_from_ref",
        default=None,
        metavar="RELEASE",
        help="A rollback: the pending upgrade's release (FILE.py[:ATTR]), whose inverse "
        "transforms carry the rows it wrote to replaced collections back.",
    )(func)
    func = click.option(
        "--finalize-after",
        type=Window(),
        default="24h",
        show_default=True,
        help="As leader, finalize an upgrade this long after its switch (0: at once; never: "
        "only `finalize`). Until then the release it came from may be promoted back.",
    )(func)
    return func


def spark_options(func: F) -> F:
    """--spark-master, --spark-conf and --blob-shared: how a command runs Spark, if it does."""
    func = click.option(
        "--blob-shared",
        is_flag=True,
        help="The local blob path is mounted at the same place on every Spark machine "
        "(without it, a local path with a cluster master is refused).",
    )(func)
    func = click.option(
        "--spark-conf",
        "spark_conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="A Spark setting (repeatable); wins over spark-defaults.conf and our defaults.",
    )(func)
    func = click.option(
        "--spark-remote",
        envvar="SPARK_REMOTE",
        default=None,
        metavar="sc://HOST:PORT",
        help="A Spark Connect server to run on (a warm application: no session start per "
        "command); instead of --spark-master.",
    )(func)
    func = click.option(
        "--spark-master",
        envvar="SPARK_MASTER",
        default=None,
        help="Spark master, e.g. spark://HOST:7077 (default: local[N], N the machine's cores).",
    )(func)
    return func


def http_limit_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--http-max-body, --http-max-append-rows, --http-workers, --http-max-connections and the
    three --http-*-timeout: the sidecar's HTTP server limits (a ``ServerLimits``, which the
    command builds from the seven parameters)."""
    from orchestrator.http.exchange import ServerLimits

    defaults = ServerLimits()

    seconds: dict[str, Any] = {
        "type": click.FloatRange(min=0.1),
        "show_default": True,
        "metavar": "SECONDS",
    }
    options = [
        click.option(
            "--http-max-body", type=click.IntRange(min=1), default=defaults.max_body,
            show_default=True, metavar="BYTES",
            help="The largest request body read (chunked or not): 413 past it.",
        ),
        click.option(
            "--http-max-append-rows", type=click.IntRange(min=1),
            default=defaults.max_append_rows, show_default=True, metavar="ROWS",
            help="The most rows one POST /append may carry, NDJSON or Arrow: 413 past it.",
        ),
        click.option(
            "--http-workers", type=click.IntRange(min=1), default=defaults.workers,
            show_default=True, help="Threads running requests; slow clients never hold one.",
        ),
        click.option(
            "--http-max-connections", type=click.IntRange(min=1),
            default=defaults.max_connections, show_default=True,
            help="Open connections; one more is answered 503 and closed.",
        ),
        click.option(
            "--http-header-timeout", default=defaults.header_timeout, **seconds,
            help="From a request's first byte to the end of its headers (408 past it).",
        ),
        click.option(
            "--http-body-timeout", default=defaults.body_timeout, **seconds,
            help="From the end of the headers to the end of the body (408 past it).",
        ),
        click.option(
            "--http-idle-timeout", default=defaults.idle_timeout, **seconds,
            help="A connection sending no request this long is closed.",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def spark_config(
    master: str | None, conf: tuple[str, ...], blob_shared: bool, remote: str | None = None
) -> Any:
    """The options of :func:`spark_options` as a checked ``SparkConfig`` (exit 2 if bad)."""
    from catalog.pipeline import SparkConfig

    return SparkConfig.of(master, conf, blob_shared=blob_shared, remote=remote)


@attrs.frozen
class DataOptions:
    """The options every data command takes (where the data is, which engine reads it), as
    one value: :func:`data_options` builds it from the command line."""

    zk: str
    env: str
    engine: str
    blob_uri: str | None
    spark_master: str | None
    spark_remote: str | None
    spark_conf: tuple[str, ...]
    blob_shared: bool

    def spark(self) -> Any:
        """The checked ``SparkConfig`` (BadInputError, exit 2, if a setting is bad)."""
        return spark_config(self.spark_master, self.spark_conf, self.blob_shared, self.spark_remote)


def data_options(func: F) -> F:
    """--zk/--env (and credentials), --engine, the Spark options and --blob, passed to the
    command as one ``data: DataOptions``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        zk: str,
        env: str,
        engine: str,
        blob_uri: str | None,
        spark_master: str | None,
        spark_remote: str | None,
        spark_conf: tuple[str, ...],
        blob_shared: bool,
        **kwargs: Any,
    ) -> Any:
        data = DataOptions(
            zk, env, engine, blob_uri, spark_master, spark_remote, spark_conf, blob_shared
        )
        return func(*args, data=data, **kwargs)

    return engine_options(zk_options(cast(F, wrapper)))


def engine_options(func: F) -> F:
    """The --engine, Spark and --blob options of the data commands."""
    func = click.option(
        "--blob",
        "blob_uri",
        default=None,
        help="Blob URI; must match the one the environment recorded (default: that one).",
    )(func)
    func = spark_options(func)
    func = click.option(
        "--engine",
        type=click.Choice(["arrow", "spark", "auto"]),
        default="auto",
        show_default=True,
        help="arrow: in process; spark: PySpark; auto: by the shard's estimated size.",
    )(func)
    return func


def http_access_options(func: F) -> F:
    """Tokens, allowed hosts, public metrics, TLS: who may ask a server what. A command names
    the seven parameters and builds its
    :class:`~orchestrator.http.authorization.HttpAccess` from them, in this order."""
    for option in reversed(_HTTP_ACCESS_OPTIONS):
        func = option(func)
    return func


_HTTP_ACCESS_OPTIONS: Final = (
    click.option(
        "--http-token-file",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="CATALOG_UPGRADE_HTTP_TOKEN_FILE",
        help="File holding the bearer token POST /promote, POST /finalize and POST /append "
        "require (and reads accept); re-read when it changes.",
    ),
    click.option(
        "--http-read-token-file",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="CATALOG_UPGRADE_HTTP_READ_TOKEN_FILE",
        help="File holding a bearer token for /status, /history, /read and /metrics only.",
    ),
    click.option(
        "--http-allowed-host",
        "http_allowed_hosts",
        multiple=True,
        metavar="NAME",
        help="A Host name to answer besides loopback and the listen address (repeatable; * any).",
    ),
    click.option(
        "--metrics-public", is_flag=True, help="Serve /metrics without a token (for a scraper)."
    ),
    click.option(
        "--http-insecure",
        is_flag=True,
        help="Allow listening beyond loopback without a token (anyone reaching it may write).",
    ),
    click.option(
        "--http-tls-cert",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="CATALOG_UPGRADE_HTTP_TLS_CERT",
        help="PEM certificate: serve HTTPS (with --http-tls-key).",
    ),
    click.option(
        "--http-tls-key",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="CATALOG_UPGRADE_HTTP_TLS_KEY",
        help="PEM private key of --http-tls-cert.",
    ),
)
