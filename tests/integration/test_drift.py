"""`catalog-upgrade drift`, and `validate --rows`, against a real environment (a real sidecar
bootstrapped it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.errors import EXIT_OK, EXIT_REFUSED
from support.sidecars import SidecarProcess, cli, release_file, sidecars
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration


def test_drift_matches_the_running_release_and_names_every_difference_of_another(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    with sidecars() as started:
        leader = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, "0.10.0", 1, process_id="blue",
            log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True,
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        where = ["--zk", zk_env.hosts, "--env", zk_env.name]
        same = cli("drift", "--release", str(release_file("0.10.0")), *where)
        assert same.returncode == EXIT_OK, same.stdout + same.stderr
        assert "no drift" in same.stdout and "mz_catalog.mz_tables" in same.stdout

        other = cli("drift", "--release", str(release_file("0.11.0")), "--json", *where)
        assert other.returncode == EXIT_REFUSED, other.stderr
        report = json.loads(other.stdout)
        kinds = {(d["kind"], d["collection"]) for d in report["drifts"]}
        assert ("version", None) in kinds
        assert ("schema", "mz_catalog.mz_tables") in kinds  # 0.11.0 adds source_id
        assert report["ok"] is False and report["catalog_version"] == "0.10.0"
        table = next(c for c in report["collections"] if c["name"] == "mz_catalog.mz_tables")
        assert table["mechanism"] == "evolution" and table["shard_id"]

        role = b'{"id": 7, "oid": 30007, "name": "analyst", "inherit": true}\n'
        assert leader.http("POST", "/append?collection=mz_catalog.mz_roles", role)[0] == 200
        releases = str(release_file("0.10.0").parent)
        counted = cli("validate", "--releases", releases, "--rows", "--json", *where)
        assert counted.returncode == EXIT_OK, counted.stderr
        roles = next(
            f for f in json.loads(counted.stdout)["findings"]
            if f["collection"] == "mz_catalog.mz_roles" and f["rule"] == "rewrite"
        )  # fmt: skip
        assert roles["rows"] >= 1  # the role appended above, counted from the shard's state

    empty = cli("drift", "--release", str(release_file("0.10.0")), "--zk", zk_env.hosts,
                "--env", zk_env.name + "-none")  # fmt: skip
    assert empty.returncode == EXIT_REFUSED and "no catalog" in empty.stdout
