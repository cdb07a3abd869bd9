"""The read-only and leader algorithms against a real ZooKeeper and real Parquet blobs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Create, SetData
from catalog.environment import FINALIZE_KEY, PROCESSES_KEY, CatalogCache, read_catalog
from catalog.errors import FencedError, MigrationRefusedError, PlanError
from catalog.migration import MigrationShard
from catalog.release import Release, load_release_dir
from catalog.shard import Shard
from orchestrator.migrate import (
    MigrationContext,
    check_read_only,
    collect_orphan_shards,
    finalize_pending,
    migrate_as_leader,
)
from orchestrator.process_node import ProcessNode
from support.migrations import Env, SimulatedCrash, bootstrap
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

RELEASES_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "releases"


@pytest.fixture(scope="module")
def releases() -> dict[str, Release]:
    return {str(r.version): r for r in load_release_dir(RELEASES_DIR)}


@pytest.fixture
def env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> Iterator[Env]:
    made = Env(zk_client, zk_env.root, BlobStore.from_uri(str(tmp_path / "blob")))
    yield made
    made.close()


def durable_digest(client: KazooClient, root: str, skip: set[str]) -> dict[str, str]:
    """Path -> sha256 of data for every persistent znode below root, except ``skip`` prefixes."""
    out: dict[str, str] = {}

    def walk(path: str) -> None:
        data, stat = client.get(path)
        relative = path[len(root) :].strip("/")
        if stat.ephemeralOwner == 0 and not any(relative.startswith(s) for s in skip):
            out[relative] = hashlib.sha256(data).hexdigest()
        for child in client.get_children(path):
            walk(f"{path}/{child}")

    walk(root)
    return out


def append_rows(ctx: MigrationContext, name: str, rows: list[dict[str, Any]]) -> None:
    found = read_catalog(ctx.consensus)
    assert found is not None
    shard = ctx.shard(found[0].by_name()[name].shard_id)
    state = shard.state()
    table = pa.Table.from_pylist(rows, schema=state.live_schema)
    upper = state.upper
    table = table.append_column("_ts", pa.array([upper] * len(rows), pa.uint64()))
    table = table.append_column("_diff", pa.array([1] * len(rows), pa.int64()))
    result = shard.compare_and_append(table, upper, upper + 1)
    assert result.ok


def test_bootstrap_creates_every_shard_and_the_catalog(
    env: Env, releases: dict[str, Release]
) -> None:
    """An empty environment's first leader creates the catalog at its version, one shard each."""
    release = releases["0.10.0"]
    empty = check_read_only(env.ctx(release, 1))
    assert empty.bootstrap
    assert empty.summary() == {"bootstrap": True, "from": None, "to": "0.10.0"}
    ctx = bootstrap(env, release)
    found = read_catalog(ctx.consensus)
    assert found is not None
    catalog, _ = found
    assert catalog.version == "0.10.0"
    assert catalog.deploy_generation == 1
    assert set(catalog.collections) == {b.global_id for b in release.builtins}
    assert len(catalog.shard_ids()) == len(release.builtins)
    for ref in catalog.collections.values():
        assert ctx.shard(ref.shard_id).state().schema_id == 0


def test_a_cached_catalog_is_the_catalog_read_anew_until_it_changes(
    env: Env, releases: dict[str, Release]
) -> None:
    """The reads' catalog cache answers what read_catalog answers: from memory while the
    znode is unchanged, read anew once a switch wrote it."""
    old_ctx = bootstrap(env, releases["0.10.0"])
    cache = CatalogCache()
    first = cache.read(old_ctx.consensus)
    assert first is not None and first == read_catalog(old_ctx.consensus)
    again = cache.read(old_ctx.consensus)
    assert again is not None and again[0] is first[0]
    ctx = env.ctx(releases["0.11.0"], 2)
    check_read_only(ctx)
    migrate_as_leader(ctx, env.lead(ctx))
    switched = cache.read(old_ctx.consensus)
    assert switched is not None and switched == read_catalog(ctx.consensus)
    assert (switched[0].version, switched[1]) != (first[0].version, first[1])
    assert switched[0].version == "0.11.0"


