"""Connecting to ZooKeeper for commands and sidecars, with errors that name the hosts.

``connect`` starts a kazoo client or raises :class:`~catalog.errors.ConnectionLostError` naming the
hosts it tried (never a bare kazoo timeout); ``consensus_for`` builds the environment's
:class:`~catalog.consensus.Consensus` without creating anything, so read-only commands (``status``)
leave an empty environment empty; ``open_consensus`` is the context manager the CLI uses (its
connect timeout comes from ``CATALOG_UPGRADE_CONNECT_TIMEOUT``, default 10 s).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.hosts import collect_hosts
from kazoo.retry import KazooRetry

from catalog.consensus import Consensus, env_root
from catalog.errors import BadInputError, ConnectionLostError
from orchestrator.failpoints import CrashFailpoint, LostAnswerFailpoint
from orchestrator.zookeeper.credentials import ZkAuth
from orchestrator.zookeeper.quorum import describe_quorum, probe_servers
from orchestrator.zookeeper.tls import ZkTls

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_SESSION_TIMEOUT = 10.0
CONNECT_TIMEOUT_VAR = "CATALOG_UPGRADE_CONNECT_TIMEOUT"


def default_connect_timeout() -> float:
    """Seconds commands wait for ZooKeeper: ``CATALOG_UPGRADE_CONNECT_TIMEOUT`` or 10."""
    raw = os.environ.get(CONNECT_TIMEOUT_VAR)
    if not raw:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise BadInputError(
            f"{CONNECT_TIMEOUT_VAR}={raw!r} is not a number of seconds", value=raw
        ) from None
    if value <= 0:
        raise BadInputError(f"{CONNECT_TIMEOUT_VAR} must be positive, not {raw}", value=raw)
    return value


def reconnect_retry(session_timeout: float) -> KazooRetry:
    """kazoo's reconnection policy for a session of ``session_timeout`` seconds: retry for ever,
    backing off to at most a quarter of the session timeout, so that after an outage (a lost
    quorum) the client is back well before the server expires a session it kept."""
    return KazooRetry(
        max_tries=-1, delay=0.1, backoff=2, max_jitter=0.1, max_delay=max(0.5, session_timeout / 4)
    )


def new_client(
    zk: str,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    auth: ZkAuth | None = None,
    tls: ZkTls | None = None,
) -> KazooClient:
    """An unstarted client for ``zk``; BadInputError (exit 2) for a malformed string.

    With credentials (``auth``, else ``CATALOG_UPGRADE_ZK_AUTH``:
    orchestrator.zookeeper.credentials) the client authenticates and creates every node with
    the secured environment's ACL; with TLS (``tls``, else ``CATALOG_UPGRADE_ZK_TLS_*``:
    orchestrator.zookeeper.tls) it connects over TLS.
    """
    if not zk or not zk.strip():
        raise BadInputError("empty ZooKeeper connection string: pass --zk HOST:PORT", zk=zk)
    check_hosts(zk)
    auth = ZkAuth.from_environment() if auth is None else auth
    secured: dict[str, Any] = {}
    if auth is not None:
        secured.update(auth_data=auth.auth_data(), default_acl=auth.acl())
    tls = ZkTls.from_environment() if tls is None else tls
    if tls is not None:
        secured.update(tls.kazoo_options())
    try:
        return KazooClient(
            hosts=zk,
            timeout=session_timeout,
            connection_retry=reconnect_retry(session_timeout),
            **secured,
        )
    except ValueError as exc:
        raise BadInputError(f"invalid ZooKeeper connection string {zk!r}: {exc}", zk=zk) from exc


#: A host name as DNS spells it (letters, digits, hyphens; underscores too, as container
#: names have them), label by label.
_HOST_NAME = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?$")


def check_hosts(zk: str) -> None:
    """BadInputError naming the part of ``zk`` that is no ``host[:port]``, before any attempt
    (kazoo would retry a name that cannot exist until the connect timeout)."""
    try:
        hosts, _chroot = collect_hosts(zk)
        # kazoo reads an explicit port 0 as no port (2181): the ports as written, parsed as it
        # parses them, so ``h:0`` is refused rather than quietly served by another port.
        written = [
            urlsplit(f"xxx://{part.strip()}").port for part in zk.partition("/")[0].split(",")
        ]
    except ValueError as exc:
        raise BadInputError(f"invalid ZooKeeper connection string {zk!r}: {exc}", zk=zk) from exc
    for (host, port), as_written in zip(hosts, written, strict=True):
        port = port if as_written is None else as_written
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOST_NAME.match(host):
                raise BadInputError(
                    f"invalid ZooKeeper connection string {zk!r}: {host!r} is no host name or "
                    "address (write HOST:PORT[,HOST:PORT...][/CHROOT])",
                    zk=zk,
                    host=host,
                ) from None
        if not 0 < port < 65536:
            raise BadInputError(
                f"invalid ZooKeeper connection string {zk!r}: port {port} of {host} is out of "
                "range (1-65535)",
                zk=zk,
                port=port,
            )


def connect(
    zk: str,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
) -> KazooClient:
    """A started KazooClient for ``zk`` (``host:port[,host:port...]``).

    Raises ConnectionLostError (exit 1) naming the hosts when no server answers within
    ``timeout`` seconds, and BadInputError (exit 2) for a malformed connection string. The caller
    owns the client: ``close(client)`` when done.
    """
    client = new_client(zk, session_timeout=session_timeout)
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, OSError) as exc:
        close(client)
        over = " over TLS (is --zk-tls-ca the CA that signed its certificate?)"
        servers = why_unreachable(zk)
        hint = f": {servers}" if servers else ""
        if "serving" not in servers:  # nothing runs there at all
            hint += " (is it running? start one with `catalog-upgrade zookeeper`)"
        raise ConnectionLostError(
            f"ZooKeeper at {zk} did not answer within {timeout:g} s"
            f"{over if client.use_ssl else ''}{hint}",
            zk=zk,
            timeout=timeout,
            servers=servers,
        ) from exc
    return client


def why_unreachable(zk: str, timeout: float = 1.0) -> str:
    """What each server of ``zk`` says about itself (orchestrator.zookeeper.quorum): "no
    quorum: 1 of 3 server(s) running, none serving (...)"; '' when the string names no server."""
    tls = ZkTls.from_environment()
    probes = probe_servers(zk, timeout=timeout, context=tls.context() if tls else None)
    return describe_quorum(probes)


