"""The migration shard: the durable map ``(GlobalId, Version, DeployGeneration) -> ShardId``.

It is an ordinary shard (``catalog.shard``) with the well-known id ``MIGRATION_SHARD_ID``, so its
state is the znode ``shards/migration`` and its batches are Parquet blobs, with the fixed schema
:data:`MIGRATION_SCHEMA`. An entry exists while its consolidated ``_diff`` is positive.

Protocol:

* every reader reads as of the current upper (``upper - 1``) and keeps only the entries of its
  exact ``(version, deploy_generation)``: everyone else's entries are ignored, so an aborted
  upgrade's entries can never confuse a later one;
* every append is a compare-and-append at ``[upper, upper + 1)``; a lost race re-reads and tries
  again (``CasRetry``), so concurrent processes of the same version and generation converge;
* only the leader retracts (appends ``-1`` diffs), fenced by its epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import attrs
import pyarrow as pa

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence
from catalog.shard import Shard, ShardState
from catalog.state import MIGRATION_SHARD_ID

__all__ = [
    "MIGRATION_SCHEMA",
    "MigrationEntry",
    "MigrationShard",
]

MIGRATION_SCHEMA = pa.schema(
    [
        pa.field("global_id", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("deploy_generation", pa.int64(), nullable=False),
        pa.field("shard_id", pa.string(), nullable=False),
    ]
)

# create_shard(global_id, schema) -> shard_id
CreateShard = Callable[[str, pa.Schema], str]


@attrs.frozen
class MigrationEntry:
    """One replacement: collection ``global_id`` at ``(version, deploy_generation)`` lives in
    ``shard_id``."""

    global_id: str
    version: str
    deploy_generation: int
    shard_id: str

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.define
class MigrationShard:
    """The migration shard of one environment."""

    consensus: Consensus
    blob: BlobStore
    shard: Shard = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.shard = Shard(self.consensus, self.blob, MIGRATION_SHARD_ID)

    def ensure(self, *, fence: Fence | None = None) -> ShardState:
        """Create the migration shard if it does not exist yet; its state either way."""
        raise NotImplementedError

    def entries(self, as_of: int | None = None) -> list[MigrationEntry]:
        """Every live entry as of ``as_of`` (default: the latest complete time), sorted."""
        raise NotImplementedError

    def entries_for(self, version: str, generation: int) -> dict[str, MigrationEntry]:
        """Entries at exactly ``(version, generation)``, by global id."""
        raise NotImplementedError

    def append_entries(
        self, entries: Iterable[MigrationEntry], *, fence: Fence | None = None
    ) -> int:
        """Append ``entries`` (compare-and-append, re-reading on a lost race); the new upper."""
        raise NotImplementedError

    def retract(self, entries: Iterable[MigrationEntry], *, fence: Fence | None) -> int:
        """Retract those of ``entries`` that are live (``-1`` diffs); the new upper.

        Entries that are not live are skipped, so retracting twice is harmless.
        """
        raise NotImplementedError

    def ensure_replacement_shards(
        self,
        version: str,
        generation: int,
        wanted: Mapping[str, pa.Schema],
        create_shard: CreateShard | None = None,
        *,
        fence: Fence | None = None,
    ) -> dict[str, str]:
        """Reuse or create one replacement shard per global id in ``wanted``; global id -> shard.

        Reads the entries at exactly ``(version, generation)``; for the global ids missing
        there, creates shards (``create_shard(global_id, schema) -> shard_id``; default: a new
        empty shard with that schema) and appends their entries. When the append loses a race,
        it re-reads and reuses what the racing process of the same version and generation wrote,
        so every racer returns the same shard id per collection. Shards this call created that
        end up unused are discarded (default creator) or left for cleanup (custom creator).
        """
        raise NotImplementedError
