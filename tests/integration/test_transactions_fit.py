"""Transactions that fit ZooKeeper's request limit, against a real ZooKeeper 3.9.

Registering schemas on many shards whose states list hundreds of batches is the write that broke
at scale: one multi of whole shard states passed ``jute.maxbuffer`` (1 MiB), the server dropped
the connection ("Len error") and every resend failed the same way. Here 60 evolved shards of 500
inline batch entries (about 30 KB of state each, 1.8 MB together) are upgraded by a real leader:
stored whole (as earlier releases wrote them), the transactions are cut under the budget; split
(head and body, as states are stored now), the registrations write the heads alone.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Create, SetData
from catalog.environment import read_catalog
from catalog.errors import ConnectionLostError, TransactionTooLargeError
from catalog.release import Builtin, Mechanism, Migration, Release
from catalog.shard import BatchRef, body_key, change_ops, read_states, shard_key
from orchestrator.migrate import check_read_only, migrate_as_leader
from orchestrator.testing.zkserver import EmbeddedZooKeeper
from orchestrator.zookeeper.clients import close, connect
from support.migrations import Env, bootstrap
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

COLLECTIONS = 60
BATCHES = 500  # the roll-up threshold: the most a state lists inline
V1 = pa.schema(
    [pa.field("id", pa.int64(), nullable=False)]
    + [pa.field(f"c{i}", pa.string()) for i in range(14)]
)
V2 = pa.schema([*V1, pa.field("added", pa.string())])


def release(version: str, schema: pa.Schema, evolves: bool) -> Release:
    builtins = [
        Builtin("mz_catalog", f"t{i}", "table", f"s{i}", schema) for i in range(COLLECTIONS)
    ]
    migrations = [
        Migration("1.1.0", "mz_catalog", f"t{i}", "table", Mechanism.EVOLUTION)
        for i in range(COLLECTIONS)
    ]
    return Release(version=version, builtins=builtins, migrations=migrations if evolves else [])


def fill(consensus: Consensus, shard_id: str, split: bool) -> int:
    """Give the shard's state ``BATCHES`` inline entries (the registration never reads these
    batches' data, so their blobs are not written); the bytes they are stored in. ``split``:
    as this release stores them (a head and a body), else as one whole state (as earlier
    releases wrote them, and the one form a registration rewrites whole)."""
    state = read_states(consensus, [shard_id])[shard_id]
    assert state is not None
    refs = tuple(BatchRef(f"{i:032x}", 0, 10, i, i + 1) for i in range(BATCHES))
    full = attrs.evolve(state, batches=refs, upper=BATCHES)
    if split:
        ops, _ = change_ops(state, full)
        consensus.commit(ops)
        return sum(len(op.value) for op in ops if isinstance(op, (SetData, Create)))
    value = full.encode()
    consensus.commit([SetData(shard_key(shard_id), value, state.version)])
    return len(value)


@pytest.mark.parametrize("split", [True, False], ids=["split", "whole"])
def test_registration_on_many_large_shards_is_planned_under_the_request_limit(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, split: bool
) -> None:
    env = Env(zk_client, zk_env.root, BlobStore.from_uri(str(tmp_path / "blob")))
    try:
        old = bootstrap(env, release("1.0.0", V1, evolves=False))
        found = read_catalog(old.consensus)
        assert found is not None
        shard_ids = [ref.shard_id for ref in found[0].collections.values()]
        sizes = [fill(old.consensus, shard_id, split) for shard_id in shard_ids]
        assert sum(sizes) > 1_048_575, "together the states pass jute.maxbuffer"
        bodies = old.consensus.get_many([body_key(s) for s in shard_ids])
        new = env.ctx(release("1.1.0", V2, evolves=True), 2)
        check_read_only(new)
        result = migrate_as_leader(new, env.lead(new))
        assert len(result.evolved) == COLLECTIONS
        switched = read_catalog(new.consensus)
        assert switched is not None and switched[0].version == "1.1.0"
        for ref in switched[0].collections.values():
            state = new.shard(ref.shard_id).state()
            assert state.live_schema.equals(V2) and len(state.batches) == BATCHES
            assert state.split == split
        if split:  # the registrations wrote the heads alone: no body was rewritten
            assert new.consensus.get_many([body_key(s) for s in shard_ids]) == bodies
    finally:
        env.close()


def test_a_transaction_over_the_budget_is_refused_before_it_is_sent(
    zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """Not an unknown outcome: a clear error naming the largest key, and nothing written."""
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure("big")
    ops = [SetData("big", b"x" * 400_000, -1) for _ in range(3)]
    with pytest.raises(TransactionTooLargeError) as caught:
        consensus.commit(ops)
    assert caught.value.details["key"] == "big" and caught.value.details["ops"] == 3
    assert caught.value.details["size"] > consensus.max_request_bytes
    found = consensus.get("big")
    assert found is not None and found.version == 0
    assert zk_client.connected


def test_a_server_with_a_smaller_jute_maxbuffer_is_named_not_resent_for_ever(
    tmp_path: Path,
) -> None:
    """A server running with jute.maxbuffer=100000 while this process budgets 1 MiB: a 200 KB
    write is dropped ("Len error"). The first drop is an unknown outcome; the resend, dropped
    the same way while the server answers small requests, is refused naming
    CATALOG_UPGRADE_JUTE_MAXBUFFER. Nothing was written and smaller writes still work."""
    with EmbeddedZooKeeper(
        data_dir=tmp_path / "zk", jvm_options=("-Djute.maxbuffer=100000",)
    ) as server:
        client = connect(server.hosts, session_timeout=10.0)
        try:
            consensus = Consensus(client, "/small-limit")
            consensus.ensure()
            big = [Create("big", b"x" * 200_000)]
            with pytest.raises(ConnectionLostError):
                consensus.commit(big)
            with pytest.raises(TransactionTooLargeError) as caught:
                consensus.commit(big)
            assert caught.value.details["reason"] == "len-error"
            assert "CATALOG_UPGRADE_JUTE_MAXBUFFER" in caught.value.message
            assert consensus.get("big") is None
            consensus.commit([Create("small", b"y" * 1000)])
            assert consensus.get("small") is not None
        finally:
            close(client)
