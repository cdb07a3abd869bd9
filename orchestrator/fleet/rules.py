"""How the fleet view judges an environment: its state, why it is stuck, whether its
finalization is overdue. The thresholds have their one home here (a fleet file may change them:
orchestrator.fleet.ensembles); the alert rules of ``deploy/alerts`` use the same defaults.

States, the worst first (an environment shows the first that holds):

=============  ==============================================================================
unreachable    its ensemble did not answer (one row for the whole ensemble)
unreadable     its nodes could not be read or decoded
failed         a process of it is in state ``failed``
no-leader      bootstrapped, and no leader serving or migrating
empty          not bootstrapped
migrating      its leader is migrating (a promotion under way)
green-waiting  a newer generation runs read-only, not promoted yet
finalizing     finalization decided, the leader completes it
pending        the upgrade is reversible until finalized
ok             serving, final, nothing waiting
=============  ==============================================================================

Stuck: no serving leader; a leader's phase running past ``stuck_factor`` times the median of
that phase in the environment's history (and past a minute); a green generation unpromoted past
``unpromoted_after``; a failed process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from orchestrator.durations import parse_duration, short_duration
from orchestrator.fleet.model import EnvironmentRow
from orchestrator.migrate import FINALIZE_AFTER_SECONDS

STATES: Final = (
    "unreachable", "unreadable", "failed", "no-leader", "empty", "migrating", "green-waiting",
    "finalizing", "pending", "ok",
)  # fmt: skip

#: Materialize's guidance: a generation should not wait unpromoted longer than 6 hours.
UNPROMOTED_AFTER: Final = 6 * 3600.0
#: A pending upgrade is overdue an hour past the default rollback window.
FINALIZE_OVERDUE: Final = FINALIZE_AFTER_SECONDS + 3600.0
#: A phase is stuck past this many times its median in the history ...
STUCK_FACTOR: Final = 3.0
#: ... and past this many seconds (short phases vary more than they matter).
PHASE_FLOOR: Final = 60.0
#: A leader that finalizes by itself is overdue this long past its ``finalize_at``.
FINALIZE_GRACE: Final = 3600.0

#: Leader states in which an environment has a leader doing its work.
_LEADING: Final = frozenset({"serving", "migrating"})


@attrs.frozen
class Thresholds:
    """What counts as stuck or overdue (seconds)."""

    unpromoted_after: float = UNPROMOTED_AFTER
    finalize_overdue: float = FINALIZE_OVERDUE
    stuck_factor: float = STUCK_FACTOR

    @classmethod
    def of(cls, data: Mapping[str, Any], origin: str) -> Thresholds:
        """From a fleet file's ``[thresholds]``; BadInputError naming a bad or unknown key."""
        from catalog.errors import BadInputError

        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInputError(
                f"{origin}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})",
                key=unknown[0],
            )
        values: dict[str, float] = {}
        for key, value in data.items():
            if key == "stuck_factor":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1:
                    raise BadInputError(f"{origin}: stuck_factor must be a number above 1", key=key)
                values[key] = float(value)
            else:
                values[key] = parse_duration(value, f"{origin} {key}")
        return cls(**values)


@attrs.frozen
class Assessment:
    """An environment as judged at ``now``."""

    state: str
    stuck: tuple[str, ...] = ()
    #: The oldest unpromoted green generation's wait (None: none waits).
    unpromoted_seconds: float | None = None
    #: The pending upgrade's age (None: nothing pending).
    pending_seconds: float | None = None
    overdue: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "stuck": list(self.stuck)}


def serving(row: EnvironmentRow) -> bool:
    """Whether the environment has a registered leader serving or migrating."""
    leader = row.leader
    return leader is not None and leader.registered and leader.state in _LEADING


def assess(row: EnvironmentRow, thresholds: Thresholds, now: float) -> Assessment:
    """The state of ``row`` and why it is stuck (see the module's table)."""
    if row.error is not None:
        return Assessment(
            "unreachable" if row.environment is None else "unreadable", ("unreadable",)
        )
    stuck: list[str] = []
    unpromoted = [g for g in row.green if not g.promoted and g.since is not None]
    waited = max((now - g.since for g in unpromoted if g.since is not None), default=None)
    pending_age = None
    if row.finalization in ("pending", "finalizing") and row.finalization_since is not None:
        pending_age = max(0.0, now - row.finalization_since)
    overdue = row.finalization == "pending" and (
        (pending_age is not None and pending_age > thresholds.finalize_overdue)
        or (row.finalize_at is not None and now > row.finalize_at + FINALIZE_GRACE)
    )
    if row.failed:
        stuck.append(f"failed: {', '.join(row.failed)}")
    if row.bootstrapped and not serving(row):
        leader = row.leader
        why = (
            "none"
            if leader is None or leader.id is None
            else (
                f"{leader.id} not registered"
                if not leader.registered
                else f"{leader.id} {leader.state}"
            )
        )
        stuck.append(f"no serving leader ({why})")
    leader = row.leader
    if leader is not None and leader.phase and leader.phase_since is not None:
        usual = row.phase_history.get(leader.phase)
        took = now - leader.phase_since
        if usual is not None and took > max(PHASE_FLOOR, thresholds.stuck_factor * usual):
            stuck.append(
                f"phase {leader.phase} for {short_duration(took)} (usually {short_duration(usual)})"
            )
    if waited is not None and waited > thresholds.unpromoted_after:
        stuck.append(f"unpromoted for {short_duration(waited)}")
    if row.errors:
        state = "unreadable"
    elif row.failed:
        state = "failed"
    elif row.bootstrapped and not serving(row):
        state = "no-leader"
    elif not row.bootstrapped:
        state = "empty"
    elif leader is not None and leader.state == "migrating":
        state = "migrating"
    elif unpromoted:
        state = "green-waiting"
    elif row.finalization in ("finalizing", "pending"):
        state = row.finalization
    else:
        state = "ok"
    return Assessment(state, tuple(stuck), waited, pending_age, overdue)
