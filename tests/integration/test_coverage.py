"""Lazy-migration coverage against a real ZooKeeper and real Parquet batches: batches and rows
under each schema (rolled-up ones included), readers holding an old schema, which old schemas
can retire; `status --coverage`; and `compact --until-retired` moving everything to the latest
schema with every read unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import SHARDS_KEY, CatalogState, CollectionRef, catalog_write_op
from catalog.shard import DIFF, TS, Shard, shard_coverage
from orchestrator.cli import main
from orchestrator.status.coverage import read_coverage
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V0 = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
V1 = V0.append(pa.field("note", pa.string()))


@pytest.fixture
def consensus(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    store = Consensus(zk_client, zk_env.root)
    store.ensure(SHARDS_KEY)
    return store


@pytest.fixture
def blob(tmp_path: Path) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blob"))


def rows(schema: pa.Schema, ids: range, ts: int) -> pa.Table:
    data = pa.Table.from_pylist([{"id": i, "name": f"n{i}"} for i in ids], schema=schema)
    return data.append_column(TS, pa.array([ts] * len(data), pa.uint64())).append_column(
        DIFF, pa.array([1] * len(data), pa.int64())
    )


def append(shard: Shard, table: pa.Table) -> None:
    upper = shard.state().upper
    assert shard.compare_and_append(table, upper, upper + 1).ok


def evolved_shard(consensus: Consensus, blob: BlobStore, shard_id: str, **options: Any) -> Shard:
    """Six batches under schema 0 (2 rows each), then two under schema 1 (3 rows each)."""
    shard = Shard(consensus, blob, shard_id, **options)
    shard.create(V0)
    for batch in range(6):
        append(shard, rows(V0, range(batch * 2, batch * 2 + 2), ts=batch))
    assert shard.compare_and_evolve_schema(0, V1).ok
    for batch in range(2):
        append(shard, rows(V1, range(100 + batch * 3, 103 + batch * 3), ts=6 + batch))
    return shard


def catalog_of(consensus: Consensus, blob: BlobStore, shards: dict[str, Shard]) -> None:
    refs = {
        f"s{i}": CollectionRef(global_id=f"s{i}", name=name, shard_id=s.shard_id, fingerprint="x")
        for i, (name, s) in enumerate(sorted(shards.items()))
    }
    state = CatalogState(version="0.1.0", deploy_generation=1, blob_uri=blob.uri, collections=refs)
    consensus.commit([catalog_write_op(state, -1)])


def run_cli(zk_env: ZkEnv, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--log-level", "WARNING", *args, "--zk", zk_env.hosts, "--env", zk_env.name]
    )


def test_coverage_counts_rolled_up_batches_and_leased_readers(
    consensus: Consensus, blob: BlobStore
) -> None:
    """Batches in rollup blobs count like inline ones (read once with a shared summary cache);
    a reader leasing the shard with schema 0 keeps it needed; without data or readers it can
    retire."""
    shard = evolved_shard(consensus, blob, "rolled", rollup_threshold=3)
    state = shard.state()
    assert state.rollups, "the test needs rolled-up batches"
    cache: dict[str, Any] = {}
    coverage = shard_coverage(shard, state, rollup_counts=cache)
    assert [(u.schema_id, u.batches, u.rows) for u in coverage.schemas] == [(0, 6, 12), (1, 2, 6)]
    assert coverage.needed == (0, 1) and coverage.retirable == ()
    assert set(cache) == {r.name for r in state.rollups}
    assert shard_coverage(shard, state, rollup_counts=cache) == coverage  # from the cache
    with shard.lease("reader", schema_id=0):
        assert shard_coverage(shard).schemas[0].readers == 1
    assert shard.compact().applied
    after = shard_coverage(shard)
    assert after.old_batches == 0 and after.retirable == (0,) and after.needed == (1,)
    with shard.lease("old-reader", schema_id=0):
        assert shard_coverage(shard).retirable == ()


def test_status_coverage_and_compact_until_retired(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """status --coverage shows both collections' old-schema data; compact --until-retired
    compacts exactly the one holding it, reads stay the same, and its schema 0 can retire."""
    evolved = evolved_shard(consensus, blob, "evolved")
    fresh = Shard(consensus, blob, "fresh")
    fresh.create(V1)
    append(fresh, rows(V1, range(3), ts=0))
    catalog_of(consensus, blob, {"mz_catalog.evolved": evolved, "mz_catalog.fresh": fresh})
    before = sorted(map(str, evolved.snapshot().to_pylist()))

    result = run_cli(zk_env, "status", "--coverage", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["coverage"]
    assert document["pending_collections"] == 1 and document["old_rows"] == 12
    by_name = {c["name"]: c for c in document["collections"]}
    assert by_name["mz_catalog.evolved"]["schemas"][0] == {
        "schema_id": 0, "batches": 6, "rows": 12, "readers": 0, "narrower": [], "renamed": [],
    }  # fmt: skip
    assert by_name["mz_catalog.fresh"]["retirable"] == []
    table = run_cli(zk_env, "status", "--coverage")
    assert table.exit_code == 0 and "lazy-migration coverage" in table.stdout
    assert "0: 6/12" in table.stdout

    result = run_cli(zk_env, "compact", "--until-retired", "--json")
    assert result.exit_code == 0, result.output
    (outcome,) = json.loads(result.stdout)["collections"]
    assert outcome["collection"] == "mz_catalog.evolved" and outcome["retired"]
    assert outcome["rows_migrated"] == 12 and outcome["retirable"] == [0]
    assert sorted(map(str, evolved.snapshot().to_pylist())) == before
    report = read_coverage(consensus)
    assert not report.pending and report.retirable == 1
    again = run_cli(zk_env, "compact", "--until-retired")
    assert again.exit_code == 0 and "nothing to compact" in again.stdout


def test_compact_until_retired_refuses_an_unknown_collection(
    consensus: Consensus, blob: BlobStore, zk_env: ZkEnv
) -> None:
    """A named collection the catalog does not have is bad input (exit 2), nothing compacted;
    compact without --collection nor --until-retired is a usage error."""
    evolved = evolved_shard(consensus, blob, "kept")
    catalog_of(consensus, blob, {"mz_catalog.kept": evolved})
    result = run_cli(zk_env, "compact", "--until-retired", "--collection", "mz_catalog.nope")
    assert result.exit_code == 2 and "mz_catalog.nope" in result.output
    assert evolved.state().batch_count == 8
    assert run_cli(zk_env, "compact").exit_code == 2
