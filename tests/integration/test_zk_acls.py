"""A secured environment on a real ZooKeeper: digest credentials and ACLs
(orchestrator.zookeeper.credentials).

A sidecar started with ``--zk-auth`` creates every node readable and writable by its
credential only (plus reads for ``--zk-read-auth``): a plain client can neither read nor write
any of them; ``status`` works with the read-only credential; a write with it, or any command
without credentials, exits 2 naming ``--zk-auth`` and writes nothing; ``catalog-upgrade
secure`` locks an environment created without credentials.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from catalog.consensus import env_root
from orchestrator.zookeeper.clients import close, connect, new_client
from orchestrator.zookeeper.credentials import Credential, ZkAuth
from support.sidecars import SidecarProcess, cli, sidecars
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

OWNER = Credential("catalog-upgrade", "s3cret-owner")
READER = Credential("status-reader", "s3cret-reader")


@pytest.fixture
def creds(tmp_path: Path) -> dict[str, str]:
    """Credential sources: files holding USER:PASSWORD (never the secret on a command line)."""
    sources = {}
    for name, credential in (("owner", OWNER), ("reader", READER)):
        path = tmp_path / f"{name}.cred"
        path.write_text(credential.auth + "\n")
        path.chmod(0o600)
        sources[name] = f"file:{path}"
    return sources


@pytest.fixture
def owner_client(zk_env: ZkEnv) -> Iterator[KazooClient]:
    client = new_client(zk_env.hosts, auth=ZkAuth(OWNER, READER))
    client.start(timeout=15)
    yield client
    client.delete(zk_env.root, recursive=True)  # the plain teardown cannot
    close(client)


def nodes_below(client: KazooClient, root: str) -> list[str]:
    out, pending = [], [root]
    while pending:
        path = pending.pop()
        out.append(path)
        pending.extend(f"{path}/{child}" for child in client.get_children(path))
    return out


def assert_locked(client: KazooClient, paths: list[str]) -> None:
    """A client without the credential can neither read, write nor create under any path."""
    for path in paths:
        with pytest.raises(NoAuthError):
            client.get(path)
        with pytest.raises(NoAuthError):
            client.set(path, b"overwritten")
        with pytest.raises(NoAuthError):
            client.create(f"{path}/intruder", b"")


@pytest.mark.slow
def test_a_secured_environment_refuses_everyone_but_its_credentials(
    zk_env: ZkEnv, zk_client: KazooClient, owner_client: KazooClient, creds: dict[str, str],
    tmp_path: Path,
) -> None:  # fmt: skip
    auth = ["--zk-auth", creds["owner"], "--zk-read-auth", creds["reader"]]
    with sidecars() as started:
        leader = SidecarProcess.start(
            owner_client, zk_env.hosts, zk_env.name, "0.10.0", 1, process_id="secured",
            log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True, extra=auth,
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        paths = nodes_below(owner_client, zk_env.root)
        assert len(paths) > 20  # catalog, shards, epoch, election, processes, ...
        assert_locked(zk_client, paths)
        assert zk_client.exists("/catalog-upgrade") is not None  # the shared parent stays open

        env = ["--zk", zk_env.hosts, "--env", zk_env.name]
        done = cli("status", "--json", *env, "--zk-auth", creds["reader"])
        assert done.returncode == 0, done.stderr
        assert [p["id"] for p in json.loads(done.stdout)["processes"]] == ["secured"]

        for command in (["status"], ["promote", "--deploy-generation", "2"]):
            done = cli(*command, *env)
            assert done.returncode == 2, done.stdout + done.stderr
            assert "--zk-auth" in done.stderr and "Traceback" not in done.stderr
        promotion = owner_client.get(f"{zk_env.root}/promotion")[0]
        done = cli("promote", "--deploy-generation", "2", *env, "--zk-auth", creds["reader"])
        assert done.returncode == 2 and "--zk-auth" in done.stderr, done.stderr
        # Exit 2 is at once: the 30 s registration wait would have ended in exit 4.
        done = cli(
            "promote", "--deploy-generation", "2", "--before-deploy", *env,
            "--zk-auth", creds["reader"],
        )  # fmt: skip
        assert done.returncode == 2 and "refused access" in done.stderr, done.stderr
        assert owner_client.get(f"{zk_env.root}/promotion")[0] == promotion  # nothing written

        done = cli("status", *env, "--zk-auth", "s3cret-owner-in-clear")
        assert done.returncode == 2 and "file:PATH or env:NAME" in done.stderr
        assert "s3cret" not in done.stderr.replace("'s3cret-owner-in-clear'", "")


def test_secure_locks_an_environment_created_without_credentials(
    zk_env: ZkEnv, zk_client: KazooClient, creds: dict[str, str]
) -> None:
    root = env_root(zk_env.name)
    for key in ("", "/catalog", "/shards", "/shards/a"):
        zk_client.ensure_path(root + key)
    zk_client.set(root + "/catalog", b"{}")
    env = ["--zk", zk_env.hosts, "--env", zk_env.name]
    done = cli("secure", *env)
    assert done.returncode == 2 and "--zk-auth" in done.stderr
    done = cli("secure", *env, "--zk-auth", creds["owner"], "--zk-read-auth", creds["reader"])
    assert done.returncode == 0, done.stderr
    assert "secured 4 nodes" in done.stdout
    assert_locked(zk_client, [root, root + "/catalog", root + "/shards/a"])
    reader = connect(zk_env.hosts)
    reader.add_auth("digest", READER.auth)
    owner = new_client(zk_env.hosts, auth=ZkAuth(OWNER))
    owner.start(timeout=15)
    try:
        assert reader.get(root + "/catalog")[0] == b"{}"
        events = [
            json.loads(reader.get(f"{root}/events/{name}")[0])
            for name in reader.get_children(root + "/events")
        ]
        secured = [e for e in events if e["kind"] == "secured"]
        assert secured and "@" in secured[0]["requested_by"], events  # audited: who, where
        with pytest.raises(NoAuthError):
            reader.set(root + "/catalog", b"[]")
        owner.set(root + "/catalog", b"[]")
        owner.delete(root, recursive=True)
    finally:
        close(reader)
        close(owner)
