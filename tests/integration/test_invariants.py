"""Each invariant of orchestrator.scenario.invariants catches the violation it exists for.

A real 0.10.0 sidecar bootstraps a fresh environment; then the test breaks the durable state
the way a bug would (directly in ZooKeeper or the blob store) and the checker must report it by
its invariant id. A healthy environment reports nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pyarrow as pa
import pytest

from catalog.consensus import encode_json
from catalog.environment import CATALOG_KEY, EPOCH_KEY, read_catalog
from catalog.migration import MigrationEntry, MigrationShard
from catalog.shard import Origin, Shard, create_op, new_shard_id, shard_key
from orchestrator.scenario import ScenarioRun, ZooKeeperTarget
from orchestrator.scenario.format import ReleaseIndex
from orchestrator.scenario.invariants import InvariantChecker
from support.zookeeper import ZooKeeperEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELEASES = Path(__file__).resolve().parents[2] / "scenarios" / "releases"


@pytest.fixture(scope="module")
def index() -> ReleaseIndex:
    """The example release history, loaded once."""
    return ReleaseIndex(RELEASES)


@pytest.fixture
def bootstrapped(
    zk_server: ZooKeeperEndpoint, index: ReleaseIndex, tmp_path: Path
) -> Iterator[ScenarioRun]:
    """A fresh environment bootstrapped and served by one real 0.10.0 sidecar."""
    run = ScenarioRun(
        zookeeper=ZooKeeperTarget(hosts=zk_server.hosts),
        work_dir=tmp_path / "run",
        env=f"inv-{tmp_path.name[-20:].replace('_', '-')}",
        release_files=index.versions(),
        history=index.releases(),
        invariants=True,
    )
    run.open()
    try:
        process = run.sidecars.start(
            "leader", index.versions()["0.10.0"], "0.10.0", 1, auto_promote=True
        )
        run.wait_state(process, "serving", 30)
        yield run
    finally:
        run.close(delete_environment=True)


def checker(run: ScenarioRun) -> InvariantChecker:
    assert run.checker is not None
    return run.checker


def caught(run: ScenarioRun, *, writes_expected: bool = True, rows: bool = True) -> set[str]:
    return {v.invariant for v in checker(run).check(writes_expected=writes_expected, rows=rows)}


def test_healthy_environment_reports_nothing(bootstrapped: ScenarioRun) -> None:
    """A bootstrapped environment with its leader serving breaks no invariant."""
    assert caught(bootstrapped, writes_expected=False) == set()
    assert caught(bootstrapped, writes_expected=False) == set()
    assert checker(bootstrapped).check_cleanup(timeout=1) == []


def test_two_leaders_for_one_epoch(bootstrapped: ScenarioRun) -> None:
    """An epoch whose leader changes without a new epoch number is caught."""
    assert caught(bootstrapped) == set()
    found = bootstrapped.consensus.get_json(EPOCH_KEY)
    assert found is not None
    epoch, version = found
    bootstrapped.consensus.cas(EPOCH_KEY, encode_json({**epoch, "leader": "usurper"}), version)
    assert "single-leader" in caught(bootstrapped)


def test_durable_change_during_a_read_only_step(bootstrapped: ScenarioRun) -> None:
    """A catalog write while only read-only work happened is caught."""
    assert caught(bootstrapped, writes_expected=False) == set()
    found = read_catalog(bootstrapped.consensus)
    assert found is not None
    catalog, version = found
    changed = attrs.evolve(catalog, updated_at=catalog.updated_at + 1)
    bootstrapped.consensus.cas(CATALOG_KEY, changed.encode(), version)
    assert caught(bootstrapped, writes_expected=False) == {"read-only-writes-nothing"}


def test_two_entries_for_one_replacement(bootstrapped: ScenarioRun) -> None:
    """Two live migration entries for one (collection, version, generation) made from one
    origin are caught; one per origin is how a key outlives a catalog that moved."""
    migration = MigrationShard(bootstrapped.consensus, checker(bootstrapped).blob)
    (entry,) = [e for e in migration.entries() if e.global_id == "s10"]
    first = Shard(bootstrapped.consensus, checker(bootstrapped).blob, entry.shard_id).state()
    for origin, found in (
        (Origin("elsewhere", None), set()),
        (first.origin, {"replacement-agreement"}),
    ):
        op, _ = create_op(shard_id := new_shard_id(), first.live_schema, origin)
        bootstrapped.consensus.commit([op])
        migration.append_entries([MigrationEntry("s10", "0.10.0", 1, shard_id)])
        assert caught(bootstrapped) & {"replacement-agreement"} == found


def test_referenced_shard_finalized(bootstrapped: ScenarioRun) -> None:
    """A shard the catalog names, marked finalized, is caught."""
    found = read_catalog(bootstrapped.consensus)
    assert found is not None
    shard_id = found[0].by_name()["mz_catalog.mz_tables"].shard_id
    state = Shard(bootstrapped.consensus, checker(bootstrapped).blob, shard_id).state()
    bootstrapped.consensus.cas(
        shard_key(shard_id), attrs.evolve(state, finalized=True).encode(), state.version
    )
    assert "referenced-not-finalized" in caught(bootstrapped)


def test_release_that_can_no_longer_start(bootstrapped: ScenarioRun) -> None:
    """A schema registered on a shard that makes a later release's evolution impossible."""
    found = read_catalog(bootstrapped.consensus)
    assert found is not None
    shard = Shard(
        bootstrapped.consensus,
        checker(bootstrapped).blob,
        found[0].by_name()["mz_catalog.mz_tables"].shard_id,
    )
    state = shard.state()
    # 0.11.0 adds source_id as a string; a (crashed, buggy) writer registered it as an integer.
    clash = state.live_schema.append(pa.field("source_id", pa.int64()))
    assert shard.compare_and_evolve_schema(state.schema_id, clash).ok
    assert "releases-can-start" in caught(bootstrapped)


def test_acknowledged_rows_lost(bootstrapped: ScenarioRun) -> None:
    """A row acknowledged but absent from the collection's shard is caught."""
    rows = checker(bootstrapped)
    rows.track("mz_catalog.mz_tables", "name")
    rows.acknowledged("mz_catalog.mz_tables", ["never-written"])
    assert "rows-never-lost" in caught(bootstrapped)


def test_rows_nobody_wrote(bootstrapped: ScenarioRun) -> None:
    """A row in a tracked collection that nobody acknowledged is caught too."""
    process = bootstrapped.sidecars.get("leader")
    answer = process.request(
        "POST",
        "/append?collection=mz_catalog.mz_tables",
        b'{"id": "u1", "oid": 1, "schema_id": "u3", "name": "stray", "owner_id": "u1"}\n',
    )
    assert answer.ok
    checker(bootstrapped).track("mz_catalog.mz_tables", "name")
    assert "rows-never-lost" in caught(bootstrapped)


def test_unreferenced_shard_left_behind(bootstrapped: ScenarioRun) -> None:
    """A shard nobody references and nobody finalizes is caught by the final check."""
    orphan = Shard(bootstrapped.consensus, checker(bootstrapped).blob, new_shard_id())
    orphan.create(pa.schema([pa.field("id", pa.string(), nullable=False)]))
    found = checker(bootstrapped).check_cleanup(timeout=1)
    assert [v.invariant for v in found] == ["unreferenced-cleaned"]
    assert found[0].details["shard_id"] == orphan.shard_id
