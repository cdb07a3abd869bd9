"""In-process migrations for integration tests: a real Consensus that can 'die' before a
chosen write, and an environment whose leaders take over through a real election."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, Fence, Op
from catalog.environment import read_catalog
from catalog.errors import ConnectionLostError
from catalog.release import Release
from orchestrator.election import LeaderElection, Leadership, promote
from orchestrator.migrate import MigrationContext, migrate_as_leader


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
