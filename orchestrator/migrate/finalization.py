"""Finalization: the end of an upgrade's reversible window (docs/design-upgrade.md).

Two steps, so a crash anywhere leaves a state a restart completes:

1. *The decision* (:func:`request_finalization`): one compare-and-set marks the pending upgrade
   ``finalizing``, naming who decided and why. Anyone may take it (the ``finalize`` command,
   ``POST /finalize``, the leader's timer, a newer release's leader): from that write on no
   rollback is admitted, and the decision is never undone.
2. *The work* (:func:`complete_finalization`), by the serving leader, every write fenced by its
   epoch: register the contractions the upgrade's version owes, retire the schema nodes only the
   previous catalog kept, and, in one transaction, record in the catalog that its version is
   final (the generation, when, who decided) and delete the pending node. The shards the
   upgrade replaced were queued for finalization by its switch; the leader's cleanup
   finalizes them once the pending node is gone (``orchestrator.migrate.cleanup``). Each step
   is idempotent: a leader killed between any two writes is succeeded by one that redoes the
   rest.
"""

from __future__ import annotations

import time

import attrs
import structlog

from catalog.consensus import Consensus, Delete, Fence
from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until, watched_data
from catalog.environment import (
    PENDING_KEY,
    Finalized,
    catalog_write_op,
    read_catalog,
    retired_schema_ops,
)
from catalog.errors import CatalogError, MigrationRefusedError
from catalog.pending import Finalizing, PendingUpgrade, pending_write_op, read_pending
from catalog.retry import CasRetry
from catalog.shard import ShardState
from orchestrator.migrate.context import PHASE_FINALIZING, MigrationContext
from orchestrator.migrate.evolution import contract_all

__all__ = [
    "FinalizeAnswer",
    "complete_finalization",
    "finalization_due",
    "request_finalization",
    "wait_finalized",
]

log = structlog.get_logger(__name__)


@attrs.frozen
class FinalizeAnswer:
    """What a finalization request found: the catalog's version and generation, and the
    pending upgrade it marked (None: the version was final already)."""

    version: str | None
    deploy_generation: int | None
    pending: PendingUpgrade | None

    @property
    def already_final(self) -> bool:
        return self.pending is None

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "already_final": self.already_final,
            "pending": None if self.pending is None else self.pending.status_json(),
        }


def request_finalization(
    consensus: Consensus,
    *,
    requested_by: str,
    reason: str,
    expect_version: str | None = None,
) -> FinalizeAnswer:
    """Decide to finalize the pending upgrade (idempotent: a decision stands).

    ``expect_version``: refuse (exit 4, rule ``finalize-version``) unless the upgrade pending,
    or the final catalog, is at that version: so a ``finalize`` meant for an upgrade that was
    rolled back meanwhile does not report success for something else."""

    def attempt() -> FinalizeAnswer:
        found = read_pending(consensus)
        catalog = read_catalog(consensus)
        version = None if catalog is None else catalog[0].version
        generation = None if catalog is None else catalog[0].deploy_generation
        at = found[0].version if found is not None else version
        if expect_version is not None and at != expect_version:
            raise MigrationRefusedError(
                f"finalize expected version {expect_version}, but the environment is at "
                f"{at or 'nothing (not bootstrapped)'}"
                + (" (pending)" if found is not None else " (final)"),
                rule="finalize-version",
                expected=expect_version,
                version=at,
            )
        if found is None:
            return FinalizeAnswer(version, generation, None)
        pending, znode_version = found
        if pending.finalizing is None:
            decided = attrs.evolve(
                pending, finalizing=Finalizing(requested_by, time.time(), reason)
            )
            consensus.commit([pending_write_op(decided, znode_version)])
            log.info(
                "finalization_requested",
                version=pending.version,
                deploy_generation=pending.deploy_generation,
                requested_by=requested_by,
                reason=reason,
            )
            pending = decided
        return FinalizeAnswer(version, generation, pending)

    return CasRetry()(attempt)


def wait_finalized(consensus: Consensus, timeout: float) -> None:
    """Return once no upgrade is pending (the serving leader completed the finalization);
    CatalogError (``reason="timeout"``, exit 1) after ``timeout`` seconds. Driven by a
    ZooKeeper watch on the pending node."""
    client = consensus.client
    path = consensus.path(PENDING_KEY)

    def look(watch: Watch) -> bool | NotYet:
        return True if watched_data(client, path, watch) is None else NOT_YET

    try:
        wait_until(look, timeout)
    except WaitTimeout:
        raise CatalogError(
            f"the upgrade was not finalized within {timeout:g} s: is a leader serving? (the "
            "decision stands; the serving leader completes it)",
            reason="timeout",
        ) from None


def finalization_due(pending: PendingUpgrade, switched_at: float, now: float) -> bool:
    """Whether the leader's timer decides now (a decision taken already stands).

    ``switched_at`` and ``now`` are on ZooKeeper's clock (the pending node's ``ctime``,
    :func:`catalog.pending.switched_at`, and a fresh write's ``mtime``): the window is the
    duration the switching leader set (``finalize_at - since``), so no host's clock decides,
    and a successor whose clock runs ahead finalizes nothing early."""
    return (
        pending.finalizing is None
        and pending.finalize_at is not None
        and now - switched_at >= pending.finalize_at - pending.since
    )


def complete_finalization(
    ctx: MigrationContext, fence: Fence, known: dict[str, ShardState] | None = None
) -> PendingUpgrade | None:
    """The serving leader's half: contract, retire, delete the pending node (all fenced).
    Returns the upgrade finalized now, or None when none was decided."""
    found = read_pending(ctx.consensus)
    if found is None or found[0].finalizing is None:
        return None
    pending, znode_version = found
    catalog = read_catalog(ctx.consensus)
    if catalog is None:  # pragma: no cover - a pending upgrade was written with a catalog
        return None
    ctx.on_phase(PHASE_FINALIZING)
    contracted = contract_all(ctx, catalog[0], fence, {} if known is None else known,
                              version=pending.version)  # fmt: skip
    retired = retired_schema_ops(ctx.consensus, catalog[0])
    if retired:
        ctx.consensus.commit_chunked(retired, fence=fence)
    assert pending.finalizing is not None
    state, state_version = catalog
    by = pending.finalizing.requested_by
    final = attrs.evolve(state, finalized=Finalized(pending.deploy_generation, time.time(), by))
    ctx.consensus.commit(
        [catalog_write_op(final, state_version), Delete(PENDING_KEY, znode_version)], fence=fence
    )
    log.info(
        "upgrade_finalized",
        version=pending.version,
        deploy_generation=pending.deploy_generation,
        from_version=pending.from_version,
        contracted=contracted,
        requested_by=pending.finalizing.requested_by,
        reason=pending.finalizing.reason,
        pending_seconds=round(time.time() - pending.since, 3),
    )
    return pending
