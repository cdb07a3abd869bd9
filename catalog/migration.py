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
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence
from catalog.environment import MIGRATION_SHARD_ID
from catalog.errors import (
    ShardGuardMovedError,
    ShardNotFoundError,
    VersionMismatchError,
)
from catalog.retry import CasRetry
from catalog.shard import (
    DIFF,
    Origin,
    Rows,
    Shard,
    ShardState,
    append_rows,
    create_op,
    new_shard_id,
    read_states,
)

__all__ = [
    "MIGRATION_SCHEMA",
    "CreateShard",
    "MigrationEntry",
    "MigrationShard",
]

log = structlog.get_logger(__name__)

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


@attrs.frozen(order=True)
class MigrationEntry:
    """One replacement: collection ``global_id`` at ``(version, deploy_generation)`` lives in
    ``shard_id``."""

    global_id: str
    version: str
    deploy_generation: int
    shard_id: str

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)

    def sort_key(self) -> tuple[str, str, int, str]:
        """The order ``order=True`` gives, as one tuple: sorting thousands of entries by it
        is several times faster than by attrs' field-by-field comparisons."""
        return (self.global_id, self.version, self.deploy_generation, self.shard_id)


def _entry_table(entries: Iterable[MigrationEntry]) -> pa.Table:
    rows = sorted(set(entries), key=MigrationEntry.sort_key)
    return pa.Table.from_pydict(
        {
            "global_id": [e.global_id for e in rows],
            "version": [e.version for e in rows],
            "deploy_generation": [e.deploy_generation for e in rows],
            "shard_id": [e.shard_id for e in rows],
        },
        schema=MIGRATION_SCHEMA,
    )


# The migration shard is compacted by the leader above this many batches (each upgrade appends
# a few: entries, then their retraction).
COMPACT_ABOVE_BATCHES = 32


