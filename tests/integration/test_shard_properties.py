"""Property: random appends, evolutions, since moves and compactions never change a read.

Every example drives one fresh shard on the real ZooKeeper with real Parquet files, and checks
each snapshot in ``[since, upper)`` against a plain-Python model of the updates (rows projected
to the latest schema, diffs summed, zeros dropped), before and after every compaction. Columns
include a struct and a list, so nested consolidation is exercised too.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import CONTAINER_KEYS
from catalog.shard import Shard, new_shard_id
from catalog.shard.compact import compact
from catalog.shard.listing import BatchRef
from catalog.shard.read import Held, snapshot_after
from support.shards import contents, updates
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

STRUCT = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
BASE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("tag", pa.string()),
        pa.field("st", STRUCT),
        pa.field("ls", pa.list_(pa.int64())),
    ]
)
VALUES: dict[str, list[Any]] = {
    "id": [0, 1, 2],
    "tag": [None, "a", "b"],
    "st": [None, {"a": 0, "b": "x"}, {"a": 1, "b": None}, {"a": None, "b": None}],
    "ls": [None, [], [None], [1], [1, 2]],
}
ADDED_VALUES = [None, "v"]


@attrs.define
class Model:
    """What the shard must contain: every update, with the row as written."""

    schema: pa.Schema
    updates: list[tuple[dict[str, Any], int, int]] = attrs.Factory(list)
    upper: int = 0
    since: int = 0
    added: int = 0

    def read(self, as_of: int) -> dict[Any, int]:
        out: dict[Any, int] = {}
        for row, ts, diff in self.updates:
            if ts <= as_of:
                key = tuple(_hashable(row.get(name)) for name in self.schema.names)
                out[key] = out.get(key, 0) + diff
        return {k: v for k, v in out.items() if v}


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def values_of(name: str) -> list[Any]:
    return VALUES.get(name, ADDED_VALUES)


@pytest.fixture
def env(zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path) -> tuple[Consensus, BlobStore]:
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure(*CONTAINER_KEYS)
    return consensus, BlobStore.from_uri(str(tmp_path / "blobs"))


def histories(examples: int) -> Any:
    """Hypothesis settings of these tests: ``examples`` shards each, no deadline (real
    ZooKeeper and Parquet), a function-scoped environment shared by the examples."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def draw_rows(data: st.DataObject, schema: pa.Schema, count: int) -> list[dict[str, Any]]:
    return [
        {f.name: data.draw(st.sampled_from(values_of(f.name))) for f in schema}
        for _ in range(count)
    ]


def check_built_on(shard: Shard, model: Model, held: Held | None) -> Held | None:
    """The latest snapshot built on ``held`` (:func:`snapshot_after`), when it can be, is the
    whole one (the model's too, while the latest time is above ``since``); what to hold for the
    next step."""
    state = shard.state()
    if state.upper == 0:
        return None
    whole = shard.snapshot(state=state)
    built = None if held is None else snapshot_after(shard, state, held)
    if built is not None:
        assert contents(built) == contents(whole), "built on the held snapshot"
        if model.since < model.upper:
            assert contents(built) == model.read(model.upper - 1)
    return Held.of(state, built if built is not None else whole)


def check_reads(shard: Shard, model: Model) -> dict[int, dict[Any, int]]:
    reads = {}
    for as_of in range(model.since, model.upper):
        got = contents(shard.snapshot(as_of))
        assert got == model.read(as_of), f"as_of {as_of}"
        reads[as_of] = got
    return reads


