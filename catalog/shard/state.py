"""A shard's durable state: schema history, batch references, rollups, frontiers; and results."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa

from catalog.consensus import (
    Check,
    decode_json,
    decoding,
    encode_json,
)
from catalog.consolidate import (
    DIFF,
    TS,
)
from catalog.environment import SHARDS_KEY
from catalog.errors import (
    ShardError,
    ShardGuardMovedError,
    ShardLeasedError,
    ShardNotFoundError,
)
from catalog.schema import (
    live_schema,
    migration_preserves_order,
    schema_from_bytes,
    schema_to_bytes,
)
from catalog.schema.ids import has_ids
from catalog.shard.ledger import WriteLedger, WriteMark
from catalog.shard.listing import BatchListing, BatchRef, RollupRef
from catalog.shard.origin import Origin

LEASE_PREFIX = "l-"


# Inline batch entries above this many are rolled up into a blob (an entry is ~80 bytes).
ROLLUP_THRESHOLD = 500


# Rollup references above this many are merged into one rollup.
MAX_ROLLUPS = 64


# Unreferenced blobs younger than this are left alone by gc_orphans: a writer may be between
# its blob write and its CAS.
GC_GRACE_SECONDS = 300.0


# A snapshot whose blobs vanished under it (compaction or rollup merge) re-reads this often.
READ_ATTEMPTS = 5


# Format 1: the whole state in one znode; 2: a head and a body (catalog.shard.stored); 4 and 3:
# the same once the shard numbers its fields (catalog.schema.ids), so a catalog-upgrade from
# before field ids refuses them as newer instead of reading a renamed field by its old name.
_STATE_FORMAT, SPLIT_FORMAT, NUMBERED_SPLIT_FORMAT, NUMBERED_STATE_FORMAT = 1, 2, 3, 4
SPLIT_FORMATS = frozenset({SPLIT_FORMAT, NUMBERED_SPLIT_FORMAT})  # heads of split states
NEWEST_FORMAT = NUMBERED_STATE_FORMAT


def shard_key(shard_id: str) -> str:
    """The consensus key of a shard's state (its head, once split)."""
    return f"{SHARDS_KEY}/{shard_id}"


def body_key(shard_id: str) -> str:
    """The consensus key of a split shard state's body (batches, frontiers, write ledger)."""
    return f"{shard_key(shard_id)}/batches"


def new_shard_id() -> str:
    """A fresh, unique shard id (32 hex digits)."""
    return uuid.uuid4().hex


