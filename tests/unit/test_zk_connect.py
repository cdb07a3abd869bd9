"""orchestrator.zookeeper.clients: connection errors name the hosts and map onto the
documented exit codes."""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from catalog.consensus import env_root
from catalog.errors import EXIT_BAD_INPUT, EXIT_UNEXPECTED, BadInputError, ConnectionLostError
from orchestrator.cli import main
from orchestrator.zookeeper.clients import close, connect, new_client, open_consensus


def closed_port() -> str:
    """A loopback address nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_unreachable_zookeeper_names_the_hosts() -> None:
    """No server answering: ConnectionLostError carrying the connection string."""
    hosts = closed_port()
    with pytest.raises(ConnectionLostError) as info:
        connect(hosts, timeout=0.5)
    assert info.value.details["zk"] == hosts


def test_malformed_connection_string_is_bad_input() -> None:
    """A connection string kazoo cannot parse is refused before any attempt (exit 2)."""
    with pytest.raises(BadInputError):
        connect("host:port:extra", timeout=0.5)
    with pytest.raises(BadInputError):
        connect("", timeout=0.5)


@pytest.mark.parametrize(
    "zk", ["bad host!!", "zk1:2181,-zk2:2181", "a..b:2181", "h:70000", "h:0", "a:2181,b:0/x"]
)
@pytest.mark.quiet
def test_a_host_that_cannot_exist_is_refused_at_once_naming_it(zk: str) -> None:
    """A host that is no name or address (kazoo would retry it until the connect timeout) is
    bad input: exit 2 at once, naming the connection string, nothing tried."""
    started = time.monotonic()
    result = CliRunner().invoke(
        main, ["--log-level", "CRITICAL", "status", "--zk", zk, "--env", "x"],
        env={"CATALOG_UPGRADE_CONNECT_TIMEOUT": "30"},
    )  # fmt: skip
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert f"invalid ZooKeeper connection string {zk!r}" in result.stderr
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "zk", ["zk1:2181,zk2:2181/chroot", "[::1]:2181", "zoo_1.local:2181", "10.0.0.1,zk.example."]
)
def test_host_names_and_addresses_as_operators_write_them_are_accepted(zk: str) -> None:
    """Names with dots, underscores (container names) and a trailing dot, IPv6 in brackets,
    several servers and a chroot pass the check (the client is only built, not started)."""
    close(new_client(zk))


@pytest.mark.parametrize(
    "env", ["a/b", "", "..", "a\tb", "line\nbreak", "a\x00", "a\x85", "\U0001f680"]
)
def test_bad_environment_name_is_refused_before_connecting(env: str) -> None:
    """An invalid --env (a ``/``, or a character ZooKeeper refuses in a path) fails as bad input
    naming it, without waiting for ZooKeeper."""
    refused = pytest.raises(BadInputError, match="invalid environment name")
    with refused, open_consensus(closed_port(), env, timeout=30):
        pass


def test_environment_names_zookeeper_takes_are_accepted() -> None:
    """Spaces, dots and letters beyond ASCII are a znode's name like any other."""
    for env in ["prod east", "eu.west-1", "prüfung", "生产"]:
        assert env_root(env).endswith("/" + env)


def test_status_command_without_zookeeper_exits_1() -> None:
    """status against an unreachable ZooKeeper exits 1 with a message naming the hosts."""
    hosts = closed_port()
    result = CliRunner().invoke(
        main,
        ["--log-level", "CRITICAL", "status", "--zk", hosts, "--env", "x"],
        env={"CATALOG_UPGRADE_CONNECT_TIMEOUT": "0.5"},
    )
    assert result.exit_code == EXIT_UNEXPECTED
    assert hosts in result.stderr


def test_promote_command_with_bad_env_exits_2() -> None:
    """promote with an invalid environment name exits 2."""
    result = CliRunner().invoke(
        main, ["promote", "--deploy-generation", "1", "--zk", closed_port(), "--env", ".."]
    )
    assert result.exit_code == EXIT_BAD_INPUT