def test_read_only_check_writes_nothing_outside_its_own_keys(
    env: Env, releases: dict[str, Release]
) -> None:
    """A read-only run changes no durable state except its own (version, generation) shards."""
    bootstrap(env, releases["0.10.0"])
    before = durable_digest(env.client, env.root, skip=set())
    ctx = env.ctx(releases["0.11.0"], 2)
    result = check_read_only(ctx)
    own = {f"shards/{sid}" for sid in result.replacement_shards.values()}
    own |= {f"{key}/batches" for key in own}  # the bodies of split states
    migration = {"shards/migration", "shards/migration/batches"}
    after = durable_digest(env.client, env.root, skip=own | migration)
    assert after == {k: v for k, v in before.items() if k not in migration}
    assert result.replacement_shards  # 0.11.0 replaces and rewrites collections
    entries = MigrationShard(ctx.consensus, env.blob).entries()
    new = [e for e in entries if (e.version, e.deploy_generation) == ("0.11.0", 2)]
    assert {e.shard_id for e in new} == set(result.replacement_shards.values())
    catalog = read_catalog(ctx.consensus)
    assert catalog is not None and catalog[0].version == "0.10.0"


def test_read_only_checks_of_one_version_agree_on_shards(
    env: Env, releases: dict[str, Release]
) -> None:
    """Two processes of the same (version, generation) reuse one replacement shard each."""
    bootstrap(env, releases["0.10.0"])
    first = check_read_only(env.ctx(releases["0.11.0"], 2))
    second = check_read_only(env.ctx(releases["0.11.0"], 2))
    other_generation = check_read_only(env.ctx(releases["0.11.0"], 3))
    assert first.replacement_shards == second.replacement_shards
    assert set(first.replacement_shards.values()).isdisjoint(
        other_generation.replacement_shards.values()
    )


def test_blue_green_upgrade_switches_and_finalizes(env: Env, releases: dict[str, Release]) -> None:
    """The promoted leader evolves, replaces, rewrites with data, switches, and finalizes."""
    old_ctx = bootstrap(env, releases["0.10.0"])
    alice = {"id": 7, "oid": 1, "name": "alice", "inherit": True}
    append_rows(old_ctx, "mz_catalog.mz_roles", [alice])
    old_catalog = read_catalog(old_ctx.consensus)
    assert old_catalog is not None
    ctx = env.ctx(releases["0.11.0"], 2)
    check_read_only(ctx)
    bob = {"id": 8, "oid": 2, "name": "bob", "inherit": False}
    append_rows(old_ctx, "mz_catalog.mz_roles", [bob])
    leadership = env.lead(ctx)
    result = migrate_as_leader(ctx, leadership)
    catalog = read_catalog(ctx.consensus)
    assert catalog is not None
    new = catalog[0]
    assert (new.version, new.deploy_generation) == ("0.11.0", 2)
    old = old_catalog[0].by_name()
    replaced = {"mz_internal.mz_cluster_replica_statuses", "mz_catalog.mz_roles"}
    for name, ref in new.by_name().items():
        if name in replaced:
            assert ref.shard_id != old[name].shard_id
        elif name in old:
            assert ref.shard_id == old[name].shard_id
    assert "mz_catalog.mz_tables" in result.evolved
    roles = ctx.shard(new.by_name()["mz_catalog.mz_roles"].shard_id).snapshot()
    assert sorted(roles.column("id").to_pylist()) == ["u7", "u8"]
    queued = set(ctx.consensus.children(FINALIZE_KEY))
    assert queued == {old[name].shard_id for name in replaced}
    finalized = finalize_pending(ctx, leadership.fence, lease_timeout=5)
    assert set(finalized) == queued
    assert ctx.consensus.children(FINALIZE_KEY) == []
    for shard_id in finalized:
        assert Shard(ctx.consensus, env.blob, shard_id).state().finalized


