"""Expand, then contract, with real sidecar processes and the crash failpoint.

Release 1.1.0 deletes a field, relaxes two and adds two (tests/fixtures/contract_releases). Its
leader is SIGKILLed right before each of its fenced writes in turn. While the catalog was not
switched, release 1.0.0 starts again, is promoted, reads every row with every original value
through its own schema and appends; after the switch, 1.1.0 is started again instead. Either way
1.1.0 is then promoted and reads every row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from catalog.consensus import Consensus, env_root
from catalog.environment import read_catalog
from catalog.errors import EXIT_FENCED
from support.sidecars import SidecarProcess, json_lines
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "contract_releases"
FLAGS = "mz_catalog.mz_flags"
# The most fenced writes a 1.1.0 leader makes here, with room to grow; the loop stops at the
# first crash point the leader never reaches (it serves instead).
MAX_WRITES = 30


def original(i: int) -> dict[str, Any]:
    return {"id": i, "legacy": f"l{i}", "flag": i % 2 == 0, "owner": {"uid": i}}


def upgraded(i: int) -> dict[str, Any]:
    return {"id": i, "flag": i % 2 == 0, "owner": {"uid": i, "team": None}, "note": None}


def body(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def read(process: SidecarProcess) -> list[dict[str, Any]]:
    status, answer = process.http("GET", f"/read?collection={FLAGS}")
    assert status == 200, answer
    rows = [{k: v for k, v in r.items() if k not in ("_ts", "_diff")} for r in json_lines(answer)]
    return sorted(rows, key=lambda r: r["id"])


def append(process: SidecarProcess, rows: list[dict[str, Any]]) -> None:
    status, answer = process.http("POST", f"/append?collection={FLAGS}", body(rows))
    assert status == 200, answer


def test_crash_at_every_leader_write_of_an_evolution_that_deletes_and_relaxes(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, started: list[SidecarProcess]
) -> None:
    outcomes: list[str] = []
    for crash in range(1, MAX_WRITES + 1):
        env = f"{zk_env.name}-c{crash}"
        work = tmp_path / f"c{crash}"
        work.mkdir()

        def start(version: str, generation: int, name: str, **options: Any) -> SidecarProcess:
            process = SidecarProcess.start(
                zk_client,
                zk_env.hosts,
                env,  # noqa: B023 - used before the loop moves on
                version,
                generation,
                process_id=name,
                log_dir=work,  # noqa: B023
                blob=work / "blob",  # noqa: B023
                release=str(RELEASES / f"v{version.replace('.', '_')}.py"),
                **options,
            )
            started.append(process)
            return process

        old = start("1.0.0", 1, "old", auto_promote=True)
        old.wait_state("serving")
        append(old, [original(1), original(2)])
        new = start("1.1.0", 2, "new", crash_before_write=crash)
        new.wait_state("ready")
        status, answer = new.http("POST", "/promote")
        assert status == 200, answer
        assert old.wait_exit() == EXIT_FENCED
        code = new.wait_exit(timeout=30) if not _serves(new) else None
        if code is None:
            outcomes.append("completed")
            assert read(new) == [upgraded(1), upgraded(2)]
            new.kill()
            break
        assert code == -9, f"crash point {crash}: exit {code}\n{new.log_tail()}"
        found = read_catalog(Consensus(zk_client, env_root(env)))
        assert found is not None
        ids, generation = [1, 2], 3
        if found[0].version == "1.0.0":
            outcomes.append("older")
            older = start("1.0.0", 3, "older")
            older.wait_state("ready")
            assert older.http("POST", "/promote")[0] == 200
            older.wait_state("serving")
            assert read(older) == [original(1), original(2)], f"crash point {crash}"
            append(older, [original(3)])
            assert read(older) == [original(i) for i in (1, 2, 3)]
            ids, generation = [1, 2, 3], 4
        else:
            outcomes.append("restart")
        newer = start("1.1.0", generation, f"newer{generation}")
        newer.wait_state("ready")
        assert newer.http("POST", "/promote")[0] == 200
        newer.wait_state("serving")
        assert read(newer) == [upgraded(i) for i in ids], f"crash point {crash}"
        append(newer, [{"id": 9, "flag": None, "owner": {"uid": None}, "note": "n"}])
        for process in started:
            process.kill()
    assert outcomes[-1] == "completed", outcomes
    assert "older" in outcomes and "restart" in outcomes, outcomes


def _serves(process: SidecarProcess) -> bool:
    """Whether the process reaches serving (False: it exited first, as a crash does)."""
    try:
        process.wait_state("serving", timeout=30)
    except AssertionError:
        return False
    return True
