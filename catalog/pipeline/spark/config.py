"""Spark configuration the Spark way: ``--spark-conf KEY=VALUE``, ``spark-defaults.conf``, and
the checks that keep a cluster from writing where the driver cannot see.

Precedence, highest first: ``--spark-conf`` options, the ``spark-defaults.conf`` of
``$SPARK_CONF_DIR`` (else ``$SPARK_HOME/conf``), then this project's defaults (quiet logs, no
UI, UTC, Arrow transfer on; small shuffles on a local master). A key the user set anywhere is
never overridden.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from catalog.errors import BadInputError, ConfigurationError

#: The environment variable naming a Spark master (``--spark-master`` wins over it).
SPARK_MASTER_ENV: Final = "SPARK_MASTER"


def default_master() -> str:
    """``local[N]`` with N the machine's cores (what ``local[*]`` means, spelled out in logs)."""
    return f"local[{os.cpu_count() or 2}]"


def resolve_master(master: str | None = None) -> str:
    """``master``, else ``$SPARK_MASTER``, else :func:`default_master`."""
    return master or os.environ.get(SPARK_MASTER_ENV) or default_master()


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_bytes(value: str) -> int:
    """A Spark size (``512k``, ``1m``, ``4g``, ``1024``; ``kb``/``mb`` spellings too) in bytes."""
    found = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", value.lower())
    if found is None:
        raise BadInputError(f"{value!r} is not a Spark size (such as 512m or 4g)")
    return int(found.group(1)) * _SIZE_UNITS[found.group(2)]


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs every executor in this process (``local``, ``local[N]``...)."""
    return master == "local" or master.startswith("local[")


def is_remote(master: str) -> bool:
    """Whether ``master`` names a Spark Connect server (``sc://HOST:PORT``) rather than a
    master this process starts an application on."""
    return master.startswith("sc://")


def check_remote(remote: str) -> str:
    """``remote`` when it is an ``sc://HOST:PORT`` URL; BadInputError (exit 2) naming it."""
    host_port = remote.removeprefix("sc://").split("/", 1)[0]
    if not remote.startswith("sc://") or not re.fullmatch(r"[^:/]+(:\d+)?", host_port):
        raise BadInputError(
            f"--spark-remote {remote!r}: expected a Spark Connect URL sc://HOST:PORT",
            option="--spark-remote",
            value=remote,
        )
    return remote


def parse_spark_conf(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict; BadInputError (exit 2) naming the first malformed one."""
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not key.startswith("spark."):
            raise BadInputError(
                f"--spark-conf {item!r}: expected KEY=VALUE with a key starting with 'spark.' "
                "(e.g. --spark-conf spark.executor.memory=4g)",
                option="--spark-conf",
                value=item,
            )
        conf[key] = value.strip()
    return conf


def spark_conf_dir() -> Path | None:
    """The directory Spark reads ``spark-defaults.conf`` from, when one is configured."""
    if os.environ.get("SPARK_CONF_DIR"):
        return Path(os.environ["SPARK_CONF_DIR"])
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"]) / "conf"
    return None


# ``key value`` or ``key=value`` (Java properties as spark-submit reads them).
_DEFAULTS_LINE: Final = re.compile(r"([^\s=]+)\s*(?:=|\s)\s*(.*)$")


def spark_defaults(directory: Path | None = None) -> dict[str, str]:
    """The settings of ``spark-defaults.conf`` (``key value`` or ``key=value`` lines, ``#``
    comments), as spark-submit reads them; empty when there is no such file."""
    directory = spark_conf_dir() if directory is None else directory
    path = None if directory is None else directory / "spark-defaults.conf"
    if path is None or not path.is_file():
        return {}
    settings: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _DEFAULTS_LINE.match(line)
        if found is None:
            raise ConfigurationError(
                f"{path}:{number}: expected 'key value', found {raw!r}", path=str(path)
            )
        settings[found.group(1)] = found.group(2).strip()
    return settings


@attrs.frozen
class SparkConfig:
    """How this process runs Spark: the master, the user's settings, and whether a
    local-path blob store is shared with every executor."""

    master: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    blob_shared: bool = False

    @classmethod
    def of(
        cls,
        master: str | None = None,
        conf: Mapping[str, str] | Iterable[str] = (),
        *,
        blob_shared: bool = False,
        remote: str | None = None,
    ) -> SparkConfig:
        """From options: ``conf`` as a mapping or as ``KEY=VALUE`` items (checked); a Spark
        Connect ``remote`` (``sc://HOST:PORT``) takes the place of the master."""
        settings = dict(conf) if isinstance(conf, Mapping) else parse_spark_conf(conf)
        if remote:
            if master:
                raise BadInputError("give --spark-master or --spark-remote, not both")
            master = check_remote(remote)
        return cls(
            master=master,
            conf=tuple(sorted(settings.items())),
            blob_shared=blob_shared,
        )

    @property
    def resolved_master(self) -> str:
        return resolve_master(self.master)

    def check_blob(self, blob_uri: str, is_local_path: bool, master: str | None = None) -> None:
        """Refuse (ConfigurationError, exit 2) a local-path blob store with executors that may
        run elsewhere (``master``, default this config's): they would write to their own disks
        and the driver would commit files it cannot see. ``blob_shared`` (``--blob-shared``)
        declares the path mounted at the same place on every machine (NFS)."""
        where = master or self.resolved_master
        if is_local_path and not is_local_master(where) and not self.blob_shared:
            raise ConfigurationError(
                f"blob store {blob_uri} is a local path but Spark runs on {where}: executors on "
                "other machines cannot see it. Use a shared store (s3://, gs://, hdfs://) or, "
                "if the path is mounted on every machine, pass --blob-shared",
                blob=blob_uri,
                master=where,
                suggestion="--blob-shared",
            )


def effective_settings(
    ours: Mapping[str, str], defaults: Mapping[str, str], user: Mapping[str, str]
) -> dict[str, str]:
    """What the session is built with: ``ours`` only where neither ``spark-defaults.conf``
    nor the user set the key, then the user's settings (spark-defaults.conf Spark reads itself
    when the session starts, so it is left out here)."""
    settings = {k: v for k, v in ours.items() if k not in defaults and k not in user}
    settings.update(user)
    return settings
