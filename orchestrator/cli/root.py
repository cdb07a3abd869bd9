"""The ``catalog-upgrade`` group, its error translation, the options ZooKeeper commands take."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from catalog.errors import CatalogError
from orchestrator.logs import configure_logging
from orchestrator.zookeeper import DEFAULT_ZK

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Translate CatalogError into its exit code and a one-line (or JSON) message on stderr
    (with ``--json``: its code, message, details and exit code, as ``/status`` gives a
    process's error: :func:`orchestrator.sidecar.refusals.process_error`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CatalogError as exc:
            ctx = click.get_current_context(silent=True)
            as_json = bool(ctx and ctx.params.get("as_json"))
            if as_json:  # the API's vocabulary: a kebab-case code, never a class name
                from orchestrator.sidecar.refusals import process_error

                click.echo(json.dumps(process_error(exc), indent=2), err=True)
            else:
                click.secho(f"error: {exc.message}", fg="red", err=True)
                rule = exc.details.get("rule")
                if rule:
                    click.echo(f"  rule: {rule}", err=True)
                suggestion = exc.details.get("suggestion")
                if suggestion:
                    click.echo(f"  fix: {suggestion}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


#: Each command and the module of this package that defines it. A command imports its module
#: when it runs, so ``promote`` or ``status`` imports neither the sidecar's server nor the
#: other modules' commands (``status`` still reads the catalog, whose schemas are Arrow's).
COMMAND_MODULES = {
    "compact": "data",
    "drift": "upgrade",
    "finalize": "upgrade",
    "fleet": "fleet",
    "history": "upgrade",
    "pause": "pacing",
    "plan": "releases",
    "promote": "upgrade",
    "read": "data",
    "resume": "pacing",
    "s3": "servers",
    "scenario": "scenarios",
    "secure": "upgrade",
    "sidecar": "servers",
    "spark-cluster": "servers",
    "status": "upgrade",
    "throttle": "pacing",
    "validate": "releases",
    "zookeeper": "servers",
}


class _Commands(click.Group):
    """The group whose commands register themselves when their module is imported: on first
    use (:data:`COMMAND_MODULES`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{module}")
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            show_variables(command)
        return command


def show_variables(command: click.Command) -> None:
    """``--help`` names the environment variable of each option that has one, in this
    command and the commands under it."""
    for param in command.params:
        if isinstance(param, click.Option) and param.envvar:
            param.show_envvar = True
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            show_variables(sub)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="catalog-upgrade", prog_name="catalog-upgrade")
@click.option(
    "--log-level", default="INFO", show_default=True, envvar="CATALOG_UPGRADE_LOG_LEVEL",
    show_envvar=True,
)
@click.option("--log-json/--no-log-json", default=None, help="JSON logs (default: when not a TTY).")
def main(log_level: str, log_json: bool | None) -> None:
    """Safe schema upgrades of builtin catalog collections during blue-green deployments."""
    configure_logging(log_level, json=log_json)


def _credential_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Check a credential source at once (exit 2 naming it) and make it this process's (and
    its children's): every ZooKeeper client reads it (orchestrator.zookeeper.clients.new_client)."""
    from catalog.errors import BadInputError
    from orchestrator.zookeeper.credentials import AUTH_ENV, READ_AUTH_ENV, read_credential

    if not value:
        return
    try:
        read_credential(value, f"--{param.name.replace('_', '-')}" if param.name else "")
    except BadInputError as exc:
        raise click.BadParameter(exc.message) from exc
    os.environ[AUTH_ENV if param.name == "zk_auth" else READ_AUTH_ENV] = value


def _export(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Make a TLS file option this process's (and its children's): every ZooKeeper client
    reads it and checks the files (orchestrator.zookeeper.tls, exit 2 naming a bad one)."""
    from orchestrator.zookeeper.tls import CA_ENV, CERT_ENV, KEY_ENV

    if value:
        names = {"zk_tls_ca": CA_ENV, "zk_tls_cert": CERT_ENV, "zk_tls_key": KEY_ENV}
        os.environ[names[str(param.name)]] = value


def _blob_endpoint(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Make --blob-endpoint this process's (and its children's): every blob store it opens
    reads it (catalog.blob.ENDPOINT_ENV)."""
    from catalog.blob import ENDPOINT_ENV

    if value:
        os.environ[ENDPOINT_ENV] = value


def zk_options(func: F) -> F:
    """The --zk and --env options every ZooKeeper-facing command takes, credentials and TLS,
    and where the environment's object store answers."""
    return zk_connection_options(
        click.option(
            "--env",
            "env",
            envvar="CATALOG_UPGRADE_ENV",
            default="default",
            show_default=True,
            help="Environment name (ZooKeeper root /catalog-upgrade/NAME).",
        )(func)
    )


def zk_connection_options(func: F) -> F:
    """--zk with its credentials and TLS (and the object store's endpoint): how to reach an
    ensemble, for every environment on it."""
    func = click.option(
        "--blob-endpoint",
        metavar="HOST:PORT|URL",
        envvar="CATALOG_UPGRADE_BLOB_ENDPOINT",
        expose_value=False,
        callback=_blob_endpoint,
        help="The S3 endpoint of an s3:// blob store (default: the URI's endpoint_override, "
        "else AWS). Credentials come from the AWS environment, never the URI.",
    )(func)
    for name, what in (
        ("key", "this client's private key"),
        ("cert", "this client's certificate"),
        ("ca", "the CA that signs the servers' certificates: connect over TLS"),
    ):
        func = click.option(
            f"--zk-tls-{name}",
            metavar="PEM",
            envvar=f"CATALOG_UPGRADE_ZK_TLS_{name.upper()}",
            expose_value=False,
            callback=_export,
            help=f"PEM file of {what}.",
        )(func)
    func = click.option(
        "--zk-read-auth",
        metavar="file:PATH|env:NAME",
        envvar="CATALOG_UPGRADE_ZK_READ_AUTH",
        expose_value=False,
        callback=_credential_option,
        help="The read-only credential a secured environment grants reads to (for status).",
    )(func)
    func = click.option(
        "--zk-auth",
        metavar="file:PATH|env:NAME",
        envvar="CATALOG_UPGRADE_ZK_AUTH",
        expose_value=False,
        callback=_credential_option,
        help="Digest credential USER:PASSWORD read from a file or an environment variable; "
        "a secured environment's nodes are created readable and writable by it only.",
    )(func)
    func = click.option(
        "--zk",
        "zk",
        envvar="CATALOG_UPGRADE_ZK",
        default=DEFAULT_ZK,
        show_default=True,
        help="ZooKeeper connection string.",
    )(func)
    return func
