"""The environment's durable layout in ZooKeeper and the catalog state value.

Layout below ``/catalog-upgrade/<env>`` (keys are relative to that root)::

    catalog                 CatalogState JSON: durable version Vc, generation Gc, blob URI, and
                            every collection's GlobalId -> (name, shard id, fingerprint, and
                            whether the release's schema is kept: the shard registered a wider
                            one)
    gc/clock, gc/<shard_id> blob garbage collection: ZooKeeper's clock, and each shard's
                            unreferenced blobs with the ZooKeeper time they were first seen
    schemas/<fingerprint>   a kept release schema, by content (so the catalog stays small
                            however many it keeps: ~1.3 KB each would pass the value limit)
    epoch                   {"epoch", "leader", "deploy_generation", "session"}; the fencing token.
                            Every leader write carries Check(epoch, version-at-takeover).
    promotion               {"deploy_generation"}: the promotion target
    election/<gen>/n_...    ephemeral sequential election candidates of generation <gen>
    processes/<id>          ephemeral live status of each process (mode, state, plan, error, ...)
    shards/<shard_id>       a shard's state (catalog.shard); leases below it are ephemeral
    finalize/<shard_id>     a shard queued for finalization (created with the catalog switch)
    pending                 the upgrade switched to but not finalized yet (catalog.pending):
                            the previous catalog, the replaced collections, the window
    events/e-<seq>          persistent, sequential upgrade events (bootstrap, ready, promoted, ...)

The migration shard is an ordinary shard with the well-known id ``MIGRATION_SHARD_ID``.
Values are compact JSON; at 1,000 collections the catalog value is about 150 KB.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Mapping
from typing import Any

import attrs
import pyarrow as pa

from catalog.consensus import (
    Consensus,
    Create,
    Delete,
    Op,
    SetData,
    Versioned,
    decode_json,
    decoding,
    encode_json,
)
from catalog.errors import CorruptStateError
from catalog.schema import schema_from_bytes, schema_to_bytes

CATALOG_KEY = "catalog"
EPOCH_KEY = "epoch"
PROMOTION_KEY = "promotion"
ELECTION_KEY = "election"
PROCESSES_KEY = "processes"
SHARDS_KEY = "shards"
FINALIZE_KEY = "finalize"
EVENTS_KEY = "events"
SCHEMAS_KEY = "schemas"
GC_KEY = "gc"
HISTORY_KEY = "history"
PENDING_KEY = "pending"
#: The operator's pace of each generation's long steps (orchestrator.pace).
PACE_KEY = "pace"
MIGRATION_SHARD_ID = "migration"

CONTAINER_KEYS = (
    ELECTION_KEY,
    PROCESSES_KEY,
    SHARDS_KEY,
    FINALIZE_KEY,
    EVENTS_KEY,
    SCHEMAS_KEY,
    GC_KEY,
)


@attrs.frozen
class CollectionRef:
    """Where one builtin collection lives now.

    ``schema`` is the release's schema, kept only when it is not registered as such on the
    shard: the leader then registered a wider schema (its own plus fields an aborted newer
    leader had added, which must survive for that release), and plans start from this one.
    The catalog value only says it is kept (``kept``); the schema itself lives at
    ``schemas/<fingerprint>`` and :func:`read_catalog` resolves it.
    """

    global_id: str
    name: str  # "schema_name.object_name"
    shard_id: str
    fingerprint: str
    schema: pa.Schema | None = attrs.field(default=None, eq=False)
    kept: bool = attrs.field(default=False, eq=False)

    @property
    def keeps_schema(self) -> bool:
        return self.schema is not None or self.kept

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "shard_id": self.shard_id,
            "fingerprint": self.fingerprint,
        }
        if self.keeps_schema:
            out["kept_schema"] = True
        return out

    @classmethod
    def from_json(cls, global_id: str, data: Mapping[str, Any]) -> CollectionRef:
        encoded = data.get("schema")  # written inline by earlier versions
        return cls(
            global_id=global_id,
            name=data["name"],
            shard_id=data["shard_id"],
            fingerprint=data["fingerprint"],
            schema=None if encoded is None else schema_from_bytes(base64.b64decode(encoded)),
            kept=bool(data.get("kept_schema", False)),
        )


@attrs.frozen
class Finalized:
    """When the catalog's version became final: the generation of its upgrade, when, and who
    decided (``bootstrap`` for a new environment)."""

    deploy_generation: int
    at: float
    by: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(hash=False)
class CatalogState:
    """The durable catalog: version ``Vc``, generation ``Gc`` and the collection map."""

    version: str
    deploy_generation: int
    blob_uri: str
    collections: Mapping[str, CollectionRef] = attrs.field(factory=dict)
    updated_at: float = 0.0
    #: Set when the version is final (absent in catalogs of earlier releases, which are).
    finalized: Finalized | None = None
    #: The generation whose leader switched the catalog to this version (a takeover moves
    #: ``deploy_generation`` only); None in catalogs of earlier releases.
    version_generation: int | None = None
    #: The release the generation ``deploy_generation`` runs: the taker's version, bound by
    #: the takeover that moved the catalog to it (a generation stands for one release,
    #: ``orchestrator.fencing.release_fence``). None in catalogs of earlier releases.
    generation_release: str | None = None

    @property
    def release_of_generation(self) -> str:
        """The release ``deploy_generation`` runs (``version`` when not recorded: a catalog of
        an earlier release)."""
        return self.version if self.generation_release is None else self.generation_release

    @property
    def upgraded_at_generation(self) -> int:
        """The generation that brought this version (``deploy_generation`` when unknown)."""
        return (
            self.deploy_generation if self.version_generation is None else self.version_generation
        )

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
            **({} if self.finalized is None else {"finalized": self.finalized.to_json()}),
            **(
                {}
                if self.version_generation is None
                else {"version_generation": self.version_generation}
            ),
            **(
                {}
                if self.generation_release is None
                else {"generation_release": self.generation_release}
            ),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CatalogState:
        final = data.get("finalized")
        since = data.get("version_generation")
        bound = data.get("generation_release")
        return cls(
            generation_release=None if bound is None else str(bound),
            finalized=None if final is None else Finalized(**final),
            version_generation=None if since is None else int(since),
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


def schema_key(fingerprint: str) -> str:
    return f"{SCHEMAS_KEY}/{fingerprint}"


def read_catalog(consensus: Consensus) -> tuple[CatalogState, int] | None:
    """The catalog state and its znode version, or None for an environment not bootstrapped.

    Kept schemas are read from their own znodes. One missing while the catalog moved on (a
    leader retires the schemas its switch no longer keeps) means re-read; missing under an
    unchanged catalog, it is corrupt state naming the key.
    """
    found = _read_catalog(consensus)
    return None if found is None else (found[0], found[1].version)


class CatalogCache:
    """:func:`read_catalog` for a process that reads the catalog at every read of a shard
    (a cut-over's reads): the last catalog read is kept with its znode's stamp, and a read
    that finds the znode unchanged takes it from memory. That is one stat of the znode
    instead of its value (all the catalog's collections), their decoding and the kept
    schemas' reads. With ``synced`` a sync goes ahead of the stat, in its round trip: what
    it answers holds every write committed before the read began (a linearizable read of
    the catalog); without, what the session has seen (a leader's own switch included)."""

    def __init__(self) -> None:
        self._kept: tuple[tuple[float, int], CatalogState] | None = None
        #: One read of the value at a time: reads that found the same new stamp (every read
        #: of a cut-over's first moments) wait for one read of it, not one each.
        self._reading = threading.Lock()

    def read(self, consensus: Consensus, *, synced: bool = True) -> tuple[CatalogState, int] | None:
        stamp = consensus.stamp(CATALOG_KEY, synced=synced)
        if stamp is None:
            return None
        found = self._kept_at(stamp)
        if found is not None:
            return found
        with self._reading:
            found = self._kept_at(stamp)
            if found is not None:
                return found
            read = _read_catalog(consensus)
            if read is None:
                return None
            state, versioned = read
            self._kept = ((versioned.created, versioned.version), state)
            return state, versioned.version

    def _kept_at(self, stamp: tuple[float, int]) -> tuple[CatalogState, int] | None:
        kept = self._kept
        return (kept[1], stamp[1]) if kept is not None and kept[0] == stamp else None


def _read_catalog(consensus: Consensus) -> tuple[CatalogState, Versioned] | None:
    """The catalog with its schemas resolved, and the znode value it was read from."""
    for _ in range(3):
        found = consensus.get(CATALOG_KEY)
        if found is None or not found.value:
            return None
        state = CatalogState.decode(found.value)
        resolved, missing = _resolved(consensus, state)
        if not missing:
            return resolved, found
        again = consensus.get(CATALOG_KEY)
        if again is not None and again.version == found.version:
            raise _missing_schemas(missing)
    raise CorruptStateError("the catalog kept moving while its schemas were read", key=CATALOG_KEY)


def resolve_kept(consensus: Consensus, state: CatalogState) -> CatalogState:
    """``state`` (a catalog value stored elsewhere, such as the pending upgrade's previous
    catalog) with the schemas it keeps read from their nodes; CorruptStateError when one is
    gone (nothing retires a schema such a value still keeps)."""
    resolved, missing = _resolved(consensus, state)
    if missing:
        raise _missing_schemas(missing)
    return resolved


def _resolved(consensus: Consensus, state: CatalogState) -> tuple[CatalogState, list[str]]:
    wanted = [r for r in state.collections.values() if r.kept and r.schema is None]
    if not wanted:
        return state, []
    stored = consensus.get_many([schema_key(r.fingerprint) for r in wanted])
    resolved = dict(state.collections)
    missing = []
    for ref in wanted:
        value = stored[schema_key(ref.fingerprint)]
        if value is None:
            missing.append(schema_key(ref.fingerprint))
            continue
        resolved[ref.global_id] = attrs.evolve(ref, schema=_decode_schema(value.value, ref))
    return attrs.evolve(state, collections=resolved), missing


def _missing_schemas(missing: list[str]) -> CorruptStateError:
    return CorruptStateError(
        f"the catalog keeps schemas whose nodes are gone: {', '.join(missing[:5])}",
        key=missing[0],
        missing=missing,
    )


def _decode_schema(data: bytes, ref: CollectionRef) -> pa.Schema:
    key = schema_key(ref.fingerprint)
    raw = decode_json(data, key)
    with decoding(key, "kept schema"):
        return schema_from_bytes(base64.b64decode(raw["schema"]))


def kept_schema_ops(consensus: Consensus, state: CatalogState) -> list[Op]:
    """Creates of the schema nodes ``state`` keeps that do not exist yet; commit them (fenced,
    in chunks) before the catalog write that names them."""
    existing = set(consensus.children(SCHEMAS_KEY))
    ops: dict[str, Op] = {}
    for ref in state.collections.values():
        if ref.schema is not None and ref.fingerprint not in existing:
            value = encode_json(
                {
                    "fingerprint": ref.fingerprint,
                    "schema": base64.b64encode(schema_to_bytes(ref.schema)).decode(),
                }
            )
            ops[ref.fingerprint] = Create(schema_key(ref.fingerprint), value)
    return list(ops.values())


def retired_schema_ops(consensus: Consensus, state: CatalogState, *also: CatalogState) -> list[Op]:
    """Deletes of the schema nodes ``state`` (just written) no longer keeps, nor ``also``
    (the previous catalog of a pending upgrade, which a rollback restores)."""
    kept = {r.fingerprint for s in (state, *also) for r in s.collections.values() if r.keeps_schema}
    return [Delete(schema_key(f)) for f in consensus.children(SCHEMAS_KEY) if f not in kept]


def catalog_write_op(state: CatalogState, expected_version: int) -> Op:
    """The op that writes ``state`` over the version read (-1: the bootstrap create)."""
    if expected_version < 0:
        return Create(CATALOG_KEY, state.encode())
    return SetData(CATALOG_KEY, state.encode(), expected_version)


def candidate_key(deploy_generation: int) -> str:
    """Where the election candidates of ``deploy_generation`` are (``election/<gen>``)."""
    return f"{ELECTION_KEY}/{deploy_generation}"


def generation_of_catalog(found: Versioned | None) -> int | None:
    """The generation of a read catalog node (None: absent or empty); decoded by
    :meth:`CatalogState.decode`, the catalog's one codec."""
    if found is None or not found.value:
        return None
    return CatalogState.decode(found.value, found.key or CATALOG_KEY).deploy_generation
