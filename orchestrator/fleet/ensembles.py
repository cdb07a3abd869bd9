"""The ensembles a fleet lives on, from a fleet file (TOML) or one ``--zk``.

A fleet file names each ZooKeeper ensemble, how to reach it and with which credentials; the
thresholds of what counts as stuck or overdue may be set there too (orchestrator.fleet.rules)::

    [thresholds]                 # optional; these are the defaults
    unpromoted_after = "6h"      # a green generation waiting longer is stuck
    finalize_overdue = "25h"     # a pending upgrade older than this is overdue
    stuck_factor = 3             # a phase past 3 times its history is stuck

    [[ensemble]]
    name = "eu-1"                        # shown in every row; unique
    zk = "zk1:2181,zk2:2181,zk3:2181"
    read_auth = "file:/etc/cu/eu-1.read" # digest credential for reads (file:PATH or env:NAME)
    auth = "file:/etc/cu/eu-1.auth"      # the owner's, for `fleet finalize`
    tls_ca = "/etc/cu/zk-ca.pem"         # TLS: the servers' CA (and tls_cert, tls_key)

A credential is never written in the file itself, only where to read it. A key the file does not
know, a missing ``zk`` or a repeated name is refused (exit 2) naming it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
from kazoo.client import KazooClient

from catalog.errors import BadInputError
from orchestrator.fleet.rules import Thresholds
from orchestrator.zookeeper.clients import DEFAULT_SESSION_TIMEOUT, check_hosts, new_client
from orchestrator.zookeeper.credentials import ZkAuth, read_credential
from orchestrator.zookeeper.tls import ZkTls

_ENSEMBLE_KEYS: Final = frozenset(
    {"name", "zk", "auth", "read_auth", "tls_ca", "tls_cert", "tls_key"}
)


@attrs.frozen
class Ensemble:
    """One ZooKeeper ensemble of the fleet; credentials are sources (``file:``/``env:``)."""

    name: str
    zk: str
    auth: str | None = None
    read_auth: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def client(self, *, write: bool = False) -> KazooClient:
        """An unstarted client; with ``write``, authenticated as the owner (``auth``), else as
        the reader when one is named. With no credential in the file, the command line's
        (``--zk-auth``) apply."""
        source = self.auth if write or not self.read_auth else self.read_auth
        auth = None
        if source:
            option = f"ensemble {self.name}: {'auth' if source == self.auth else 'read_auth'}"
            auth = ZkAuth(read_credential(source, option))
        tls = ZkTls.of(self.tls_ca, self.tls_cert, self.tls_key)
        return new_client(self.zk, session_timeout=DEFAULT_SESSION_TIMEOUT, auth=auth, tls=tls)


@attrs.frozen
class FleetFile:
    """The ensembles to survey and the thresholds to judge them by."""

    ensembles: tuple[Ensemble, ...]
    thresholds: Thresholds = attrs.field(factory=Thresholds)

    @classmethod
    def single(cls, zk: str) -> FleetFile:
        """One ensemble, ``--zk``, named after its first server."""
        return cls((Ensemble(name=zk.split(",")[0].strip(), zk=zk),))

    @classmethod
    def load(cls, path: Path) -> FleetFile:
        """The file at ``path``; BadInputError (exit 2) naming what is wrong in it."""
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise BadInputError(
                f"cannot read fleet file {path}: {exc.strerror or exc}", path=str(path)
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise BadInputError(f"fleet file {path} is not TOML: {exc}", path=str(path)) from exc
        return cls.of(data, str(path))

    @classmethod
    def of(cls, data: Mapping[str, Any], origin: str = "fleet file") -> FleetFile:
        unknown = sorted(set(data) - {"ensemble", "thresholds"})
        if unknown:
            raise BadInputError(
                f"{origin}: unknown key {unknown[0]!r} (it takes [thresholds] and [[ensemble]])",
                key=unknown[0],
            )
        raw = data.get("ensemble")
        if not isinstance(raw, list) or not raw:
            raise BadInputError(f"{origin}: no [[ensemble]] table", path=origin)
        ensembles = tuple(_ensemble(item, i, origin) for i, item in enumerate(raw))
        names = [e.name for e in ensembles]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise BadInputError(
                f"{origin}: ensemble {repeated[0]!r} is named twice", name=repeated[0]
            )
        thresholds = data.get("thresholds", {})
        if not isinstance(thresholds, Mapping):
            raise BadInputError(f"{origin}: [thresholds] must be a table", path=origin)
        return cls(ensembles, Thresholds.of(thresholds, f"{origin} [thresholds]"))


def _ensemble(item: Any, index: int, origin: str) -> Ensemble:
    where = f"{origin}: ensemble {index + 1}"
    if not isinstance(item, Mapping):
        raise BadInputError(f"{where} is not a table", path=origin)
    unknown = sorted(set(item) - _ENSEMBLE_KEYS)
    if unknown:
        raise BadInputError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_ENSEMBLE_KEYS))})",
            key=unknown[0],
        )
    for key, value in item.items():
        if not isinstance(value, str) or not value.strip():
            raise BadInputError(f"{where}: {key} must be a non-empty string", key=key)
    if "zk" not in item:
        raise BadInputError(f"{where}: no zk (the ensemble's HOST:PORT list)", key="zk")
    zk = item["zk"]
    try:
        check_hosts(zk)
    except BadInputError as exc:
        raise BadInputError(f"{where}: {exc.message}", key="zk", zk=zk) from None
    return Ensemble(
        name=item.get("name", zk.split(",")[0]), **{k: v for k, v in item.items() if k != "name"}
    )
