"""Exact upgrade paths against a real ZooKeeper and real Parquet blobs: a prepared shard is
reused only by a plan from the catalog it was made from, and a jump equals its steps.

Each test is one deterministic sequence of promotions, rollbacks and restarts of a read-only
process of a newer release, with the rows every collection must serve at its end.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.errors import PlanError
from catalog.migration import MigrationShard
from catalog.release import Builtin, Mechanism, Migration, Release, plan, validate
from orchestrator.migrate import MigrationContext, check_read_only, migrate_as_leader
from support.histories import History, random_history, seeds_from_environment
from support.migrations import (
    Env,
    append_as_release,
    bootstrap,
    collection_shard,
    read_as_release,
    upgrade,
)
from support.ported import materialize_history
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

Y = "mz_catalog.y"
X = "mz_catalog.x"
Y_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])
X_V1 = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("a", pa.string())])
X_V2 = pa.schema([*X_V1, pa.field("c", pa.string())])


def plus(amount: int) -> Any:
    def transform(batch: pa.RecordBatch) -> pa.RecordBatch:
        n = pc.add(batch.column("n"), amount)
        return pa.RecordBatch.from_arrays([batch.column("id"), n], schema=Y_SCHEMA)

    transform.__qualname__ = f"plus_{amount}".replace("-", "minus_")
    return transform


def upper_a(batch: pa.RecordBatch) -> pa.RecordBatch:
    """0.3.0's rewrite of ``x``: written against 0.2.0's schema (it reads ``c``)."""
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns["a"] = pc.utf8_upper(columns["a"])
    columns["c"] = pc.coalesce(columns["c"], pa.scalar("none"))
    return pa.RecordBatch.from_pydict(columns, schema=X_V2)


def builtin(name: str, gid: str, schema: pa.Schema) -> Builtin:
    return Builtin("mz_catalog", name, "table", gid, schema)


def instruction(version: str, name: str, mechanism: Mechanism, **fns: Any) -> Migration:
    return Migration(version, "mz_catalog", name, "table", mechanism, **fns)


def history(y2: Migration, y3: Migration) -> tuple[Release, Release, Release]:
    """0.1.0 with ``y``; 0.2.0 and 0.3.0 migrating it by ``y2`` and ``y3``."""
    v1 = Release("0.1.0", [builtin("y", "s1", Y_SCHEMA)])
    v2 = Release("0.2.0", v1.builtins, [y2], previous=v1)
    v3 = Release("0.3.0", v1.builtins, [y2, y3], previous=v2)
    return v1, v2, v3


@pytest.fixture
def env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> Iterator[Env]:
    made = Env(zk_client, zk_env.root, BlobStore.from_uri(str(tmp_path / "blob")))
    yield made
    made.close()


def rows(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return sorted(({"id": i, "n": n} for i, n in pairs), key=lambda r: r["id"])


def append_each(ctx: Any, name: str, pairs: list[tuple[str, int]]) -> None:
    """One append per row, as clients do (each moves the shard's upper by one)."""
    for row in rows(*pairs):
        append_as_release(ctx, name, [row])


def test_a_stale_read_only_copy_is_never_resumed_on_another_source(env: Env) -> None:
    """The sequence that lost acknowledged rows: 0.3.0 prepares while the catalog is at 0.1.0,
    0.2.0 is promoted and replaces ``y``, rows are acknowledged, then 0.3.0 restarts and is
    promoted. ``y`` serves exactly 0.2.0's rows, rewritten by 0.3.0, once each."""
    v1, v2, v3 = history(
        instruction("0.2.0", "y", Mechanism.REPLACEMENT),
        instruction("0.3.0", "y", Mechanism.REWRITE, transform=plus(100)),
    )
    first = bootstrap(env, v1)
    append_each(first, Y, [("old1", 1), ("old2", 2)])
    check_read_only(env.ctx(v3, 3))  # prepared from the catalog at 0.1.0
    second, _ = upgrade(env, v2, 2)
    append_each(second, Y, [("mid1", 11), ("mid2", 12), ("mid3", 13)])

    restarted = env.ctx(v3, 3)
    check_read_only(restarted)
    migrate_as_leader(restarted, env.lead(restarted))
    assert read_as_release(restarted, Y) == rows(("mid1", 111), ("mid2", 112), ("mid3", 113))


def test_a_replacement_prepared_before_a_rollback_is_not_reused_after_it(env: Env) -> None:
    """0.3.0 prepares from 0.2.0's catalog; 0.2.0 is rolled back (its rows carried back to
    0.1.0's shard), then 0.3.0 is promoted: the jump 0.1.0 -> 0.3.0 passes 0.2.0's replacement,
    so ``y`` starts empty, as 0.1.0 -> 0.2.0 -> 0.3.0 would; nothing of the stale copy shows."""
    identity = plus(0)
    v1, v2, v3 = history(
        instruction("0.2.0", "y", Mechanism.REPLACEMENT, inverse=identity),
        instruction("0.3.0", "y", Mechanism.REWRITE, transform=plus(100)),
    )
    first = bootstrap(env, v1)
    append_each(first, Y, [("old1", 1), ("old2", 2)])
    second, _ = upgrade(env, v2, 2, finalize_after=None)
    append_each(second, Y, [("mid1", 11), ("mid2", 12), ("mid3", 13)])
    stale = check_read_only(env.ctx(v3, 5))  # a copy of 0.2.0's shard, rewritten
    back, _ = upgrade(env, v1, 4, rollback_from=v2)
    assert read_as_release(back, Y) == rows(
        ("mid1", 11), ("mid2", 12), ("mid3", 13), ("old1", 1), ("old2", 2)
    )

    restarted = env.ctx(v3, 5)
    again = check_read_only(restarted)
    assert again.replacement_shards[("s1")] != stale.replacement_shards["s1"]
    assert again.plan is not None and again.plan.migrations[0].mechanism is Mechanism.REPLACEMENT
    result = migrate_as_leader(restarted, env.lead(restarted))
    assert read_as_release(restarted, Y) == []
    # The stale entry is retracted with the switch, and its shard queued for finalization.
    entries = MigrationShard(restarted.consensus, env.blob).entries()
    assert stale.replacement_shards["s1"] not in {e.shard_id for e in entries}
    assert stale.replacement_shards["s1"] in result.queued_for_finalization


def test_a_rewrite_copy_of_another_source_is_redone_not_resumed(env: Env) -> None:
    """0.3.0 copies 0.2.0's rewritten shard up to time 5; 0.2.0 is rolled back, so 0.1.0's
    shard is the source again, at time 3. Resuming would find the copy ahead of its source
    (the crash loop ``target-ahead``) or mix two sources' rows; the copy is made again from
    0.1.0's shard through both transforms."""
    v1, v2, v3 = history(
        instruction("0.2.0", "y", Mechanism.REWRITE, transform=plus(10), inverse=plus(-10)),
        instruction("0.3.0", "y", Mechanism.REWRITE, transform=plus(100)),
    )
    first = bootstrap(env, v1)
    append_each(first, Y, [("old1", 1), ("old2", 2)])
    second, _ = upgrade(env, v2, 2, finalize_after=None)
    append_each(second, Y, [("mid1", 21), ("mid2", 22), ("mid3", 23)])
    check_read_only(env.ctx(v3, 5))
    upgrade(env, v1, 4, rollback_from=v2)

    restarted = env.ctx(v3, 5)
    check_read_only(restarted)
    migrate_as_leader(restarted, env.lead(restarted))
    assert read_as_release(restarted, Y) == rows(
        ("mid1", 121), ("mid2", 122), ("mid3", 123), ("old1", 111), ("old2", 112)
    )


def test_a_jump_over_an_evolution_then_a_rewrite_equals_its_steps(
    env: Env, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """0.2.0 adds ``c`` by evolution, 0.3.0 rewrites ``x`` with a transform written against
    0.2.0's schema. The jump 0.1.0 -> 0.3.0 evolves the rows first, as the steps do."""
    v1 = Release("0.1.0", [builtin("x", "s2", X_V1)])
    evolution = instruction("0.2.0", "x", Mechanism.EVOLUTION)
    rewrite = instruction("0.3.0", "x", Mechanism.REWRITE, transform=upper_a)
    v2 = Release("0.2.0", [builtin("x", "s2", X_V2)], [evolution], previous=v1)
    v3 = Release("0.3.0", [builtin("x", "s2", X_V2)], [evolution, rewrite], previous=v2)
    planned = plan(v1, v3).migrations[0]
    assert planned.steps() == ["evolve to 0.3.0's input", "rewrite 0.3.0"]

    jumped = bootstrap(env, v1)
    append_as_release(jumped, X, [{"id": "x1", "a": "a"}, {"id": "x2", "a": None}])
    jump, _ = upgrade(env, v3, 2)

    steps_env = Env(zk_client, f"{zk_env.root}-steps", BlobStore.from_uri(str(tmp_path / "s")))
    try:
        first = bootstrap(steps_env, v1)
        append_as_release(first, X, [{"id": "x1", "a": "a"}, {"id": "x2", "a": None}])
        upgrade(steps_env, v2, 2)
        step, _ = upgrade(steps_env, v3, 3)
        assert read_as_release(jump, X) == read_as_release(step, X) == [
            {"id": "x1", "a": "A", "c": "none"},
            {"id": "x2", "a": None, "c": "none"},
        ]
    finally:
        steps_env.close()
        zk_client.delete(f"{zk_env.root}-steps", recursive=True)

    # Without the release before the rewrite, the schema its transform takes is unknown: the
    # path is refused before any write, never run on rows of another schema.
    orphan = Release("0.3.0", [builtin("x", "s2", X_V2)], [evolution, rewrite])
    with pytest.raises(PlanError) as refused:
        plan(v1, orphan)
    assert refused.value.details["reason"] == "rewrite-input-unknown"
    assert "previous=PREVIOUS" in refused.value.details["suggestion"]


# -- the differential test: a jump equals its steps ----------------------------------------------

#: Seeds of ``make test``; ``make soak`` runs many (``TEST_PATH_SEEDS=1-50``).
PATH_SEEDS = seeds_from_environment("TEST_PATH_SEEDS", default=(3, 17, 29))


def _result(ctx: MigrationContext, release: Release) -> dict[str, Any]:
    """Every collection of ``release`` as it reads it: its shard's live schema and its rows."""
    out: dict[str, Any] = {}
    for b in release.builtins:
        schema = collection_shard(ctx, b.name).state().live_schema.remove_metadata()
        out[b.name] = (str(schema), read_as_release(ctx, b.name, key=b.schema.names[0]))
    return out


def _step_to(env: Env, history: History, last: int, *, engine: str = "arrow") -> MigrationContext:
    """The history's releases up to index ``last``, one upgrade each, with every version's rows."""
    ctx = bootstrap(env, history.releases[0])
    for k, release in enumerate(history.releases[: last + 1]):
        if k:
            ctx, _ = upgrade(env, release, k + 1, engine=engine)
        for name, rows_ in history.rows[str(release.version)].items():
            append_as_release(ctx, name, rows_)
    return ctx


def _jumps_equal_steps(
    history: History,
    source: int,
    jumps: list[tuple[int, str]],
    new_env: Callable[[str], Env],
) -> None:
    """Step ``history`` from release ``source`` (rows appended up to it) through every later
    release; jump from ``source`` to each ``(target, engine)`` of ``jumps`` in an environment of
    its own: the same rows and schemas."""
    stepped = new_env(f"steps-from-{source}")
    _step_to(stepped, history, source)
    expected: dict[int, dict[str, Any]] = {}
    for k in range(source + 1, len(history.releases)):
        ctx, _ = upgrade(stepped, history.releases[k], k + 1)
        expected[k] = _result(ctx, history.releases[k])
    for j, engine in jumps:
        env = new_env(f"jump-{source}-{j}-{engine}")
        _step_to(env, history, source)
        jumped, _ = upgrade(env, history.releases[j], j + 1, engine=engine)
        where = f"seed {history.seed}: {history.releases[source].version} -> "
        where += f"{history.releases[j].version} on {engine}"
        assert _result(jumped, history.releases[j]) == expected[j], where


@pytest.fixture
def environments(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> Iterator[Callable[[str], Env]]:
    """Environments of their own below the test's, closed afterwards."""
    made: list[Env] = []

    def new_env(name: str) -> Env:
        env = Env(zk_client, f"{zk_env.root}/{name}", BlobStore.from_uri(str(tmp_path / name)))
        made.append(env)
        return env

    yield new_env
    for env in made:
        env.close()


@pytest.mark.parametrize("seed", PATH_SEEDS)
def test_every_jump_equals_its_steps(
    seed: int, environments: Callable[[str], Env], spark: Any
) -> None:
    """A random history stepped from its source ``i`` to every later release, against a jump
    from ``i`` to each ``j`` on the arrow engine (and to the last on Spark): the same rows and
    schemas, whatever the mechanisms in between. Replay a failure with ``TEST_PATH_SEEDS``."""
    history = random_history(seed)
    print(history.describe())
    source = random.Random(seed).randrange(0, len(history.releases) - 2)
    last = len(history.releases) - 1
    jumps = [(j, "arrow") for j in range(source + 2, len(history.releases))]
    _jumps_equal_steps(history, source, [*jumps, (last, "spark")], environments)


def test_materialize_migrations_replayed(environments: Callable[[str], Env]) -> None:
    """Materialize's real MIGRATIONS list, 0.147.0 to 26.36.0-dev.0 with its prereleases and
    its tables turned materialized views: every path validates (the conversions' rule), and
    jumps from the smallest supported version equal the steps: over an evolution, past
    prereleases, across the conversions of 26.34.0-dev.0, and to the end."""
    history = materialize_history()
    assert validate(list(history.releases)).ok
    versions = [str(r.version) for r in history.releases]
    targets = ["0.159.0", "26.19.0-dev.0", "26.34.0-dev.0", "26.36.0-dev.0"]
    jumps = [(versions.index(v), "arrow") for v in targets]
    _jumps_equal_steps(history, 0, jumps, environments)


def test_an_evolution_of_a_builtin_new_since_the_source_is_no_step(env: Env) -> None:
    """Materialize's SQL-713: ``new_table`` appears at 0.2.0 and is evolved at 0.3.0; from
    0.1.0 the jump creates it at 0.3.0's schema (its evolution has nothing to evolve), while
    ``old_table``, which has a shard, is evolved. Read-only and leader alike."""
    old_v1 = pa.schema([pa.field("a", pa.string(), nullable=False)])
    old_v2 = pa.schema([*old_v1, pa.field("b", pa.string())])
    new_v2 = pa.schema([pa.field("a", pa.string(), nullable=False)])
    new_v3 = pa.schema([*new_v2, pa.field("c", pa.int64())])
    v1 = Release("0.1.0", [builtin("old_table", "s1", old_v1)])
    steps = [instruction("0.2.0", "old_table", Mechanism.EVOLUTION)]
    v2 = Release("0.2.0", [builtin("old_table", "s1", old_v2), builtin("new_table", "s2", new_v2)],
                 steps, previous=v1)  # fmt: skip
    steps = [*steps, instruction("0.3.0", "new_table", Mechanism.EVOLUTION)]
    v3 = Release("0.3.0", [builtin("old_table", "s1", old_v2), builtin("new_table", "s2", new_v3)],
                 steps, previous=v2)  # fmt: skip
    first = bootstrap(env, v1)
    append_as_release(first, "mz_catalog.old_table", [{"a": "kept"}])
    checked = check_read_only(env.ctx(v3, 3))
    assert checked.plan is not None
    assert [b.name for b in checked.plan.new_builtins] == ["mz_catalog.new_table"]
    assert [(m.name, m.mechanism) for m in checked.plan.migrations] == [
        ("mz_catalog.old_table", Mechanism.EVOLUTION)
    ]
    ctx, _ = upgrade(env, v3, 3)
    assert read_as_release(ctx, "mz_catalog.old_table", key="a") == [{"a": "kept", "b": None}]
    assert collection_shard(ctx, "mz_catalog.new_table").state().live_schema.equals(new_v3)
