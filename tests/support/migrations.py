"""In-process migrations for integration tests: a real Consensus that can 'die' before a
chosen write, and an environment whose leaders take over through a real election."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence, Op
from catalog.environment import read_catalog
from catalog.errors import ConnectionLostError
from catalog.release import Release
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Rows, Shard, append_rows
from orchestrator.election import LeaderElection, Leadership, promote
from orchestrator.migrate import (
    MigrationContext,
    check_read_only,
    complete_finalization,
    migrate_as_leader,
    request_finalization,
)


class SimulatedCrash(BaseException):
    """Raised instead of a durable write: the process 'dies' right before it."""


@attrs.define
class CrashingConsensus(Consensus):
    """A real Consensus that dies before its (crash_after+1)-th transaction, or loses the
    answer of its lose_after-th (the write lands, the caller sees ConnectionLostError).

    Every durable write of the orchestrator is one ``commit``, so crashing before commit N
    covers the crash point "between write N-1 and write N".
    """

    crash_after: int | None = None
    commits: int = 0
    lose_after: int | None = None

    def commit(self, ops: Sequence[Op], *, fence: Fence | None = None) -> list[Any]:
        if self.crash_after is not None and self.commits >= self.crash_after:
            raise SimulatedCrash(f"crash before write {self.commits + 1}")
        self.commits += 1
        result = super().commit(ops, fence=fence)
        if self.lose_after is not None and self.commits == self.lose_after:
            raise ConnectionLostError(f"answer of write {self.commits} lost (it landed)")
        return result


@attrs.define
class Env:
    """One environment: its ZooKeeper store, its blob store, and started elections."""

    client: KazooClient
    root: str
    blob: BlobStore
    elections: list[LeaderElection] = attrs.field(factory=list)
    counter: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))

    def consensus(
        self, crash_after: int | None = None, lose_after: int | None = None
    ) -> CrashingConsensus:
        return CrashingConsensus(
            self.client, self.root, crash_after=crash_after, lose_after=lose_after
        )

    def ctx(
        self,
        release: Release,
        generation: int,
        *,
        crash_after: int | None = None,
        lose_after: int | None = None,
        **options: Any,
    ) -> MigrationContext:
        """A context of ``release`` at ``generation``; ``options``: other MigrationContext
        fields (finalize_after, rollback_from, discard_writes_to)."""
        return MigrationContext(
            consensus=self.consensus(crash_after, lose_after),
            blob=self.blob,
            release=release,
            deploy_generation=generation,
            process_id=f"p{next(self.counter)}",
            **options,
        )

    def lead(self, ctx: MigrationContext) -> Leadership:
        """Join the election of ctx's generation, promote it, and take over (real election)."""
        election = LeaderElection(
            Consensus(self.client, self.root),
            ctx.process_id,
            ctx.deploy_generation,
            release=str(ctx.version),
            on_change=lambda _event: None,
        )
        election.start()
        self.elections.append(election)
        bootstrap = read_catalog(ctx.consensus) is None
        if not bootstrap:
            promote(Consensus(self.client, self.root), ctx.deploy_generation, requested_by="test")
        leadership = election.try_take_over(bootstrap=bootstrap)
        assert leadership is not None
        return leadership

    def close(self) -> None:
        for election in self.elections:
            election.stop()


def bootstrap(env: Env, release: Release, generation: int = 1) -> MigrationContext:
    ctx = env.ctx(release, generation)
    migrate_as_leader(ctx, env.lead(ctx))
    return ctx


def upgrade(
    env: Env, release: Release, generation: int, **options: Any
) -> tuple[MigrationContext, Leadership]:
    """``release`` at ``generation``: its read-only check, then promoted and led through its
    migration (``options``: other MigrationContext fields, e.g. ``finalize_after=None``)."""
    ctx = env.ctx(release, generation, **options)
    check_read_only(ctx)
    leadership = env.lead(ctx)
    migrate_as_leader(ctx, leadership)
    return ctx, leadership


def finalize(ctx: MigrationContext, leadership: Leadership) -> None:
    """The operator's decision, then the serving leader's work (what ``finalize`` does)."""
    request_finalization(ctx.consensus, requested_by="test", reason="operator")
    assert complete_finalization(ctx, leadership.fence) is not None


def collection_shard(ctx: MigrationContext, name: str) -> Shard:
    """The shard the catalog names for collection ``name``."""
    found = read_catalog(ctx.consensus)
    assert found is not None
    return ctx.shard(found[0].by_name()[name].shard_id)


def append_as_release(ctx: MigrationContext, name: str, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` as ctx's release does: in its own schema of ``name``."""
    builtin = ctx.release.builtin(name)
    assert builtin is not None
    table = pa.Table.from_pylist(rows, schema=builtin.schema)
    append_rows(collection_shard(ctx, name), Rows(table, builtin.schema))


def read_as_release(ctx: MigrationContext, name: str, key: str = "id") -> list[dict[str, Any]]:
    """``name`` as ctx's release reads it (the sidecar's way): the snapshot migrated to its
    schema, rows by ``key``."""
    builtin = ctx.release.builtin(name)
    assert builtin is not None
    data = collection_shard(ctx, name).snapshot()
    source = pa.schema([f for f in data.schema if f.name not in (TS, DIFF)])
    data = migrate_batch(data, source, builtin.schema, projection=True).drop_columns([TS, DIFF])
    assert data.schema.equals(builtin.schema)
    return sorted(data.to_pylist(), key=lambda r: r[key])
