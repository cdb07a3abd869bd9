"""Bounded durable state at the target scale, against a real ZooKeeper: the catalog keeps the
release schemas of 1,000 collections without growing past its value limit."""

from __future__ import annotations

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.consensus import MAX_VALUE_BYTES, Consensus, Delete
from catalog.environment import (
    CATALOG_KEY,
    CONTAINER_KEYS,
    SCHEMAS_KEY,
    CatalogState,
    CollectionRef,
    catalog_write_op,
    kept_schema_ops,
    read_catalog,
    retired_schema_ops,
    schema_key,
)
from catalog.errors import CorruptStateError
from catalog.schema import fingerprint
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

COLLECTIONS = 1000


def schema(i: int) -> pa.Schema:
    return pa.schema([pa.field(f"c{i}_{j}", pa.string()) for j in range(30)])


def catalog(keep: bool) -> CatalogState:
    refs = {}
    for i in range(COLLECTIONS):
        s = schema(i)
        refs[f"s{i}"] = CollectionRef(
            f"s{i}", f"mz_catalog.t{i}", f"shard{i}", fingerprint(s), s if keep else None
        )
    return CatalogState("1.0.0", 1, "file:///blob", refs)


def test_a_thousand_kept_schemas_live_beside_a_small_catalog(
    zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure(*CONTAINER_KEYS)
    state = catalog(keep=True)
    inline = sum(len(s.serialize()) for s in (schema(i) for i in range(COLLECTIONS)))
    assert inline > MAX_VALUE_BYTES, "kept inline, the schemas alone pass the value limit"
    consensus.commit_chunked(kept_schema_ops(consensus, state))
    consensus.commit([catalog_write_op(state, -1)])
    found = consensus.get(CATALOG_KEY)
    assert found is not None and len(found.value) < 200_000
    read = read_catalog(consensus)
    assert read is not None
    for gid, ref in read[0].collections.items():
        assert ref.schema is not None and ref.schema.equals(state.collections[gid].schema)
    assert kept_schema_ops(consensus, state) == [], "written once"

    # A schema node gone under an unchanged catalog is corrupt state naming it.
    consensus.commit([Delete(schema_key(state.collections["s7"].fingerprint))])
    with pytest.raises(CorruptStateError) as caught:
        read_catalog(consensus)
    assert caught.value.key == schema_key(state.collections["s7"].fingerprint)

    # A catalog that keeps none retires them all.
    plain = catalog(keep=False)
    consensus.commit([catalog_write_op(plain, read[1])])
    consensus.commit_chunked(retired_schema_ops(consensus, plain))
    assert consensus.children(SCHEMAS_KEY) == []
    again = read_catalog(consensus)
    assert again is not None and all(r.schema is None for r in again[0].collections.values())
