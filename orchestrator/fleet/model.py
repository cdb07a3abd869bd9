"""What the fleet view shows of each environment, read in one pass (orchestrator.fleet.read).

:class:`EnvironmentRow` is one environment as ZooKeeper holds it at ``read_at``; the judgement
of it (its state, why it is stuck, whether finalization is overdue) is
:mod:`orchestrator.fleet.rules`, and the whole fleet with its summary is
:class:`~orchestrator.fleet.report.FleetReport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


@attrs.frozen
class LeaderView:
    """The leader the epoch names: its process's state and phase when it is registered."""

    id: str | None
    registered: bool
    state: str | None = None
    phase: str | None = None
    phase_since: float | None = None
    version: str | None = None
    http: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class GreenGeneration:
    """A generation newer than the catalog's, with processes running: waiting to be promoted
    (or promoted, and its leader migrating)."""

    deploy_generation: int
    version: str
    processes: int
    states: tuple[str, ...]
    #: When its first process started: how long it has waited.
    since: float | None
    promoted: bool
    #: A long step of one of its processes is paused (`catalog-upgrade pause`).
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "states": list(self.states)}


@attrs.frozen
class EnvironmentRow:
    """One environment of one ensemble. ``error`` set: it (or its whole ensemble, when
    ``environment`` is None) could not be read, and the other fields say what is known."""

    ensemble: str
    environment: str | None
    read_at: float
    bootstrapped: bool = False
    version: str | None = None
    deploy_generation: int | None = None
    epoch: int | None = None
    promotion_target: int | None = None
    leader: LeaderView | None = None
    green: tuple[GreenGeneration, ...] = ()
    #: ``final``, ``pending``, ``finalizing`` or None (not bootstrapped).
    finalization: str | None = None
    #: Since when: the pending upgrade's switch, or when the version became final.
    finalization_since: float | None = None
    #: When the serving leader finalizes by itself (None: only ``finalize`` does).
    finalize_at: float | None = None
    pending_version: str | None = None
    from_version: str | None = None
    processes: int = 0
    failed: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    #: Median seconds of each phase in the environment's upgrade history.
    phase_history: Mapping[str, float] = attrs.field(factory=dict)
    warnings: tuple[str, ...] = ()
    drift: bool = False
    errors: tuple[str, ...] = ()
    error: str | None = None

    @property
    def name(self) -> str:
        """``ensemble/environment`` (``ensemble/*`` for an ensemble that did not answer)."""
        return f"{self.ensemble}/{self.environment or '*'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ensemble": self.ensemble,
            "environment": self.environment,
            "bootstrapped": self.bootstrapped,
            "version": self.version,
            "deploy_generation": self.deploy_generation,
            "epoch": self.epoch,
            "promotion_target": self.promotion_target,
            "leader": None if self.leader is None else self.leader.to_json(),
            "green": [g.to_json() for g in self.green],
            "finalization": {
                "state": self.finalization,
                "since": self.finalization_since,
                "finalize_at": self.finalize_at,
                "version": self.pending_version,
                "from_version": self.from_version,
            },
            "processes": self.processes,
            "failed": list(self.failed),
            "versions": list(self.versions),
            "phase_history": dict(self.phase_history),
            "warnings": list(self.warnings),
            "drift": self.drift,
            "errors": list(self.errors),
            "error": self.error,
        }
