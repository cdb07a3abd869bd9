"""The whole fleet at one moment: every environment judged, the filters, the summary, and the
``fleet --json`` document."""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

import attrs

from orchestrator.fleet.model import EnvironmentRow
from orchestrator.fleet.read import EnsembleSurvey
from orchestrator.fleet.rules import STATES, Assessment, Thresholds, assess


@attrs.frozen
class FleetEntry:
    """One row and its judgement."""

    row: EnvironmentRow
    assessment: Assessment

    @property
    def state(self) -> str:
        return self.assessment.state

    def to_json(self) -> dict[str, Any]:
        return {**self.row.to_json(), **self.assessment.to_json()}


@attrs.frozen
class FleetFilter:
    """Which rows to show. A row of an ensemble that did not answer, or of an environment that
    could not be read, is always shown: it may hide any of them."""

    stuck: bool = False
    pending: bool = False
    version: str | None = None
    env: str | None = None

    def matches(self, entry: FleetEntry) -> bool:
        row = entry.row
        if row.error is not None or row.errors:
            return True
        if self.env is not None and not (
            fnmatch.fnmatchcase(row.environment or "", self.env)
            or fnmatch.fnmatchcase(row.name, self.env)
        ):
            return False
        if self.version is not None and self.version not in row.versions:
            return False
        if self.stuck and not entry.assessment.stuck:
            return False
        return not self.pending or row.finalization in ("pending", "finalizing")

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


#: No filter: every row.
EVERYTHING: Final = FleetFilter()


@attrs.frozen
class FleetReport:
    """Every surveyed ensemble's environments, judged at ``read_at``."""

    read_at: float
    surveys: tuple[EnsembleSurvey, ...]
    entries: tuple[FleetEntry, ...]
    thresholds: Thresholds
    filter: FleetFilter = EVERYTHING

    @classmethod
    def of(
        cls,
        surveys: Iterable[EnsembleSurvey],
        thresholds: Thresholds,
        read_at: float,
        filter: FleetFilter = EVERYTHING,
    ) -> FleetReport:
        surveys = tuple(surveys)
        entries = tuple(
            # Each ensemble's rows at its survey's time (ZooKeeper's when ours is off).
            FleetEntry(row, assess(row, thresholds, survey.read_at))
            for survey in surveys
            for row in survey.rows
        )
        return cls(read_at, surveys, entries, thresholds, filter)

    @property
    def shown(self) -> tuple[FleetEntry, ...]:
        return tuple(e for e in self.entries if self.filter.matches(e))

    @property
    def environments(self) -> tuple[FleetEntry, ...]:
        """The entries of environments (not of ensembles that did not answer)."""
        return tuple(e for e in self.entries if e.row.environment is not None)

    def by_version(self) -> dict[str, int]:
        """Environments by their catalog's version (``-``: not bootstrapped or unreadable)."""
        counted = Counter(e.row.version or "-" for e in self.environments)
        return dict(sorted(counted.items()))

    def by_state(self) -> dict[str, int]:
        counted = Counter(e.state for e in self.entries)
        return {state: counted[state] for state in STATES if counted[state]}

    def oldest_unpromoted(self) -> float | None:
        return max(
            (e.assessment.unpromoted_seconds for e in self.entries
             if e.assessment.unpromoted_seconds is not None),
            default=None,
        )  # fmt: skip

    def oldest_pending(self) -> float | None:
        return max(
            (e.assessment.pending_seconds for e in self.entries
             if e.assessment.pending_seconds is not None),
            default=None,
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return {
            "environments": len(self.environments),
            "shown": len(self.shown),
            "by_version": self.by_version(),
            "by_state": self.by_state(),
            "stuck": sum(1 for e in self.environments if e.assessment.stuck),
            "pending": sum(
                1 for e in self.environments if e.row.finalization in ("pending", "finalizing")
            ),
            "finalization_overdue": sum(1 for e in self.entries if e.assessment.overdue),
            "oldest_unpromoted_seconds": self.oldest_unpromoted(),
            "oldest_pending_seconds": self.oldest_pending(),
            "unreachable_ensembles": sum(1 for s in self.surveys if s.error is not None),
        }

    def to_json(self) -> dict[str, Any]:
        """The ``fleet --json`` document."""
        return {
            "read_at": self.read_at,
            "thresholds": attrs.asdict(self.thresholds),
            "filter": self.filter.to_json(),
            "ensembles": [s.to_json() for s in self.surveys],
            "summary": self.summary(),
            "environments": [e.to_json() for e in self.shown],
        }