@histories(40)
@given(data=st.data())
def test_random_histories_read_like_the_model(
    env: tuple[Consensus, BlobStore], data: st.DataObject
) -> None:
    """Snapshots equal the model after every step, and compaction changes none of them; so
    does a latest snapshot built on the one before (snapshot_after), whenever it can be."""
    consensus, blob = env
    shard = Shard(consensus, blob, new_shard_id(), rollup_threshold=3, max_rollups=2)
    shard.create(BASE)
    model = Model(schema=BASE)
    held: Held | None = None
    steps = data.draw(
        st.lists(
            st.sampled_from(["append", "append", "evolve", "since", "compact", "merge"]),
            min_size=1,
            max_size=9,
        ),
        label="steps",
    )
    for step in steps:
        if step == "append":
            width = data.draw(st.integers(1, 3), label="width")
            count = data.draw(st.integers(0, 4), label="rows")
            rows = draw_rows(data, model.schema, count)
            times = [data.draw(st.integers(model.upper, model.upper + width - 1)) for _ in rows]
            diffs = [data.draw(st.sampled_from([1, 1, -1, 2])) for _ in rows]
            batch = updates(model.schema, rows, times, diffs)
            result = shard.compare_and_append(batch, model.upper, model.upper + width)
            assert result.ok
            model.updates.extend(zip(rows, times, diffs, strict=True))
            model.upper += width
        elif step == "evolve":
            fields = list(model.schema)
            kind = data.draw(st.sampled_from(["add", "delete", "relax"]), label="evolution")
            if kind == "add":
                model.added += 1
                fields.append(pa.field(f"f{model.added}", pa.string()))
            elif kind == "delete" and len(fields) > 1:
                victim = data.draw(st.sampled_from([f.name for f in fields[1:]]))
                fields = [f for f in fields if f.name != victim]
            else:
                fields = [f.with_nullable(True) if f.name == "id" else f for f in fields]
            schema = pa.schema(fields)
            evolved = shard.compare_and_evolve_schema(shard.state().schema_id, schema)
            assert evolved.ok
            model.schema = schema
        elif step == "since":
            since = data.draw(st.integers(model.since, model.upper), label="since")
            shard.advance_since(since)
            model.since = since
        elif step == "merge":  # as the write path merges: a run of batches, times kept
            before = check_reads(shard, model)

            def run(batches: Sequence[BatchRef]) -> Sequence[BatchRef]:
                ordered = sorted(batches, key=lambda b: b.upper)
                first = data.draw(st.integers(0, len(ordered)), label="run from")
                return ordered[first : data.draw(st.integers(first, len(ordered)), label="to")]

            compact(shard, select=run, consolidate=False)
            assert check_reads(shard, model) == before
        else:
            before = check_reads(shard, model)
            assert shard.compact().applied
            assert shard.state().batch_count <= 1
            assert check_reads(shard, model) == before
        built_on = check_built_on(shard, model, held)
        if held is None or data.draw(st.booleans(), label="hold the new snapshot"):
            held = built_on  # else the older one stays, for merges across its upper
    check_reads(shard, model)
    # What compactions and rollup merges left to the garbage collection goes, and nothing
    # referenced does: the reads stay the model's.
    shard.gc_orphans(grace_seconds=0)
    assert shard.gc_orphans(grace_seconds=0) == []
    check_reads(Shard(shard.consensus, shard.blob, shard.shard_id), model)


@histories(25)
@given(data=st.data())
def test_a_snapshot_built_across_merges_is_the_whole_one(
    env: tuple[Consensus, BlobStore], data: st.DataObject
) -> None:
    """Appends of new rows (now and then a retraction), merges of random runs as the write
    path makes them, compactions and ``since`` moves, in any order: a latest snapshot built
    on any snapshot taken before (snapshot_after), whenever it can be, is the whole one, also
    when a merge took rows from both sides of that snapshot's upper."""
    consensus, blob = env
    shard = Shard(consensus, blob, new_shard_id(), rollup_threshold=3, max_rollups=2)
    shard.create(BASE)
    upper, since, ids = 0, 0, itertools.count()
    written: list[int] = []
    kept: list[Held] = []
    steps = data.draw(
        st.lists(st.sampled_from(["append"] * 3 + ["merge", "compact", "since"]), min_size=4,
                 max_size=14),
        label="steps",
    )  # fmt: skip
    for step in steps:
        if step == "append":
            width = data.draw(st.integers(1, 2), label="width")
            new = [next(ids) for _ in range(data.draw(st.integers(1, 3), label="rows"))]
            retract = bool(written) and data.draw(st.booleans(), label="retract")
            gone = written[:1] if retract else []
            rows = [{"id": i, "tag": "a", "st": None, "ls": [i]} for i in [*new, *gone]]
            times = [data.draw(st.integers(upper, upper + width - 1)) for _ in rows]
            diffs = [1] * len(new) + [-1] * len(gone)
            batch = updates(BASE, rows, times, diffs)
            assert shard.compare_and_append(batch, upper, upper + width).ok
            written = [*written[len(gone) :], *new]
            upper += width
        elif step == "merge":

            def run(batches: Sequence[BatchRef]) -> Sequence[BatchRef]:
                ordered = sorted(batches, key=lambda b: b.upper)
                first = data.draw(st.integers(0, len(ordered)), label="run from")
                return ordered[first : data.draw(st.integers(first, len(ordered)), label="to")]

            compact(shard, select=run, consolidate=data.draw(st.booleans(), label="consolidate"))
        elif step == "compact":
            shard.compact()
        else:
            since = data.draw(st.integers(since, upper), label="since")
            shard.advance_since(since)
        state = shard.state()
        if state.upper == 0:
            continue
        whole = shard.snapshot(state=state)
        for held in kept:
            built = snapshot_after(shard, state, held)
            if built is not None:
                assert contents(built) == contents(whole), (held.upper, state.upper)
        found = Held.of(state, whole)
        if found is not None:
            kept.append(found)


class MergeCrash(Exception):
    """A merge killed at one of its steps (raised by :class:`CrashingBlob`)."""


