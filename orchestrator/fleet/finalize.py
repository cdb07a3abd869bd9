"""``catalog-upgrade fleet finalize``: finalize many environments at once.

The targets are the environments whose upgrade to ``version`` is pending (not yet decided),
switched longer than ``older_than`` ago, and whose name matches ``env`` (a glob): what a dry run
shows. With ``--yes`` each one is finalized through the same compare-and-set as ``finalize``
(:func:`orchestrator.migrate.request_finalization`, expecting ``version``: an environment rolled
back meanwhile is refused, not finalized), with who asked recorded in its pending upgrade and
logged. One environment's failure never stops the others; each outcome is reported.
"""

from __future__ import annotations

import fnmatch
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs
import structlog
from kazoo.handlers.threading import KazooTimeoutError

from catalog.errors import EXIT_OK, EXIT_UNEXPECTED, BadInputError, CatalogError
from orchestrator.fleet.ensembles import Ensemble
from orchestrator.fleet.report import FleetEntry, FleetReport
from orchestrator.migrate import request_finalization
from orchestrator.zookeeper.clients import close, consensus_for

__all__ = ["FinalizeOutcome", "check_version", "finalize_all", "finalize_targets"]

log = structlog.get_logger(__name__)


def check_version(report: FleetReport, version: str) -> None:
    """BadInputError (exit 2) when no environment that answered names ``version`` (as its
    version, its pending upgrade's, the one it upgraded from, or a process's): a typo, which
    would otherwise finalize nothing and read as success."""
    known: set[str] = set()
    for entry in report.environments:
        row = entry.row
        named = (row.version, row.pending_version, row.from_version, *row.versions)
        known.update(v for v in named if v)
    if version in known:
        return
    silent = [survey.ensemble.name for survey in report.surveys if survey.error]
    raise BadInputError(
        f"no environment of the fleet names version {version} (versions seen: "
        f"{', '.join(sorted(known)) or 'none'})"
        + (f"; ensembles that did not answer: {', '.join(silent)}" if silent else ""),
        version=version,
    )


def finalize_targets(
    report: FleetReport, version: str, older_than: float | None, env: str | None
) -> list[FleetEntry]:
    """The environments ``fleet finalize`` would finalize (see the module)."""
    chosen = []
    for entry in report.environments:
        row = entry.row
        if row.finalization != "pending" or row.pending_version != version:
            continue
        if env is not None and not (
            fnmatch.fnmatchcase(row.environment or "", env) or fnmatch.fnmatchcase(row.name, env)
        ):
            continue
        age = entry.assessment.pending_seconds
        if older_than is not None and (age is None or age < older_than):
            continue
        chosen.append(entry)
    return chosen


@attrs.frozen
class FinalizeOutcome:
    """What finalizing one environment did: ``finalized`` (decided now; its serving leader
    completes it), ``already`` (decided or final before), or ``failed`` with the error."""

    ensemble: str
    environment: str
    outcome: str
    error: str | None = None
    exit_code: int = EXIT_OK

    @property
    def ok(self) -> bool:
        return self.outcome != "failed"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def finalize_all(
    ensembles: Iterable[Ensemble],
    targets: Iterable[FleetEntry],
    *,
    version: str,
    requested_by: str,
    timeout: float,
) -> list[FinalizeOutcome]:
    """Finalize every target, ensemble by ensemble (one owner's connection each)."""
    by_ensemble: dict[str, list[str]] = defaultdict(list)
    for entry in targets:
        assert entry.row.environment is not None
        by_ensemble[entry.row.ensemble].append(entry.row.environment)
    outcomes: list[FinalizeOutcome] = []
    for ensemble in ensembles:
        names = by_ensemble.get(ensemble.name, [])
        if names:
            outcomes.extend(_finalize_on(ensemble, names, version, requested_by, timeout))
    return outcomes


def _finalize_on(
    ensemble: Ensemble, names: list[str], version: str, requested_by: str, timeout: float
) -> list[FinalizeOutcome]:
    try:
        client = ensemble.client(write=True)
        client.start(timeout=timeout)
    except (KazooTimeoutError, OSError, CatalogError) as exc:
        message = exc.message if isinstance(exc, CatalogError) else f"did not answer: {exc!r}"
        return [
            FinalizeOutcome(ensemble.name, name, "failed", message, EXIT_UNEXPECTED)
            for name in names
        ]
    outcomes = []
    try:
        for name in names:
            outcomes.append(_finalize_one(ensemble.name, client, name, version, requested_by))
    finally:
        close(client)
    return outcomes


def _finalize_one(
    ensemble: str, client: Any, name: str, version: str, requested_by: str
) -> FinalizeOutcome:
    started = time.time()
    try:
        answer = request_finalization(
            consensus_for(client, name),
            requested_by=requested_by,
            reason="fleet",
            expect_version=version,
        )
    except CatalogError as exc:
        log.warning("fleet_finalize_failed", ensemble=ensemble, environment=name, error=exc.message)
        return FinalizeOutcome(ensemble, name, "failed", exc.message, exc.exit_code)
    decision = None if answer.pending is None else answer.pending.finalizing
    decided_now = decision is not None and decision.requested_at >= started
    outcome = "finalized" if decided_now else "already"
    log.info(
        "fleet_finalize", ensemble=ensemble, environment=name, outcome=outcome, by=requested_by
    )
    return FinalizeOutcome(ensemble, name, outcome)
