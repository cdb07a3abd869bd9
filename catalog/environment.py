"""The environment's durable layout in ZooKeeper and the catalog state value.

Layout below ``/catalog-upgrade/<env>`` (keys are relative to that root)::

    catalog                 CatalogState JSON: durable version Vc, generation Gc, blob URI, and
                            every collection's GlobalId -> (name, shard id, fingerprint, and
                            the release's schema when the shard registered a wider one)
    epoch                   {"epoch", "leader", "deploy_generation", "session"}; the fencing token.
                            Every leader write carries Check(epoch, version-at-takeover).
    promotion               {"deploy_generation"}: the promotion target
    election/<gen>/n_...    ephemeral sequential election candidates of generation <gen>
    processes/<id>          ephemeral live status of each process (mode, state, plan, error, ...)
    shards/<shard_id>       a shard's state (catalog.shard); leases below it are ephemeral
    finalize/<shard_id>     a shard queued for finalization (created with the catalog switch)
    events/e-<seq>          persistent, sequential upgrade events (bootstrap, ready, promoted, ...)

The migration shard is an ordinary shard with the well-known id ``MIGRATION_SHARD_ID``.
Values are compact JSON; at 1,000 collections the catalog value is about 150 KB.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import attrs
import pyarrow as pa

from catalog.consensus import Consensus, Create, Op, SetData, decode_json, decoding, encode_json
from catalog.schema import schema_from_bytes, schema_to_bytes

CATALOG_KEY = "catalog"
EPOCH_KEY = "epoch"
PROMOTION_KEY = "promotion"
ELECTION_KEY = "election"
PROCESSES_KEY = "processes"
SHARDS_KEY = "shards"
FINALIZE_KEY = "finalize"
EVENTS_KEY = "events"
MIGRATION_SHARD_ID = "migration"

CONTAINER_KEYS = (ELECTION_KEY, PROCESSES_KEY, SHARDS_KEY, FINALIZE_KEY, EVENTS_KEY)


@attrs.frozen
class CollectionRef:
    """Where one builtin collection lives now.

    ``schema`` is the release's schema, kept only when it is not registered as such on the
    shard: the leader then registered a wider schema (its own plus fields an aborted newer
    leader had added, which must survive for that release), and plans start from this one.
    """

    global_id: str
    name: str  # "schema_name.object_name"
    shard_id: str
    fingerprint: str
    schema: pa.Schema | None = attrs.field(default=None, eq=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "shard_id": self.shard_id,
            "fingerprint": self.fingerprint,
        }
        if self.schema is not None:
            out["schema"] = base64.b64encode(schema_to_bytes(self.schema)).decode()
        return out

    @classmethod
    def from_json(cls, global_id: str, data: Mapping[str, Any]) -> CollectionRef:
        encoded = data.get("schema")
        return cls(
            global_id=global_id,
            name=data["name"],
            shard_id=data["shard_id"],
            fingerprint=data["fingerprint"],
            schema=None if encoded is None else schema_from_bytes(base64.b64decode(encoded)),
        )


@attrs.frozen(hash=False)
class CatalogState:
    """The durable catalog: version ``Vc``, generation ``Gc`` and the collection map."""

    version: str
    deploy_generation: int
    blob_uri: str
    collections: Mapping[str, CollectionRef] = attrs.field(factory=dict)
    updated_at: float = 0.0

    def by_name(self) -> dict[str, CollectionRef]:
        return {ref.name: ref for ref in self.collections.values()}

    def shard_ids(self) -> set[str]:
        return {ref.shard_id for ref in self.collections.values()}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "blob_uri": self.blob_uri,
            "updated_at": self.updated_at,
            "collections": {gid: ref.to_json() for gid, ref in sorted(self.collections.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CatalogState:
        return cls(
            version=data["version"],
            deploy_generation=int(data["deploy_generation"]),
            blob_uri=data["blob_uri"],
            updated_at=float(data.get("updated_at", 0.0)),
            collections={
                gid: CollectionRef.from_json(gid, ref)
                for gid, ref in data.get("collections", {}).items()
            },
        )

    def encode(self) -> bytes:
        return encode_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, key: str = CATALOG_KEY) -> CatalogState:
        """The catalog stored at ``key``; CorruptStateError naming it when it is not one."""
        value = decode_json(data, key)
        with decoding(key, "catalog"):
            if not isinstance(value, Mapping):
                raise TypeError(f"expected an object, found {type(value).__name__}")
            return cls.from_json(value)


def read_catalog(consensus: Consensus) -> tuple[CatalogState, int] | None:
    """The catalog state and its znode version, or None for an environment not bootstrapped."""
    found = consensus.get(CATALOG_KEY)
    if found is None or not found.value:
        return None
    return CatalogState.decode(found.value), found.version


def catalog_write_op(state: CatalogState, expected_version: int) -> Op:
    """The op that writes ``state`` over the version read (-1: the bootstrap create)."""
    if expected_version < 0:
        return Create(CATALOG_KEY, state.encode())
    return SetData(CATALOG_KEY, state.encode(), expected_version)
