"""A blue-green upgrade through a widening release with real sidecar processes.

1.0.0 stores counters as int32/int16 and tags as a list of strings; 1.1.0 widens them. Every
row reads through both releases: 1.0.0 before, 1.1.0 (read-only, then leading) after, with a
value only the wide type holds appended once the upgrade is final, and 1.0.0 refused then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from catalog.errors import EXIT_FENCED, EXIT_OK, EXIT_REFUSED
from support.sidecars import Launch, cli, ndjson, read_rows, release_file
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "widening_releases"
NAME = "mz_catalog.mz_counters"


def test_blue_green_through_a_widening_reads_every_row_on_both_releases(
    launch: Launch, zk_env: ZkEnv
) -> None:
    def start(version: str, generation: int, name: str, **options: Any) -> Any:
        release = str(release_file(version, RELEASES))
        return launch(version, generation, name, release=release, **options)

    def read(process: Any) -> list[dict[str, Any]]:
        return read_rows(process, NAME)

    rows: list[dict[str, Any]] = [
        {"id": 1, "hits": 2**31 - 1, "stats": {"errors": -(2**15)}, "tags": ["a", "é"]},
        {"id": 2, "hits": None, "stats": None, "tags": None},
        {"id": 3, "hits": -(2**31), "stats": {"errors": 2**15 - 1}, "tags": []},
    ]
    old = start("1.0.0", 1, "old", auto_promote=True)
    old.wait_state("serving")
    assert old.http("POST", f"/append?collection={NAME}", ndjson(rows))[0] == 200
    assert read(old) == rows

    new = start("1.1.0", 2, "new", extra=["--finalize-after", "never"])
    node = new.wait_state("ready")
    assert node["plan"]["counts"] == {"evolution": 1}
    assert read(new) == rows  # read-only: the narrow batches, widened on read
    done = cli("promote", "--deploy-generation", "2", "--wait", "30",
               "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert old.wait_exit() == EXIT_FENCED
    fits = {"id": 4, "hits": 7, "stats": {"errors": 8}, "tags": ["z"]}
    assert new.http("POST", f"/append?collection={NAME}", ndjson([fits]))[0] == 200
    wide = {"id": 5, "hits": 2**40, "stats": {"errors": 2**20}, "tags": ["w"]}
    status, answer = new.http("POST", f"/append?collection={NAME}", ndjson([wide]))
    assert status == 409 and json.loads(answer)["rule"] == "requires-finalization"

    done = cli("finalize", "--version", "1.1.0", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert done.returncode == EXIT_OK, done.stderr
    assert new.http("POST", f"/append?collection={NAME}", ndjson([wide]))[0] == 200
    assert read(new) == [*rows, fits, wide]

    late = start("1.0.0", 3, "late")
    assert late.wait_exit() == EXIT_REFUSED