class CrashingBlob(BlobStore):
    """A real BlobStore that, armed, dies right after its next batch write: a merge killed
    between writing its output and committing it."""

    armed: bool = False

    def put_batch(self, key: str, table: pa.Table | pa.RecordBatch) -> None:
        super().put_batch(key, table)
        if self.armed:
            self.armed = False
            raise MergeCrash(key)


@histories(30)
@given(data=st.data())
def test_commits_merges_and_crashed_merges_read_like_the_commits_in_order(
    env: tuple[Consensus, BlobStore], data: st.DataObject
) -> None:
    """Any interleaving of commits, write-path merges (catalog.shard.merges), merges killed
    before reading, after writing their output and after committing it, and reads: every
    read at every time equals the commits applied in order, and a killed merge leaves only an
    unreferenced blob."""
    consensus, plain = env
    blob = CrashingBlob(filesystem=plain.filesystem, root=plain.root, uri=plain.uri)
    shard = Shard(consensus, blob, new_shard_id(), rollup_threshold=3, max_rollups=2)
    shard.create(BASE)
    model = Model(schema=BASE)
    steps = data.draw(
        st.lists(
            st.sampled_from(["commit", "commit", "commit", "merge", "crash", "read"]),
            min_size=1,
            max_size=16,
        ),
        label="steps",
    )
    for step in steps:
        if step == "commit":
            count = data.draw(st.integers(1, 3), label="rows")
            rows = draw_rows(data, model.schema, count)
            diffs = [data.draw(st.sampled_from([1, 1, -1])) for _ in rows]
            batch = updates(model.schema, rows, [model.upper] * count, diffs)
            assert shard.compare_and_append(batch, model.upper, model.upper + 1).ok
            model.updates.extend(zip(rows, [model.upper] * count, diffs, strict=True))
            model.upper += 1
        elif step == "merge":
            listed = shard.state().batch_count
            result = shard.merge()
            assert not result.applied or result.state.batch_count < listed
        elif step == "crash":
            state = shard.state()
            blob.armed = True
            with contextlib.suppress(MergeCrash):  # killed between its output and its commit
                shard.merge()
            blob.armed = False
            assert shard.state().batches == state.batches  # nothing committed
        else:
            check_reads(shard, model)
    check_reads(shard, model)
    # The killed merges' outputs are unreferenced blobs: collected, and reads unchanged.
    shard.gc_orphans(grace_seconds=0)
    check_reads(Shard(shard.consensus, plain, shard.shard_id), model)



def test_a_latest_snapshot_is_built_on_the_one_before_only_over_appends_of_new_rows(
    env: tuple[Consensus, BlobStore],
) -> None:
    """Appends of rows unlike the held ones: built from the rows written since alone, whatever
    merged them with the held ones. A row equal to a held one, a ``since`` at the held time or
    an evolution: None (the whole snapshot is read)."""
    consensus, blob = env
    shard = Shard(consensus, blob, new_shard_id())
    shard.create(BASE)
    model = Model(schema=BASE)

    def append(ids: list[int]) -> None:
        rows = [{"id": i, "tag": "a", "st": None, "ls": [i]} for i in ids]
        batch = updates(BASE, rows, [model.upper] * len(rows), [1] * len(rows))
        assert shard.compare_and_append(batch, model.upper, model.upper + 1).ok
        model.updates.extend((row, model.upper, 1) for row in rows)
        model.upper += 1

    def hold(table: pa.Table) -> Held:
        held = Held.of(shard.state(), table)
        assert held is not None
        return held

    append([0, 1])
    held = hold(shard.snapshot())
    append([2])
    append([3, 4])
    built = snapshot_after(shard, shard.state(), held)
    assert built is not None and contents(built) == model.read(model.upper - 1)
    held = hold(built)
    append([4])  # the same row again: its diff becomes 2, which only consolidation says
    assert snapshot_after(shard, shard.state(), held) is None
    held = hold(shard.snapshot())
    assert contents(shard.snapshot()) == model.read(model.upper - 1)
    assert shard.compact().applied  # its batches merged into one, below its upper
    built = snapshot_after(shard, shard.state(), held)
    assert built is not None and contents(built) == model.read(model.upper - 1)
    held = hold(built)
    append([5])
    assert shard.compact().applied  # held rows and a newer one in one batch: cut at the upper
    built = snapshot_after(shard, shard.state(), held)
    assert built is not None and contents(built) == model.read(model.upper - 1)
    held = hold(built)
    shard.advance_since(model.upper)  # past the held time: a held row's time may move up
    append([6])
    assert shard.compact().applied
    assert snapshot_after(shard, shard.state(), held) is None
    held = hold(shard.snapshot())
    widened = pa.schema([*BASE, pa.field("f1", pa.string())])
    assert shard.compare_and_evolve_schema(shard.state().schema_id, widened).ok
    assert snapshot_after(shard, shard.state(), held) is None  # another schema