def test_older_release_after_aborted_upgrade(env: Env, releases: dict[str, Release]) -> None:
    """An aborted read-only upgrade to Y never stops an upgrade to an older X."""
    bootstrap(env, releases["0.10.0"])
    aborted = check_read_only(env.ctx(releases["0.12.0"], 2))
    assert aborted.replacement_shards
    ctx = env.ctx(releases["0.11.0"], 3)
    check_read_only(ctx)
    migrate_as_leader(ctx, env.lead(ctx))
    catalog = read_catalog(ctx.consensus)
    assert catalog is not None and catalog[0].version == "0.11.0"
    later = [e for e in MigrationShard(ctx.consensus, env.blob).entries() if e.version == "0.12.0"]
    assert later, "entries of a later version stay"


def test_the_old_release_restarts_after_an_aborted_upgrade(
    env: Env, releases: dict[str, Release]
) -> None:
    """After an aborted upgrade the old release passes its check and can lead again."""
    bootstrap(env, releases["0.10.0"])
    check_read_only(env.ctx(releases["0.11.0"], 2))
    ctx = env.ctx(releases["0.10.0"], 3)
    result = check_read_only(ctx)
    assert result.plan is not None and result.plan.is_empty
    migrate_as_leader(ctx, env.lead(ctx))


def test_fenced_and_refused_starts(env: Env, releases: dict[str, Release]) -> None:
    """A lower generation is fenced (exit 3); a release below the catalog is refused (exit 4)."""
    bootstrap(env, releases["0.10.0"], generation=5)
    with pytest.raises(FencedError) as fenced:
        check_read_only(env.ctx(releases["0.11.0"], 4))
    assert fenced.value.details["catalog_generation"] == 5
    ctx = env.ctx(releases["0.11.0"], 6)
    migrate_as_leader(ctx, env.lead(ctx))
    with pytest.raises(MigrationRefusedError) as refused:
        check_read_only(env.ctx(releases["0.10.0"], 7))
    assert refused.value.details["catalog_version"] == "0.11.0"


def test_missing_instruction_is_refused_naming_the_collection(
    env: Env, releases: dict[str, Release]
) -> None:
    """A changed builtin without an instruction refuses the check and names it."""
    bootstrap(env, releases["0.10.0"])
    target = releases["0.11.0"]
    stripped = Release(
        version=target.version,
        builtins=target.builtins,
        migrations=[m for m in target.migrations if m.object_name != "mz_tables"],
    )
    with pytest.raises(PlanError) as info:
        check_read_only(env.ctx(stripped, 2))
    assert "mz_catalog.mz_tables" in info.value.details["collections"]


def _final_state(ctx: MigrationContext) -> dict[str, Any]:
    found = read_catalog(ctx.consensus)
    assert found is not None
    catalog = found[0]
    return {
        "version": catalog.version,
        "names": sorted(catalog.by_name()),
        "schemas": {
            ref.name: str(ctx.shard(ref.shard_id).state().live_schema)
            for ref in catalog.collections.values()
        },
    }