def close(client: KazooClient) -> None:
    """Stop and close ``client``; ephemeral nodes of its session go at once, not at expiry."""
    with contextlib.suppress(Exception):  # closing is best effort: the session expires anyway
        client.stop()
    with contextlib.suppress(Exception):
        client.close()


def consensus_for(client: KazooClient, env: str) -> Consensus:
    """The store of environment ``env`` (validates the name; creates nothing), with this
    process's crash failpoint, if its environment sets one."""
    return Consensus(
        client=client,
        root=env_root(env),
        before_fenced_write=CrashFailpoint.from_environment(),
        after_fenced_write=LostAnswerFailpoint.from_environment(),
    )


@contextlib.contextmanager
def open_consensus(
    zk: str,
    env: str,
    timeout: float | None = None,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
) -> Iterator[Consensus]:
    """Connect, yield the environment's Consensus, and close the client afterwards.

    ``timeout`` defaults to :func:`default_connect_timeout`.
    """
    root = env_root(env)  # a bad --env is refused before any connection attempt
    if timeout is None:
        timeout = default_connect_timeout()
    client = connect(zk, timeout, session_timeout=session_timeout)
    try:
        yield Consensus(
            client=client, root=root, before_fenced_write=CrashFailpoint.from_environment()
        )
    finally:
        close(client)
