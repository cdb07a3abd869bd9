"""A blue-green upgrade through a widening release with real sidecar processes.

1.0.0 stores counters as int32/int16 and tags as a list of strings; 1.1.0 widens them. Every
row reads through both releases: 1.0.0 before, 1.1.0 (read-only, then leading) after, with a
value only the wide type holds appended once the upgrade is final, and 1.0.0 refused then.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
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
    status, answer = new.http("POST", f"/append?collection={NAME}", ndjson([fits]))
    assert status == 200, answer
    wide = {"id": 5, "hits": 2**40, "stats": {"errors": 2**20}, "tags": ["w"]}
    status, answer = new.http("POST", f"/append?collection={NAME}", ndjson([wide]))
    assert status == 409 and json.loads(answer)["rule"] == "requires-finalization"

    done = cli("finalize", "--version", "1.1.0", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert done.returncode == EXIT_OK, done.stderr
    assert new.http("POST", f"/append?collection={NAME}", ndjson([wide]))[0] == 200
    assert read(new) == [*rows, fits, wide]

    late = start("1.0.0", 3, "late")
    assert late.wait_exit() == EXIT_REFUSED


def test_appends_that_share_a_commit_in_the_window_are_each_checked_alone(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """While the widening is pending, appends sent together share group commits: a member whose
    value needs the wide type, whose row is bad or whose key holds another body is refused on
    its own, naming its own field and none of the other members' values; every fitting member
    lands exactly once."""

    def start(version: str, generation: int, name: str, **options: Any) -> Any:
        return launch(version, generation, name, release=str(release_file(version, RELEASES)),
                      **options)  # fmt: skip

    old = start("1.0.0", 1, "old", auto_promote=True)
    old.wait_state("serving")
    new = start("1.1.0", 2, "new", extra=["--finalize-after", "never"])
    new.wait_state("ready")
    done = cli("promote", "--deploy-generation", "2", "--wait", "30",
               "--zk", zk_env.hosts, "--env", zk_env.name)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert new.http("POST", f"/append?collection={NAME}", ndjson([{"id": 0}]))[0] == 200
    taken = "reused-key"
    keyed = {"Idempotency-Key": taken}
    first = new.sidecar.request("POST", f"/append?collection={NAME}", ndjson([{"id": 1}]),
                                headers=keyed)  # fmt: skip
    assert first.status == 200, first.body

    kinds: list[tuple[str, dict[str, Any], str | None]] = []
    for round_ in range(3):
        base = 100 * (round_ + 1)
        kinds += [("fits", {"id": base + i, "hits": 7 + i, "tags": ["t"]}, None) for i in range(6)]
        kinds += [
            ("wide-hits", {"id": base + 50, "hits": 6_000_000_000}, None),
            ("wide-errors", {"id": base + 51, "stats": {"errors": 2**20}}, None),
            ("bad-row", {"id": base + 52, "nope": 1}, None),
            ("reused", {"id": base + 53}, taken),
        ]

    def send(kind: tuple[str, dict[str, Any], str | None]) -> tuple[int, dict[str, Any]]:
        _, row, key = kind
        headers = {"Idempotency-Key": key} if key else None
        answer = new.sidecar.request("POST", f"/append?collection={NAME}", ndjson([row]),
                                     headers=headers, timeout=30.0)  # fmt: skip
        return answer.status, json.loads(answer.body)

    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        answers = list(pool.map(send, kinds))

    checked = 0
    for (kind, row, _), (status, answer) in zip(kinds, answers, strict=True):
        text = json.dumps(answer)
        if kind == "fits":
            assert status == 200, (row, answer)
        elif kind in ("wide-hits", "wide-errors"):
            path = "hits" if kind == "wide-hits" else "stats.errors"
            assert (status, answer["rule"], answer["path"]) == (409, "requires-finalization", path)
            assert path in answer["message"]
        elif kind == "bad-row":
            assert status == 400 and answer["field"] == "nope", answer
        else:
            assert status == 422, answer
        # Nobody reads another member's data: no value but the member's own appears.
        for other in ("6000000000", str(2**20)):
            assert other not in text or other in json.dumps(row), (row, answer)
        checked += 1
    assert checked == len(kinds) == 30

    landed = [r["id"] for r in read_rows(new, NAME)]
    fitting = sorted([0, 1] + [row["id"] for kind, row, _ in kinds if kind == "fits"])
    assert landed == fitting  # each fitting member exactly once, nothing of the refused ones