def test_leader_crash_at_every_write_then_restart_completes(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, releases: dict[str, Release]
) -> None:
    """Kill the leader before each of its writes: a restart of the same release completes, and
    so does the start of the older release (the catalog version did not move before the switch).
    """
    reference = Env(zk_client, f"{zk_env.root}/reference", BlobStore.from_uri(str(tmp_path / "r")))
    bootstrap(reference, releases["0.10.0"])
    ref_ctx = reference.ctx(releases["0.11.0"], 2)
    migrate_as_leader(ref_ctx, reference.lead(ref_ctx))
    total = ref_ctx.consensus.commits  # type: ignore[attr-defined]
    expected = _final_state(ref_ctx)
    reference.close()
    assert total >= 4

    for crash_after in range(total):
        env = Env(
            zk_client,
            f"{zk_env.root}/crash{crash_after}",
            BlobStore.from_uri(str(tmp_path / f"b{crash_after}")),
        )
        try:
            bootstrap(env, releases["0.10.0"])
            ctx = env.ctx(releases["0.11.0"], 2, crash_after=crash_after)
            leadership = env.lead(ctx)
            with pytest.raises(SimulatedCrash):
                migrate_as_leader(ctx, leadership)
            env.elections[-1].stop()  # the dead leader's session ends

            switched = read_catalog(ctx.consensus)
            assert switched is not None
            if switched[0].version == "0.10.0":
                older = env.ctx(releases["0.10.0"], 3)
                check_read_only(older)
                migrate_as_leader(older, env.lead(older))
                assert read_catalog(older.consensus)[0].version == "0.10.0"  # type: ignore[index]
                generation = 4
            else:
                generation = 3
            restart = env.ctx(releases["0.11.0"], generation)
            check_read_only(restart)
            leadership = env.lead(restart)
            migrate_as_leader(restart, leadership)
            assert _final_state(restart) == expected, f"crash point {crash_after}"
            finalize_pending(restart, leadership.fence, lease_timeout=5)
            catalog = read_catalog(restart.consensus)
            assert catalog is not None
            for shard_id in catalog[0].shard_ids():
                assert not restart.shard(shard_id).state().finalized
        finally:
            env.close()


def test_same_version_promoted_twice_cleans_up_the_second_generation(
    env: Env, releases: dict[str, Release]
) -> None:
    """Promoting a version already promoted at a lower generation leaves no live entries of
    the new generation naming unused shards: they are retracted and their shards finalized."""
    bootstrap(env, releases["0.10.0"])
    first = env.ctx(releases["0.11.0"], 2)
    check_read_only(first)
    second = env.ctx(releases["0.11.0"], 3)
    unused = check_read_only(second).replacement_shards
    migrate_as_leader(first, env.lead(first))
    leadership = env.lead(second)
    result = migrate_as_leader(second, leadership)
    assert set(unused.values()) <= set(result.queued_for_finalization)
    live = [
        e
        for e in MigrationShard(second.consensus, env.blob).entries()
        if (e.version, e.deploy_generation) == ("0.11.0", 3)
    ]
    assert live == []
    finalize_pending(second, leadership.fence, lease_timeout=5)
    catalog = read_catalog(second.consensus)
    assert catalog is not None
    for shard_id in unused.values():
        assert shard_id not in catalog[0].shard_ids()
        assert second.shard(shard_id).state().finalized


# -- orphan shards -------------------------------------------------------------------------------


def crashed_read_only_orphans(ctx: MigrationContext, count: int = 3) -> list[str]:
    """What a read-only process leaves when it dies after creating replacement shards and
    before appending their entries: shards nothing names."""
    created: dict[str, str] = {}
    schema = pa.schema([pa.field("id", pa.string())])
    schemas = {f"u-orphan-{i}": schema for i in range(count)}
    ctx.migration_shard()._create_shards(schemas, created, {}, None)
    return sorted(created.values())


def test_orphan_shards_of_a_crashed_read_only_process_are_collected(
    env: Env, releases: dict[str, Release]
) -> None:
    """Orphans older than the grace period are sealed and queued, then finalized; named
    shards are never touched, and the upgrade the crashed process was checking completes."""
    leader_ctx = env.ctx(releases["0.10.0"], 1)
    leadership = env.lead(leader_ctx)
    migrate_as_leader(leader_ctx, leadership)
    crashed = env.ctx(releases["0.11.0"], 2)
    orphans = crashed_read_only_orphans(crashed)
    assert collect_orphan_shards(leader_ctx, leadership.fence, grace_seconds=3600) == []
    known: set[str] = set()
    collected = collect_orphan_shards(
        leader_ctx, leadership.fence, grace_seconds=0, known_finalized=known
    )
    assert sorted(collected) == orphans
    assert set(orphans) <= set(leader_ctx.consensus.children(FINALIZE_KEY))
    assert all(leader_ctx.shard(s).state().sealed for s in orphans)
    catalog = read_catalog(leader_ctx.consensus)
    assert catalog is not None
    for shard_id in catalog[0].shard_ids():
        assert not leader_ctx.shard(shard_id).state().sealed
    assert set(finalize_pending(leader_ctx, leadership.fence, lease_timeout=5)) == set(orphans)
    assert all(leader_ctx.shard(s).state().is_tombstone for s in orphans)
    assert (
        collect_orphan_shards(leader_ctx, leadership.fence, grace_seconds=0, known_finalized=known)
        == []
    )
    assert set(orphans) <= known
    # The crashed process's release restarts and is promoted as if nothing had happened.
    restarted = env.ctx(releases["0.11.0"], 2)
    check = check_read_only(restarted)
    assert not set(check.replacement_shards.values()) & set(orphans)
    migrate_as_leader(restarted, env.lead(restarted))
    catalog = read_catalog(restarted.consensus)
    assert catalog is not None and catalog[0].version == "0.11.0"


