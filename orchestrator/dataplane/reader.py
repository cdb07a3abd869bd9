"""The sidecar's reads: a collection's snapshot as this release reads it.

A read at the latest time holds the process's registration of its shard
(:mod:`catalog.shard.readers`): it writes nothing to ZooKeeper, and ``since`` never passes it.
A read at an explicit time (``as_of``) takes a lease of its own. A leader fenced by a
promotion goes on answering reads through the catalog while the catalog is at its release's
version (:meth:`SidecarReader.hand_over`), so a client that follows the leader reads without
a gap.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import pyarrow as pa
import structlog

from catalog.blob.cache import BatchCache
from catalog.environment import CatalogState
from catalog.errors import (
    BadInputError,
    BlobUnreachableError,
    CatalogError,
    FencedError,
    MigrationRefusedError,
)
from catalog.release import Builtin
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Shard, ShardState, find_schema_id, update_schema
from catalog.shard.read import Held, snapshot_after
from catalog.shard.readers import ReaderRegistry
from orchestrator.dataplane.serving import NotLeaderError, Serving
from orchestrator.election import Leadership

log = structlog.get_logger(__name__)

#: The Arrow bytes of latest-time snapshots a process keeps, by shard state version (and the
#: latest of each shard, to build the next on).
SNAPSHOT_CACHE_BYTES: Final = 64 * 1024 * 1024


class MigratingError(CatalogError):
    """A read the new leader cannot answer yet: its migration has not switched the catalog to
    the shards its release reads (retry: the switch comes within the migration)."""

    code = "migrating"


class UnreadableTimeError(BadInputError):
    """A read at a time the collection cannot be read at: compacted away, or not written yet
    (the answer depends on the shard's state, not on the request's form: HTTP 409)."""

    code = "time-not-readable"


class SidecarReader:
    """Reads of one process, with its reader registrations (one per ZooKeeper connection)."""

    def __init__(self, serving: Serving) -> None:
        self._serving = serving
        # Reads at the latest time hold the process's registration of their shard, on the
        # connection it was made on; and the schema each shard was last read with (what the
        # registration tells coverage).
        self._registry: tuple[object, ReaderRegistry] | None = None
        self._reads_with: dict[str, int | None] = {}
        # Snapshots at the latest time, by the state version they were read at (its head's
        # and its body's znode versions, which any change of the state moves).
        self._snapshots = BatchCache(SNAPSHOT_CACHE_BYTES)
        # The latest snapshot of each shard this process made, to build the next on: the upper
        # of the state it was read at, its schema, and the key its rows are kept under among
        # the snapshots above (the snapshot's own when the release reads the shard's schema
        # as it is: kept once).
        self._held: dict[str, tuple[int, pa.Schema, str]] = {}
        self._numbers = itertools.count()

    def hand_over(self) -> bool:
        """This leader was fenced by a promotion: it goes on answering reads, through the
        catalog, while the catalog is at its release's version (until a successor of another
        release switches it). Each read first syncs with ZooKeeper's leader and reads the
        catalog (:meth:`_readable`), so it sees every append acknowledged before it, whoever
        made it: a client that follows the leader reads without a gap. True when the catalog
        is at this release's version now."""
        self._serving.handing_over = True
        try:
            self._readable()
        except FencedError as refused:
            log.info("not_handing_over", reason=refused.message)
            return False
        return True

    def _readable(self) -> CatalogState:
        """During a hand-over: the catalog (read after a ``sync``) while it is at this
        process's release; else FencedError, why a read goes to the successor (the catalog
        moved on, or cannot be read: ZooKeeper unreachable)."""
        try:
            consensus = self._serving.connection.require()
            found = self._serving.catalogs.read(consensus)  # after a sync
        except CatalogError as exc:
            raise self._handed_on(f"cannot read its catalog ({exc.message})") from exc
        version = None if found is None else found[0].version
        if found is not None and version == str(self._serving.release.version):
            return found[0]
        raise self._handed_on(f"the catalog is at version {version} now", catalog_version=version)

    def _handed_on(self, why: str, **fields: Any) -> FencedError:
        """Why a read during a hand-over goes to the successor: the one wording of it."""
        return FencedError(
            f"process {self._serving.process_id} was fenced by a promotion, and {why}: read "
            "through its successor",
            deploy_generation=self._serving.config.deploy_generation,
            **fields,
        )

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        """The snapshot of ``collection`` as this release reads it (with ``_ts`` and
        ``_diff``); an unreachable blob store is a state (503), as for appends. During a
        cut-over to this process a read waits for the catalog switch, as an append does:
        until then the catalog names the old release's shards (a replacement still lacks
        the old leader's last appends), and a read served meanwhile would take the CPU the
        migration needs. Past the wait, a read of an old shard this release cannot make is
        refused for a retry (MigratingError, 503), by a read-only process as a write is.
        A leader whose leadership ends under a read hands its reads over at once
        (:meth:`hand_over`), this read first: it is answered through the catalog while the
        catalog is at this release's version.
        What the refusal says depends on how the read found its shard, not on the state the
        process reached meanwhile: a read that began before the switch and was refused after
        it is still one to retry."""
        if self._serving.handing_over:
            return self._read_handing_over(collection, as_of)
        self._serving.await_cutover()
        serving = self._serving.machine.appending()  # the serving leader reads its own shards
        try:
            table = self._snapshot(collection, as_of, leadership=serving)
        except FencedError:
            if serving is None:
                raise
            # The leadership ended under the read (a promotion, most often): the process
            # hands its reads over from now on, and this one is the first, rather than a
            # refusal that sends the client to a successor still holding its requests.
            self._serving.handing_over = True
            return self._read_handing_over(collection, as_of)
        except MigrationRefusedError as exc:
            promoted = self._serving.promoted
            if not (promoted or self._serving.machine.leadership):  # read-only: the leader reads it
                raise _read_only_refusal(self._serving.process_id, collection, exc) from exc
            if serving is not None:  # its own shard refused it: a real refusal
                raise
            # Before its switch: the old release's shards, readable once switched (a REWRITE).
            raise MigratingError(
                f"process {self._serving.process_id} is migrating: it reads {collection} once "
                f"its catalog switch committed ({exc.message})",
                collection=collection,
            ) from exc
        except BlobUnreachableError as exc:
            self._serving.machine.store.failed(exc)
            raise
        self._serving.machine.store.answered()
        return table

    def _read_handing_over(self, collection: str, as_of: int | None) -> pa.Table:
        """A read during a hand-over (:meth:`hand_over`): served through the catalog while it
        is at this release's version, else refused as fenced, for the client to follow the
        successor."""
        catalog = self._readable()
        try:
            return self._snapshot(collection, as_of, catalog)
        except MigrationRefusedError as exc:
            raise self._handed_on(f"cannot read {collection} ({exc.message})") from exc

    def _snapshot(
        self,
        collection: str,
        as_of: int | None,
        catalog: CatalogState | None = None,
        leadership: Leadership | None = None,
    ) -> pa.Table:
        """``collection`` as of ``as_of`` (its latest when None), through ``catalog`` (read
        now when None), or, for the serving leader (its ``leadership``), on its own shard."""
        builtin = self._serving.builtin(collection)
        if leadership is not None and catalog is None:  # the serving leader knows its shards
            shard = self._serving.leader_shard(leadership, builtin)
        else:
            shard = self._serving.shard_of(builtin, catalog)
        if as_of is not None:
            return _as_release(self._snapshot_at(shard, builtin, as_of), builtin)
        reads_with = self._reads_with.get(shard.shard_id)
        with self._readers(shard).reading(shard, reads_with) as state:  # nothing written
            self._reads_with[shard.shard_id] = find_schema_id(state, builtin.schema)
            if state.upper == 0:
                return update_schema(builtin.schema).empty_table()
            # The snapshot of one version of the state is always the same table: a read of
            # an unchanged shard takes it from memory.
            key = f"{shard.shard_id}@{state.version}.{state.body_version}:{builtin.fingerprint}"
            table = self._snapshots.get(key, None)
            if table is None:
                latest = self._latest(shard, state)
                table = _as_release(latest, builtin)
                self._snapshots.put(key, None, table)
                self._hold(shard, state, latest, key if table is latest else None)
            return table

    def _latest(self, shard: Shard, state: ShardState) -> pa.Table:
        """The latest snapshot of ``state``: built on the one this process made before when
        it can be (:func:`catalog.shard.read.snapshot_after`: it reads and consolidates the
        batches written since alone, whatever merged the older ones), else whole."""
        found = self._held.get(shard.shard_id)
        if found is not None:
            upper, schema, key = found
            kept = self._snapshots.get(key, None)
            if kept is not None:
                held = Held(upper, schema, kept.drop_columns([TS]))
                table = snapshot_after(shard, state, held)
                if table is not None:
                    return table
        return shard.snapshot(None, state=state)

    def _hold(self, shard: Shard, state: ShardState, table: pa.Table, key: str | None) -> None:
        """Keep ``table``, the latest snapshot of ``state``, for the next read to build on:
        under ``key``, where the snapshot is kept already, else under a key of its own. The
        key goes with the upper the rows were read at, so a race never pairs one snapshot's
        rows with another's upper."""
        held = Held.of(state, table)
        if held is None:
            self._held.pop(shard.shard_id, None)
            return
        if key is None:  # migrated for this release: the shard's own rows are kept apart
            key = f"{shard.shard_id}#{next(self._numbers)}"
            self._snapshots.put(key, None, table)
        self._held[shard.shard_id] = (held.upper, held.schema, key)

    def _readers(self, shard: Shard) -> ReaderRegistry:
        """This process's reader registrations on ``shard``'s ZooKeeper connection."""
        registry = self._registry
        if registry is None or registry[0] is not shard.consensus:
            registry = (shard.consensus, ReaderRegistry(shard.consensus, self._serving.process_id))
            if self._registry is not None:
                self._registry[1].stop()
            self._registry = registry
        return registry[1]

    def _snapshot_at(self, shard: Shard, builtin: Builtin, as_of: int) -> pa.Table:
        """A read at an explicit time, under a per-read lease holding ``since`` below it."""
        collection = builtin.name
        state = shard.state()
        if not state.since <= as_of < state.upper:
            raise UnreadableTimeError(
                f"as_of {as_of} is outside the times {collection} can be read at: "
                f"[{state.since}, {state.upper}) (below: compacted; from the upper on: not "
                "written yet)",
                collection=collection,
                as_of=as_of,
                since=state.since,
                upper=state.upper,
            )
        reads_with = find_schema_id(state, builtin.schema)
        holder = self._serving.process_id
        with shard.lease(holder=holder, as_of=as_of, schema_id=reads_with, state=state) as lease:
            return shard.snapshot(as_of, state=lease.state)


def _as_release(table: pa.Table, builtin: Builtin) -> pa.Table:
    """A snapshot as ``builtin``'s release reads it (older batches migrated lazily)."""
    source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
    if not source.equals(builtin.schema):
        table = migrate_batch(table, source, builtin.schema, projection=True)
    return table


def _read_only_refusal(process_id: str, collection: str, exc: CatalogError) -> NotLeaderError:
    """A read a read-only process cannot make: its release cannot read the shards the catalog
    names (the other release's type changes, around a promotion or a rollback). The leader
    reads them, so the client follows it, as for a write (409 ``read-only``)."""
    return NotLeaderError(
        f"process {process_id} is read-only and its release cannot read {collection} as the "
        f"catalog holds it ({exc.message}): read through the leader",
        collection=collection,
    )
