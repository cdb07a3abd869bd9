"""What a sidecar serves, as its reads and appends see it: the builtin a collection's name
stands for, the shard that holds it now, and the wait of a cut-over to this process.

A follower reads its own replacement shard where it has one (what it will serve once
promoted); otherwise a collection's shard is the one the catalog names. The serving leader
knows its shards: they do not change while one leadership serves (switches happen in its
migration, before it serves), so it reads them once per leadership.
"""

from __future__ import annotations

from typing import Any, Final

from catalog.environment import CatalogCache, CatalogState
from catalog.errors import BadInputError, CatalogError
from catalog.release import Builtin, Release
from catalog.shard import Shard
from orchestrator.machine.config import SidecarConfig
from orchestrator.machine.connection import SidecarConnection
from orchestrator.machine.machine import SidecarMachine
from orchestrator.machine.progress import Progress
from orchestrator.machine.states import State
from orchestrator.process_node import FINAL_STATES

#: Seconds an append waits, during a cut-over to this process, for it to serve: what it
#: answers then (its own commit) comes sooner than a refusal the client would retry after.
CUTOVER_HOLD_SECONDS = 5.0
#: States after which a cut-over is over, served or not.
_CUT_OVER: Final = frozenset({State.SERVING, *FINAL_STATES})


class NotLeaderError(CatalogError):
    """A write asked of a read-only process: it goes through the leader."""

    code = "read-only"


class NoShardError(CatalogError):
    """The collection has no shard yet (not bootstrapped, or new and not promoted)."""

    code = "no-shard"


class UnknownCollectionError(BadInputError):
    """The release has no builtin collection of that name."""

    code = "unknown-collection"


class Serving:
    """The collections of one process's release, and where each is read and written now."""

    def __init__(
        self,
        config: SidecarConfig,
        release: Release,
        connection: SidecarConnection,
        machine: SidecarMachine,
        progress: Progress,
    ) -> None:
        self.config = config
        self.release = release
        self.connection = connection
        self.machine = machine
        self.progress = progress
        #: Set once this leader is fenced by a promotion: it reads through the catalog only
        #: (orchestrator.dataplane.reader), never its replacement shards.
        self.handing_over = False
        self._leader_shards: tuple[object, dict[str, str]] = (None, {})
        #: The catalog as its reads last found it (they read it while this process does not
        #: serve: following, migrating, handing over).
        self.catalogs = CatalogCache()

    @property
    def process_id(self) -> str:
        return self.config.process_id

    @property
    def promoted(self) -> bool:
        """Whether this process's generation is to lead: promoted, or bootstrapping."""
        return self.machine.to_lead()

    def builtin(self, collection: str) -> Builtin:
        """The builtin ``collection`` names in this release; UnknownCollectionError if none."""
        builtin = self.release.builtin(collection)
        if builtin is None:
            raise UnknownCollectionError(
                f"release {self.release.version} has no builtin collection {collection} "
                "(name it SCHEMA.NAME)",
                collection=collection,
            )
        return builtin

    def session_wait(self) -> float:
        """How long an attempt waits for a suspended session: a third of the session timeout
        (at most 5 s). A ZooKeeper server that died moves the client to another meanwhile, and
        a ConnectionLoss is retried by the write's identity; only a session still suspended
        after that answers 503."""
        return min(5.0, self.config.session_timeout / 3)

    def await_cutover(self) -> None:
        """While this process's generation is promoted and it does not serve yet (it takes
        over, it migrates), a request waits for it to serve, at most
        :data:`CUTOVER_HOLD_SECONDS`, instead of being refused at once: the client that
        follows the leader gets its answer as soon as the new leader commits, not a
        ``Retry-After`` later. Any other process answers at once."""
        if not self.promoted:
            return
        machine, progress = self.machine, self.progress
        progress.wait_until(
            lambda: progress.state in _CUT_OVER or machine.appending() is not None,
            CUTOVER_HOLD_SECONDS,
        )

    def leader_shard(self, leadership: Any, builtin: Builtin) -> Shard:
        """The shard a leader appends to for ``builtin`` (read once per leadership)."""
        leadership.check(self.session_wait())
        known, shards = self._leader_shards
        if known is not leadership:
            shards = {}
            self._leader_shards = (leadership, shards)
        shard_id = shards.get(builtin.global_id)
        if shard_id is None:
            shard = self.shard_of(builtin)
            shards[builtin.global_id] = shard.shard_id
            return shard
        return self.shard(shard_id)

    def shard_of(self, builtin: Builtin, catalog: CatalogState | None = None) -> Shard:
        """The shard this process reads and writes for ``builtin``: its replacement while it
        follows, else the collection's shard in ``catalog`` (read now when None)."""
        machine = self.machine
        check = machine.check
        if machine.leadership is None and check is not None and not self.handing_over:
            shard_id = check.replacement_shards.get(builtin.global_id)
            if shard_id is not None:
                return self.shard(shard_id)
        if catalog is None:
            # A leader's own session has seen the epoch that fenced every earlier leader's
            # appends, and its own switch: its catalog needs no sync (as its shards need no
            # catalog once it serves). Any other process syncs first.
            found = self.catalogs.read(
                self.connection.require(), synced=machine.leadership is None
            )
            catalog = found[0] if found else None
        ref = catalog.collections.get(builtin.global_id) if catalog else None
        if ref is None:
            raise NoShardError(
                f"collection {builtin.name} has no shard yet (environment not bootstrapped, or "
                "the builtin is new in this release and not promoted)",
                collection=builtin.name,
            )
        return self.shard(ref.shard_id)

    def shard(self, shard_id: str) -> Shard:
        """Shard ``shard_id`` on the process's connection and blob store."""
        return Shard(
            self.connection.require(),
            self.machine.blob,
            shard_id,
            key_retention=self.config.idempotency_retention,
        )