def update_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a shard batch with collection schema ``schema``: its fields, _ts, _diff."""
    return pa.schema(
        [
            *schema,
            pa.field(TS, pa.uint64(), nullable=False),
            pa.field(DIFF, pa.int64(), nullable=False),
        ],
        metadata=schema.metadata,
    )


# The reasons code branches on have their own error class; the rest are data of ShardError.
_ERROR_KINDS: dict[str, type[ShardError]] = {
    "not-found": ShardNotFoundError,
    "guard-moved": ShardGuardMovedError,
    "leased": ShardLeasedError,
}


def shard_error(message: str, shard_id: str, reason: str, **details: Any) -> ShardError:
    kind = _ERROR_KINDS.get(reason, ShardError)
    return kind(message, shard_id=shard_id, reason=reason, **details)


@attrs.frozen
class Contraction:
    """The second half of an evolution, recorded with its first (expand, then contract).

    A leader of ``(version, generation)`` registers the expansion before its catalog switch and
    records here the ``schema`` it registers once the switch is durable (its release's schema,
    with its deletions and relaxed nullability). Recorded, because after the switch the catalog
    no longer says what the release deleted: any later leader of the same version (a restart,
    or a later generation of it) redoes it from here; a leader of another version drops it.
    """

    version: str
    generation: int
    schema: pa.Schema = attrs.field(eq=attrs.cmp_using(eq=lambda a, b: a.equals(b)))

    def of(self, version: str) -> bool:
        """Whether a leader of ``version`` owes it (once its catalog switch is durable)."""
        return self.version == version

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "generation": self.generation,
            "schema": base64.b64encode(schema_to_bytes(self.schema)).decode(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Contraction | None:
        if data is None:
            return None
        schema = schema_from_bytes(base64.b64decode(data["schema"]))
        return cls(str(data["version"]), int(data["generation"]), schema)


def schemas_equal(a: tuple[pa.Schema, ...], b: tuple[pa.Schema, ...]) -> bool:
    return len(a) == len(b) and all(
        x.equals(y, check_metadata=True) for x, y in zip(a, b, strict=True)
    )


@attrs.frozen(hash=False)
class ShardState:
    """A shard's durable state. ``version`` is the znode version it was read at (not encoded).

    ``schemas`` are migration types (tombstones kept); ``batches`` are the inline batch entries
    and ``rollups`` the blobs holding older ones (:meth:`Shard.batches` resolves both).
    ``finalized`` with batches still listed means finalization is under way (no new leases);
    a finalized state without batches or rollups is the tombstone. ``writes`` is the ledger of
    recent append identities (:mod:`catalog.shard.ledger`); ``contraction`` the second half of
    an evolution whose first half is registered (:class:`Contraction`); ``origin`` what a
    prepared replacement shard was made from (:mod:`catalog.shard.origin`), fixed at creation.
    """

    shard_id: str
    schemas: tuple[pa.Schema, ...] = attrs.field(eq=attrs.cmp_using(eq=schemas_equal))
    batches: Sequence[BatchRef] = ()
    rollups: tuple[RollupRef, ...] = ()
    upper: int = 0
    since: int = 0
    sealed: bool = False
    finalized: bool = False
    writes: WriteLedger = attrs.field(factory=WriteLedger)
    contraction: Contraction | None = None
    origin: Origin | None = None
    version: int = attrs.field(default=-1, eq=False)
    # Split states (format 2): the body's znode version, and the link both halves carry (bumped
    # by every write of both, so a reader can tell a head and a body of different writes apart).
    body_version: int = attrs.field(default=-1, eq=False)
    link: int = attrs.field(default=0, eq=False)
    # Live schemas by id, computed once per state (the walk is the leader's hot path).
    _live: dict[int, pa.Schema] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    @property
    def split(self) -> bool:
        """Whether the state is stored as a head and a body (format 2), not in one znode."""
        return self.body_version >= 0

    @property
    def revision(self) -> tuple[int, int]:
        """The versions it was read at: equal revisions are the same state."""
        return (self.version, self.body_version)

    def checks(self) -> list[Check]:
        """Transaction checks that fail once anything in this state changed."""
        out = [Check(self.key, self.version)]
        if self.split:
            out.append(Check(body_key(self.shard_id), self.body_version))
        return out

    @property
    def schema_id(self) -> int:
        """The latest schema id."""
        return len(self.schemas) - 1

    @property
    def schema(self) -> pa.Schema:
        """The latest migration type (tombstones included)."""
        return self.schemas[-1]

    @property
    def live_schema(self) -> pa.Schema:
        """The latest live schema (what writers write and readers read by default)."""
        return self.live(len(self.schemas) - 1)

    def live(self, schema_id: int) -> pa.Schema:
        """The live schema registered as ``schema_id``; ShardError when unknown."""
        if not 0 <= schema_id < len(self.schemas):
            raise shard_error(
                f"shard {self.shard_id} has no schema id {schema_id} (latest is {self.schema_id})",
                self.shard_id,
                "unknown-schema",
                schema_id=schema_id,
                latest_schema_id=self.schema_id,
            )
        found = self._live.get(schema_id)
        if found is None:
            found = self._live[schema_id] = live_schema(self.schemas[schema_id])
        return found

    def is_ordered_in(self, batch: BatchRef, schema_id: int | None = None) -> bool:
        """Whether ``batch`` is still sorted once migrated to ``schema_id`` (default: latest)."""
        target = self.schema_id if schema_id is None else schema_id
        return batch.ordered and migration_preserves_order(
            self.live(batch.schema_id), self.live(target)
        )

    @property
    def batch_count(self) -> int:
        """Inline plus rolled-up batches."""
        return len(self.batches) + sum(r.batches for r in self.rollups)

    @property
    def row_count(self) -> int:
        """Stored update rows (before consolidation), inline plus rolled up."""
        return sum(b.rows for b in self.batches) + sum(r.rows for r in self.rollups)

    @property
    def is_tombstone(self) -> bool:
        return self.finalized and not self.batches and not self.rollups

    @property
    def numbered(self) -> bool:
        """Whether the shard numbers its fields (its schemas carry field ids)."""
        return has_ids(self.schemas[-1])

    def to_json(self) -> dict[str, Any]:
        return {
            "format": NUMBERED_STATE_FORMAT if self.numbered else _STATE_FORMAT,
            "shard_id": self.shard_id,
            "schemas": [base64.b64encode(schema_to_bytes(s)).decode() for s in self.schemas],
            "batches": BatchListing.json_of(self.batches),
            "rollups": [r.to_json() for r in self.rollups],
            "upper": self.upper,
            "since": self.since,
            "sealed": self.sealed,
            "finalized": self.finalized,
            "writes": self.writes.to_json(),
            **({"contraction": self.contraction.to_json()} if self.contraction else {}),
            **({"origin": self.origin.to_json()} if self.origin else {}),
        }

    def encode(self) -> bytes:
        """The whole state as one znode value (format 1): compact JSON, schemas as base64
        Arrow IPC. New shards start so; their first change of batches splits them."""
        return encode_json(self.to_json())

    def encode_head(self) -> bytes:
        """The head of a split state: what a schema registration or a seal changes."""
        head = {
            "format": NUMBERED_SPLIT_FORMAT if self.numbered else SPLIT_FORMAT,
            "shard_id": self.shard_id,
            "schemas": [base64.b64encode(schema_to_bytes(s)).decode() for s in self.schemas],
            "sealed": self.sealed,
            "finalized": self.finalized,
            "link": self.link,
        }
        if self.contraction:
            head["contraction"] = self.contraction.to_json()
        if self.origin:
            head["origin"] = self.origin.to_json()
        return encode_json(head)

    def encode_body(self) -> bytes:
        """The body of a split state: what an append or a compaction changes. ``schemas`` is
        how many schemas its writer knew (a reader whose head knows fewer re-reads)."""
        rest = encode_json(
            {
                "format": SPLIT_FORMAT,
                "rollups": [r.to_json() for r in self.rollups],
                "upper": self.upper,
                "since": self.since,
                "writes": self.writes.to_json(),
                "link": self.link,
                "schemas": len(self.schemas),
            }
        )
        # "batches" sorts first: spliced in as its listing's JSON, which an append extends
        # rather than encoding every entry again (the bytes encode_json would write).
        return b'{"batches":' + BatchListing.encoded(self.batches) + b"," + rest[1:]

    @classmethod
    def decode(cls, data: bytes, version: int = -1, key: str = "a shard state") -> ShardState:
        """The shard state stored at ``key``; CorruptStateError naming it when it is not one."""
        raw = decode_json(data, key)
        with decoding(key, "shard state"):
            return cls._from_json(raw, version)

    @staticmethod
    def decode_schemas(raw: Sequence[str]) -> tuple[pa.Schema, ...]:
        return tuple(schema_from_bytes(base64.b64decode(s)) for s in raw)

    @classmethod
    def _from_json(cls, raw: Any, version: int) -> ShardState:
        if raw.get("format", _STATE_FORMAT) not in (_STATE_FORMAT, NUMBERED_STATE_FORMAT):
            raise ValueError(f"format {raw.get('format')} is not a whole shard state")
        return cls(
            shard_id=raw["shard_id"],
            schemas=cls.decode_schemas(raw["schemas"]),
            batches=BatchListing(raw["batches"]),
            rollups=tuple(RollupRef.from_json(r) for r in raw["rollups"]),
            upper=int(raw["upper"]),
            since=int(raw["since"]),
            sealed=bool(raw["sealed"]),
            finalized=bool(raw["finalized"]),
            writes=WriteLedger.from_json(raw.get("writes"), int(raw["upper"])),
            contraction=Contraction.from_json(raw.get("contraction")),
            origin=Origin.from_json(raw.get("origin")),
            version=version,
        )


def find_schema_id(state: ShardState, schema: pa.Schema) -> int | None:
    """The id under which live ``schema`` is registered on the shard, if it is.

    A release may keep an older schema the shard has since evolved past (an older release
    starting after a newer leader registered schemas and crashed): it then reads and writes
    with that older id, and nothing needs registering.
    """
    for schema_id in range(len(state.schemas) - 1, -1, -1):
        if state.live(schema_id).equals(schema, check_metadata=False):
            return schema_id
    return None


@attrs.frozen
class AppendResult:
    """Outcome of :meth:`Shard.compare_and_append`.

    ``ok``: the batch is durable and ``upper`` is the new upper. Otherwise the shard's upper was
    not ``expected_upper``: nothing was written and ``upper`` is the current one (persist's
    ``UpperMismatch``); re-read, and retry with it if appropriate. ``mark``: the ledger entry
    of the append (when ok); ``replayed``: it had landed before this call saw it (an earlier
    attempt whose answer was lost, or an earlier call with the same write id).
    """

    ok: bool
    upper: int
    state: ShardState
    mark: WriteMark | None = None
    replayed: bool = False


@attrs.frozen
class EvolveResult:
    """Outcome of :meth:`Shard.compare_and_evolve_schema`.

    ``ok``: ``schema_id`` now holds the requested schema (new, or already there when the latest
    schema was identical). Otherwise the latest id was not the expected one: ``schema_id`` and
    ``schema`` (live) are the current latest, and nothing was written.
    """

    ok: bool
    schema_id: int
    schema: pa.Schema = attrs.field(eq=attrs.cmp_using(eq=lambda a, b: a.equals(b)))
    state: ShardState


@attrs.frozen
class CompactionResult:
    """Outcome of :meth:`Shard.compact`: ``applied`` False when another writer replaced the
    inputs first (the output blob was deleted again). ``outputs`` lists every output batch
    (:meth:`Shard.commit_compaction` may commit several); ``output`` is the only one, if one."""

    applied: bool
    inputs: int
    output: BatchRef | None
    state: ShardState
    outputs: tuple[BatchRef, ...] = ()


@attrs.frozen
class Lease:
    """A reader lease: an ephemeral znode that finalization waits for."""

    shard_id: str
    key: str
    holder: str
    #: The shard's state read once the lease was held: what the reader reads.
    state: ShardState = attrs.field(eq=False, repr=False)