@attrs.define
class MigrationShard:
    """The migration shard of one environment."""

    consensus: Consensus
    blob: BlobStore
    retry: Callable[[], CasRetry] = CasRetry
    shard: Shard = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.shard = Shard(self.consensus, self.blob, MIGRATION_SHARD_ID)

    def ensure(self, *, fence: Fence | None = None) -> ShardState:
        """Create the migration shard if it does not exist yet; its state either way."""
        try:
            return self.shard.state()
        except ShardNotFoundError:
            pass
        return self.shard.create(MIGRATION_SCHEMA, fence=fence, exist_ok=True)

    def _read(self, as_of: int | None = None) -> tuple[list[MigrationEntry], ShardState | None]:
        """The live entries as of ``as_of`` (default: the upper) and the state they come from."""
        try:
            state = self.shard.state()
        except ShardNotFoundError:
            return [], None
        return self._entries_of(state, as_of), state

    def _entries_of(self, state: ShardState, as_of: int | None = None) -> list[MigrationEntry]:
        """The live entries of ``state`` as of ``as_of`` (default: its upper)."""
        table = self.shard.snapshot_of(state, as_of)
        out: list[MigrationEntry] = []
        for row in table.to_pylist():
            if row[DIFF] < 0:
                log.warning("migration_entry_over_retracted", **{k: row[k] for k in row})
                continue
            entry = MigrationEntry(
                row["global_id"], row["version"], row["deploy_generation"], row["shard_id"]
            )
            out.append(entry)  # one per distinct entry, whatever its multiplicity
        return sorted(out, key=MigrationEntry.sort_key)

    def read_live(self) -> tuple[list[MigrationEntry], ShardState | None]:
        """Every live entry and the shard state they were read from (None: no shard yet), for
        a transaction that must fail if the entries changed (``Check`` of that version)."""
        return self._read()

    def entries(self, as_of: int | None = None) -> list[MigrationEntry]:
        """Every live entry as of ``as_of`` (default: the latest complete time), sorted.

        A migration shard that does not exist yet has no entries.
        """
        return self._read(as_of)[0]

    def entries_for(self, version: str, generation: int) -> dict[str, MigrationEntry]:
        """Entries at exactly ``(version, generation)``, by global id (everyone else's ignored)."""
        return _exactly(self.entries(), version, generation)

    def _append(
        self,
        build: Callable[[list[MigrationEntry]], tuple[list[MigrationEntry], int]],
        fence: Fence | None,
    ) -> int:
        """Read, let ``build`` pick the rows and their diff, append them at the upper
        (:func:`catalog.shard.append_rows`, re-read on a lost race); the new upper."""
        self.ensure(fence=fence)

        def rows(state: ShardState) -> Rows | None:
            entries, diff = build(self._entries_of(state))
            return Rows(_entry_table(entries), diff=diff) if entries else None

        return append_rows(self.shard, rows, fence=fence, retry=self.retry).upper

    def append_entries(
        self, entries: Iterable[MigrationEntry], *, fence: Fence | None = None
    ) -> int:
        """Append ``entries`` (compare-and-append, re-reading on a lost race); the new upper.

        Entries already live are skipped, so a retry after a lost answer never duplicates.
        """
        wanted = sorted(set(entries), key=MigrationEntry.sort_key)

        def build(live: list[MigrationEntry]) -> tuple[list[MigrationEntry], int]:
            present = set(live)
            return [e for e in wanted if e not in present], 1

        upper = self._append(build, fence)
        log.info("migration_entries_appended", count=len(wanted), upper=upper)
        return upper

    def retract(self, entries: Iterable[MigrationEntry], *, fence: Fence | None) -> int:
        """Retract those of ``entries`` that are live (``-1`` diffs); the new upper.

        Entries that are not live are skipped, so retracting twice is harmless.
        """
        wanted = set(entries)

        def build(live: list[MigrationEntry]) -> tuple[list[MigrationEntry], int]:
            return [e for e in live if e in wanted], -1

        upper = self._append(build, fence)
        log.info("migration_entries_retracted", count=len(wanted), upper=upper)
        return upper

    def compact_if_needed(
        self, *, fence: Fence | None = None, batches: int = COMPACT_ABOVE_BATCHES
    ) -> bool:
        """Merge the migration shard into one batch once it holds more than ``batches``.

        Every reader reads the latest entries, so ``since`` first moves up to the latest
        complete time: appended and retracted entries then cancel out, and the shard stays as
        small as its live entries however many upgrades ran. True when it compacted.
        """
        try:
            state = self.shard.state()
        except ShardNotFoundError:
            return False
        if state.batch_count <= batches or state.upper == 0:
            return False
        self.shard.advance_since(state.upper - 1, fence=fence)
        result = self.shard.compact(fence=fence)
        log.info(
            "migration_shard_compacted",
            inputs=result.inputs,
            rows=0 if result.output is None else result.output.rows,
            applied=result.applied,
        )
        return result.applied

    def ensure_replacement_shards(
        self,
        version: str,
        generation: int,
        wanted: Mapping[str, pa.Schema],
        create_shard: CreateShard | None = None,
        *,
        origins: Mapping[str, Origin] | None = None,
        fence: Fence | None = None,
        seen: dict[str, ShardState] | None = None,
    ) -> dict[str, str]:
        """Reuse or create one replacement shard per global id in ``wanted``; global id -> shard.

        Reads the entries at exactly ``(version, generation)``; for the global ids missing
        there, creates shards (``create_shard(global_id, schema) -> shard_id``; default: a new
        empty shard with that schema) and appends their entries. When the append loses a race,
        it re-reads and reuses what the racing process of the same version and generation wrote,
        so every racer returns the same shard id per collection. Shards this call created that
        end up unused are discarded (default creator) or left for cleanup (custom creator).

        With ``origins`` (global id -> what the shard is made from, :mod:`catalog.shard.origin`)
        an entry is reused only when its shard records that origin; a shard prepared from
        another catalog (the collection replaced or evolved since) is left to the leader's
        retraction and a new one is made (default creator), recording its origin. So one key
        may have several live entries, one per origin, and a plan never resumes a shard that was
        not made from its own source. With ``origins``, ``seen`` (if given) gets the state of each
        shard returned, as this call read it (so a caller need not read them again).
        """
        if not wanted:
            return {}
        self.ensure(fence=fence)
        states_read: dict[str, ShardState] = {}
        creator = create_shard or self._create_shard(fence)
        created: dict[str, str] = {}

        mapping: dict[str, str] = {}

        def rows(state: ShardState) -> Rows | None:
            found = self._reusable(
                _every(self._entries_of(state), version, generation, wanted), origins, states_read
            )
            missing = sorted(gid for gid in wanted if gid not in found)
            mapping.clear()
            mapping.update(found)
            if not missing:
                return None
            self._forget_collected(created, missing)
            if create_shard is None:
                self._create_shards(
                    {gid: wanted[gid] for gid in missing if gid not in created},
                    created,
                    origins or {},
                    fence,
                )
            for gid in missing:
                if gid not in created:
                    created[gid] = creator(gid, wanted[gid])
            entries = [MigrationEntry(gid, version, generation, created[gid]) for gid in missing]
            states = self._uncollected([created[g] for g in missing])
            states_read.update(states)
            mapping.update({gid: created[gid] for gid in missing})
            guards = [check for st in states.values() for check in st.checks()]
            return Rows(_entry_table(entries), guards=guards)

        def retry() -> CasRetry:
            # A guard that moved is a lost race too: re-read and reuse what the winner wrote.
            plain = self.retry()
            return attrs.evolve(plain, retryable=(*plain.retryable, ShardGuardMovedError))

        append_rows(self.shard, rows, fence=fence, retry=retry)
        if seen is not None and origins is not None:
            seen.update({sid: states_read[sid] for sid in mapping.values() if sid in states_read})
        orphans = sorted(sid for gid, sid in created.items() if mapping.get(gid) != sid)
        if orphans and create_shard is None:
            for shard_id in orphans:
                Shard(self.consensus, self.blob, shard_id).discard(fence=fence)
        log.info(
            "replacement_shards_ensured",
            version=version,
            deploy_generation=generation,
            collections=len(mapping),
            created=len(created) - len(orphans),
            orphans=len(orphans),
        )
        return mapping

    def _forget_collected(self, created: dict[str, str], missing: list[str]) -> None:
        """A shard made in a lost attempt is reused, unless the leader collected it as an
        orphan meanwhile (sealed: see orchestrator.migrate.collect_orphan_shards): those are
        dropped from ``created``."""
        reused = read_states(self.consensus, [created[g] for g in missing if g in created])
        for gid in missing:
            if gid in created:
                current = reused[created[gid]]
                if current is None or current.sealed or current.finalized:
                    del created[gid]

    def _uncollected(self, shard_ids: list[str]) -> dict[str, ShardState]:
        """The states of the shards new entries are to name. The entries name them only if
        they are as this attempt last saw them: an orphan collection that sealed one in
        between makes the append fail (a guard moved, or VersionMismatchError here) and run
        again."""
        states = read_states(self.consensus, shard_ids)
        collected = [sid for sid, st in states.items() if st is None or st.sealed or st.finalized]
        if collected:
            raise VersionMismatchError(
                f"replacement shards {collected} were collected before their entries landed",
                key=self.shard.key,
            )
        return {sid: st for sid, st in states.items() if st is not None}

    def _reusable(
        self,
        candidates: Mapping[str, list[str]],
        origins: Mapping[str, Origin] | None,
        states_read: dict[str, ShardState],
    ) -> dict[str, str]:
        """The shard to reuse per global id among its entries' ``candidates``: the first (by
        shard id) without ``origins``; with them, the first whose state records the wanted
        origin (a shard made from another catalog is never reused, nor one gone). The states
        read go into ``states_read``."""
        if origins is None:
            return {gid: shard_ids[0] for gid, shard_ids in candidates.items()}
        states = read_states(
            self.consensus, [sid for shard_ids in candidates.values() for sid in shard_ids]
        )
        states_read.update({sid: st for sid, st in states.items() if st is not None})
        found: dict[str, str] = {}
        for gid, shard_ids in candidates.items():
            for shard_id in shard_ids:
                state = states[shard_id]
                if state is not None and state.origin == origins.get(gid):
                    found[gid] = shard_id
                    break
            else:
                log.info(
                    "replacement_shard_not_reused",
                    global_id=gid,
                    shards=shard_ids,
                    wanted=None if gid not in origins else origins[gid].to_json(),
                )
        return found

    def _create_shards(
        self,
        schemas: Mapping[str, pa.Schema],
        created: dict[str, str],
        origins: Mapping[str, Origin],
        fence: Fence | None,
    ) -> None:
        """Create many empty shards with batched multi-ops (one round trip per chunk, not per
        shard); fills ``created`` before each chunk is sent.

        A chunk's shard ids are its identity: when its answer is lost, the retry reads those
        shards (see ensure_replacement_shards) and reuses the ones that landed instead of
        creating others, which would leak the first ones as orphans.
        """
        pending = [(gid, new_shard_id(), schema) for gid, schema in sorted(schemas.items())]
        for start in range(0, len(pending), _CREATE_CHUNK):
            chunk = pending[start : start + _CREATE_CHUNK]
            ops = [create_op(sid, schema, origins.get(gid))[0] for gid, sid, schema in chunk]
            created.update({gid: sid for gid, sid, _ in chunk})
            self.consensus.commit(ops, fence=fence)

    def _create_shard(self, fence: Fence | None) -> CreateShard:
        def create(global_id: str, schema: pa.Schema) -> str:
            shard_id = new_shard_id()
            Shard(self.consensus, self.blob, shard_id).create(schema, fence=fence)
            return shard_id

        return create


# Shard states with their schemas are a few KB each: keep a multi-op well below 1 MB.
_CREATE_CHUNK = 100


def _every(
    entries: Iterable[MigrationEntry], version: str, generation: int, wanted: Iterable[str]
) -> dict[str, list[str]]:
    """The shard ids of every entry of exactly ``(version, generation)`` for the global ids in
    ``wanted``, by global id, smallest first."""
    keep = set(wanted)
    out: dict[str, list[str]] = {}
    for entry in sorted(entries, key=MigrationEntry.sort_key):
        if (entry.version, entry.deploy_generation) == (version, generation) and (
            entry.global_id in keep
        ):
            out.setdefault(entry.global_id, []).append(entry.shard_id)
    return out


def _exactly(
    entries: Iterable[MigrationEntry], version: str, generation: int
) -> dict[str, MigrationEntry]:
    """The entries of exactly ``(version, generation)`` by global id; the smallest shard id wins
    should a global id ever have two (the append protocol never writes that)."""
    out: dict[str, MigrationEntry] = {}
    for entry in sorted(entries, key=MigrationEntry.sort_key):
        if entry.version == version and entry.deploy_generation == generation:
            out.setdefault(entry.global_id, entry)
    return out