@pytest.mark.parametrize("moment", ["after-creation", "inside-the-append"])
def test_no_entry_names_a_shard_collected_before_its_entry_landed(
    env: Env, releases: dict[str, Release], monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    """The race the append guards close: the leader collects a read-only process's fresh
    shards between their creation and the entry append (right after creation, or after the
    append read their versions). The append then fails, the process creates new shards, and
    every entry names a live, unsealed shard."""
    leader_ctx = env.ctx(releases["0.10.0"], 1)
    leadership = env.lead(leader_ctx)
    migrate_as_leader(leader_ctx, leadership)
    collected: list[str] = []

    def collect_once() -> None:
        if not collected:
            collected.extend(collect_orphan_shards(leader_ctx, leadership.fence, grace_seconds=0))

    if moment == "after-creation":
        create = MigrationShard._create_shards

        def create_then_collect(self: MigrationShard, *args: Any) -> None:
            create(self, *args)
            collect_once()

        monkeypatch.setattr(MigrationShard, "_create_shards", create_then_collect)
    else:
        cas = Shard.cas

        def collect_then_cas(self: Shard, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("guards") or (len(args) > 3 and args[3]):  # the guarded entry append
                collect_once()
            return cas(self, *args, **kwargs)

        monkeypatch.setattr(Shard, "cas", collect_then_cas)
    reader = env.ctx(releases["0.11.0"], 2)
    check = check_read_only(reader)
    assert collected, "the leader collected the fresh shards before their entries landed"
    named = set(check.replacement_shards.values())
    assert named and not named & set(collected)
    entries = MigrationShard(reader.consensus, env.blob).entries_for("0.11.0", 2)
    assert {e.shard_id for e in entries.values()} == named
    for shard_id in named:
        state = reader.shard(shard_id).state()
        assert not state.sealed and not state.finalized
    monkeypatch.undo()
    migrate_as_leader(reader, env.lead(reader))
    catalog = read_catalog(reader.consensus)
    assert catalog is not None and catalog[0].version == "0.11.0"


def test_orphan_collection_waits_while_another_process_is_checking(
    env: Env, releases: dict[str, Release]
) -> None:
    """A process in a state where it may hold shards it has not named yet defers collection."""
    leader_ctx = env.ctx(releases["0.10.0"], 1)
    leadership = env.lead(leader_ctx)
    migrate_as_leader(leader_ctx, leadership)
    orphans = crashed_read_only_orphans(env.ctx(releases["0.11.0"], 2), count=1)
    consensus = leader_ctx.consensus
    consensus.ensure(PROCESSES_KEY)
    node = f"{PROCESSES_KEY}/other"
    other = ProcessNode(
        id="other", version="0.11.0", deploy_generation=2, mode="read-only", state="checking"
    )
    consensus.commit([Create(node, other.encode(), ephemeral=True)])
    assert collect_orphan_shards(leader_ctx, leadership.fence, grace_seconds=0) == []
    ready = attrs.evolve(other, state="ready")
    consensus.commit([SetData(node, ready.encode(), -1)])
    assert collect_orphan_shards(leader_ctx, leadership.fence, grace_seconds=0) == orphans
