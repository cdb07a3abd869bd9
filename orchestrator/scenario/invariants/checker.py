"""The invariant checker: what the caller reports, and checking after every step."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.consensus.watch import (
    NOT_YET,
    NotYet,
    WaitTimeout,
    Watch,
    wait_until,
    watched_children,
)
from catalog.environment import (
    FINALIZE_KEY,
)
from catalog.release import Release
from orchestrator.scenario.invariants.acknowledged import RowRules
from orchestrator.scenario.invariants.durable import DurableRules
from orchestrator.scenario.invariants.view import (
    INVARIANTS,
    DurableView,
    TrackedRows,
    Violation,
    is_quiescent,
)

log = structlog.get_logger(__name__)


@attrs.define
class InvariantChecker:
    """Checks the invariants of one environment after every step; counts checks and catches.

    The invariants of the durable state and of the rows are its two collaborators."""

    consensus: Consensus
    blob: BlobStore
    releases: Sequence[Release]
    tracked: dict[str, TrackedRows] = attrs.field(factory=dict)
    checks: collections.Counter[str] = attrs.field(factory=collections.Counter)
    caught: collections.Counter[str] = attrs.field(factory=collections.Counter)
    durable: DurableRules = attrs.field(init=False)
    row_rules: RowRules = attrs.field(init=False)
    _last: DurableView | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.durable = DurableRules(self.releases)
        self.row_rules = RowRules(self.consensus, self.blob, self.releases, self.tracked)

    def track(self, collection: str, token_column: str) -> TrackedRows:
        return self.tracked.setdefault(collection, TrackedRows(collection, token_column))

    def acknowledged(self, collection: str, tokens: Iterable[str]) -> None:
        self.tracked[collection].acked.update(tokens)

    def unknown_outcome(self, collection: str, tokens: Iterable[str]) -> None:
        self.tracked[collection].uncertain.update(tokens)

    def stale_write(self, process: str, leader: str | None, answer: str) -> Violation:
        """A write acknowledged by ``process`` while the epoch named ``leader``."""
        violation = Violation(
            "no-stale-write",
            f"{process} acknowledged a write while {leader} led the current epoch: {answer}",
            {"process": process, "leader": leader},
        )
        self._count("no-stale-write", [violation])
        return violation

    def no_stale_write_checked(self) -> None:
        self._count("no-stale-write", [])

    def view(self) -> DurableView:
        return DurableView.read(self.consensus, self.blob)

    def _count(self, invariant: str, found: list[Violation]) -> list[Violation]:
        self.checks[invariant] += 1
        if found:
            self.caught[invariant] += len(found)
        return found

    def check(self, *, writes_expected: bool, rows: bool = True) -> list[Violation]:
        """Every invariant but the final cleanup, after one step.

        ``writes_expected``: the step itself makes leaders write (append, promote, a fault that
        forces a takeover...). Otherwise, when the environment was quiescent before and after
        the step (the epoch's leader serving, nobody migrating, no takeover in between), nothing
        outside read-only processes' own keys may have changed.
        """
        view = self.view()
        found: list[Violation] = []
        found += self._count("single-leader", self.durable.single_leader(view))
        before = self._last
        if (
            not writes_expected
            and before is not None
            and is_quiescent(before)
            and is_quiescent(view)
            and before.epoch_number == view.epoch_number
        ):
            found += self._count("read-only-writes-nothing", self.durable.read_only(before, view))
        found += self._count("replacement-agreement", self.durable.agreement(view))
        found += self._count("referenced-not-finalized", self.durable.referenced(view))
        found += self._count("releases-can-start", self.durable.releases_start(view))
        if rows:
            found += self._count("rows-never-lost", self.row_rules.rows(view))
        self._last = view
        for violation in found:
            log.warning(
                "invariant_violated", invariant=violation.invariant, message=violation.message
            )
        return found

    def check_cleanup(self, timeout: float = 30.0) -> list[Violation]:
        """After the finalizer drained the queue: every unreferenced shard is finalized."""
        self._wait_queue_empty(timeout)
        view = self.view()
        found = []
        for shard_id, state in sorted(view.states.items()):
            if shard_id in view.referenced() or state is None:
                continue
            if not state.finalized:
                queued = shard_id in view.finalize_queue
                found.append(
                    Violation(
                        "unreferenced-cleaned",
                        f"shard {shard_id} is referenced by neither the catalog nor a migration "
                        f"entry, yet not finalized{' (still queued)' if queued else ''}",
                        {"shard_id": shard_id, "queued": queued, "upper": state.upper},
                    )
                )
        return self._count("unreferenced-cleaned", found)

    def _wait_queue_empty(self, timeout: float) -> None:
        """Until the finalization queue is empty, at most ``timeout`` seconds."""
        path = self.consensus.path(FINALIZE_KEY)

        def look(watch: Watch) -> bool | NotYet:
            return NOT_YET if watched_children(self.consensus.client, path, watch) else True

        with contextlib.suppress(WaitTimeout):  # the cleanup invariant reports what is left
            wait_until(look, timeout, safety=1.0)

    def summary(self) -> dict[str, Any]:
        return {
            name: {"checks": self.checks.get(name, 0), "caught": self.caught.get(name, 0)}
            for name in INVARIANTS
        }
