"""`catalog-upgrade drift`, and `validate --rows`, against a real environment (a real sidecar
bootstrapped it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.errors import EXIT_OK, EXIT_REFUSED
from catalog.shard import Shard
from support.sidecars import SidecarProcess, cli, release_file, sidecars
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

# A collection 0.11.0 does not migrate.
SEALED = "mz_introspection.mz_compute_exports"


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

        # A deliberately drifted environment: one collection's shard sealed behind the
        # catalog's back. drift names it, and a green 0.11.0 process reports it before its
        # promotion (its read-only check), in its plan and as a status warning.
        consensus = Consensus(zk_client, zk_env.root)
        found = read_catalog(consensus)
        assert found is not None
        sealed = found[0].by_name()[SEALED].shard_id
        Shard(consensus, BlobStore.from_uri(str(tmp_path / "blob")), sealed).seal()
        drifted = cli("drift", "--release", str(release_file("0.10.0")), "--json", *where)
        assert drifted.returncode == EXIT_REFUSED, drifted.stderr
        assert [(d["kind"], d["collection"], d["found"]) for d in
                json.loads(drifted.stdout)["drifts"]] == [("shard", SEALED, "sealed")]  # fmt: skip
        green = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, "0.11.0", 2, process_id="green",
            log_dir=tmp_path, blob=tmp_path / "blob",
        )  # fmt: skip
        started.append(green)
        node = green.wait_state("ready", timeout=60)
        assert [(d["kind"], d["collection"]) for d in node["plan"]["drift"]] == [("shard", SEALED)]
        status = cli("status", "--json", *where)
        warnings = json.loads(status.stdout)["warnings"]
        assert any("green found the environment drifted" in w and SEALED in w for w in warnings)
        assert "environment_drift" in green.log_file.read_text()

    empty = cli("drift", "--release", str(release_file("0.10.0")), "--zk", zk_env.hosts,
                "--env", zk_env.name + "-none")  # fmt: skip
    assert empty.returncode == EXIT_REFUSED and "no catalog" in empty.stdout
