"""A blue-green upgrade through a release that renames and widens, with real sidecar processes.

1.0.0 has ``owner``, ``hits`` (int32) and ``spec.mem``; 1.1.0 (tests/fixtures/rename_releases)
renames them ``owner_id``, ``hit_count`` (int64) and ``spec.memory``. Every row reads through
both releases, each under its own names: 1.1.0 read-only and then leading during the window,
1.0.0 again after a rollback (with the rows 1.1.0 wrote), 1.1.0 promoted again and finalized;
a value only the wide type holds is appended then, and 1.0.0 is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK, EXIT_REFUSED
from support.sidecars import Launch, cli, ndjson, read_rows, release_file
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "rename_releases"
NAME = "mz_catalog.mz_machines"


def old_row(i: int, owner: str | None, hits: int | None, mem: int | None) -> dict[str, Any]:
    return {"id": i, "owner": owner, "hits": hits, "spec": {"cpu": 1, "mem": mem}}


def new_row(row: dict[str, Any]) -> dict[str, Any]:
    spec = row["spec"]
    return {
        "id": row["id"], "owner_id": row["owner"], "hit_count": row["hits"],
        "spec": None if spec is None else {"cpu": spec["cpu"], "memory": spec["mem"]},
    }  # fmt: skip


def test_blue_green_through_a_rename_reads_every_row_under_each_releases_names(
    launch: Launch, zk_env: ZkEnv
) -> None:
    where = ["--zk", zk_env.hosts, "--env", zk_env.name]

    def start(version: str, generation: int, name: str, **options: Any) -> Any:
        release = str(release_file(version, RELEASES))
        return launch(version, generation, name, release=release, **options)

    def read(process: Any) -> list[dict[str, Any]]:
        return read_rows(process, NAME)

    def append(process: Any, rows: list[dict[str, Any]]) -> tuple[int, bytes]:
        status, answer = process.http("POST", f"/append?collection={NAME}", ndjson(rows))
        return status, answer

    def promote(generation: int) -> None:
        done = cli("promote", "--deploy-generation", str(generation), "--wait", "30", *where)
        assert done.returncode == EXIT_OK, done.stderr

    rows = [old_row(1, "ann", 2**31 - 1, 512), old_row(2, None, None, None)]
    old = start("1.0.0", 1, "old", auto_promote=True)
    old.wait_state("serving")
    assert append(old, rows)[0] == 200

    new = start("1.1.0", 2, "new", extra=["--finalize-after", "never"])
    node = new.wait_state("ready")
    assert node["plan"]["counts"] == {"evolution": 1}
    assert read(new) == [new_row(r) for r in rows]  # read-only: old rows under the new names
    promote(2)
    assert old.wait_exit() == EXIT_FENCED
    during = {"id": 3, "owner_id": "bob", "hit_count": 9, "spec": {"cpu": 2, "memory": 64}}
    assert append(new, [during])[0] == 200  # written through the names the shard still has
    assert read(new) == [*(new_row(r) for r in rows), during]

    back = start("1.0.0", 3, "back", extra=["--rollback-from", str(RELEASES / "v1_1_0.py")])
    back.wait_state("ready")
    promote(3)
    assert new.wait_exit() == EXIT_FENCED
    back.wait_state("serving")
    rolled = old_row(3, "bob", 9, 64) | {"spec": {"cpu": 2, "mem": 64}}
    assert read(back) == [*rows, rolled]  # the rollback reads under 1.0.0's own names
    assert append(back, [old_row(4, "cy", 4, 4)])[0] == 200

    again = start("1.1.0", 4, "again", extra=["--finalize-after", "never"])
    again.wait_state("ready")
    promote(4)
    assert back.wait_exit() == EXIT_FENCED
    again.wait_state("serving")
    done = cli("finalize", "--version", "1.1.0", *where)
    assert done.returncode == EXIT_OK, done.stderr
    wide = {"id": 5, "owner_id": "di", "hit_count": 2**40, "spec": {"cpu": 3, "memory": 1}}
    status, answer = append(again, [wide])
    assert status == 200, answer
    expected = [*(new_row(r) for r in [*rows, rolled, old_row(4, "cy", 4, 4)]), wide]
    assert read(again) == expected

    late = start("1.0.0", 5, "late")
    assert late.wait_exit() == EXIT_REFUSED
