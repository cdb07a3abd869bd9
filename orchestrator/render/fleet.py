"""The fleet as a terminal table: one line per environment, then the summary.

The table follows :mod:`orchestrator.render.fitted`: at 80 columns the leader, age and generation
columns give way first, the notes wrap, the green and final cells wrap between their words
(``pending`` over ``0.11.0``) and a long name after a hyphen; narrower still, one block per
environment.
"""

from __future__ import annotations

from typing import Final

from rich.console import Group, RenderableType
from rich.text import Text

from orchestrator.durations import short_duration
from orchestrator.fleet.report import FleetEntry, FleetReport
from orchestrator.render.fitted import FittedTable

_COLUMNS: Final = (
    "environment", "version", "gen", "state", "leader", "green", "final", "age", "notes",
)  # fmt: skip
_GIVES_WAY: Final = ("leader", "age", "gen")
_FOLDED: Final = {"notes": 14, "leader": 10}
_WORDED: Final = ("version", "green", "final")

_STATE_STYLE: Final = {
    "ok": "green",
    "pending": "yellow",
    "finalizing": "yellow",
    "green-waiting": "cyan",
    "migrating": "cyan",
    "empty": "dim",
}


def _cell(column: str, value: str) -> Text:
    if column == "state":
        return Text(value, style=_STATE_STYLE.get(value, "bold red"))
    if column == "notes" and value != "-":
        return Text(value, style="red")
    return Text(value)


def _leader(entry: FleetEntry) -> str:
    leader = entry.row.leader
    if leader is None or leader.id is None:
        return "none"
    if not leader.registered:
        return f"{leader.id} (gone)"
    phase = f"/{leader.phase}" if leader.phase and leader.phase != leader.state else ""
    return f"{leader.id} {leader.state}{phase}"


def _green(entry: FleetEntry, now: float) -> str:
    parts = []
    for g in entry.row.green:
        waited = None if g.since is None else now - g.since
        wait = "promoted" if g.promoted else short_duration(waited)
        parts.append(f"g{g.deploy_generation} {g.version} {wait}" + (" PAUSED" if g.paused else ""))
    return ", ".join(parts) or "-"


def _version(entry: FleetEntry) -> str:
    """The catalog's version; during a migration, the version it goes to as well."""
    row, leader = entry.row, entry.row.leader
    if (
        leader is not None
        and leader.state == "migrating"
        and leader.version
        and leader.version != row.version
    ):
        return f"{row.version or '-'} →{leader.version}"  # wraps as "0.10.0" over "→0.11.0"
    return row.version or "-"


def _final(entry: FleetEntry) -> str:
    row = entry.row
    if row.finalization in ("pending", "finalizing"):
        return f"{row.finalization} {row.pending_version}"
    return row.finalization or "-"


def _notes(entry: FleetEntry) -> str:
    row = entry.row
    notes = list(entry.assessment.stuck)
    if entry.assessment.overdue:
        notes.insert(0, "finalization overdue")
    if row.error:
        notes = [row.error]
    notes.extend(row.errors)
    notes.extend(row.warnings)
    return "; ".join(notes) or "-"


def _row(entry: FleetEntry, now: float, qualified: bool) -> dict[str, str]:
    row = entry.row
    age = entry.assessment.pending_seconds
    if age is None and row.finalization_since is not None:
        age = now - row.finalization_since
    return {
        "environment": row.name if qualified or row.environment is None else row.environment,
        "version": _version(entry),
        "gen": "-" if row.deploy_generation is None else str(row.deploy_generation),
        "state": entry.state,
        "leader": _leader(entry) if row.environment is not None else "-",
        "green": _green(entry, now),
        "final": _final(entry),
        "age": short_duration(age),
        "notes": _notes(entry),
    }


def _counts(counted: dict[str, int]) -> str:
    return ", ".join(f"{key} {count}" for key, count in counted.items()) or "none"


def render_fleet(report: FleetReport) -> RenderableType:
    """The table of the report's shown environments, and the summary of all of them."""
    now = report.read_at
    qualified = len(report.surveys) > 1
    shown = report.shown
    summary = report.summary()
    title = f"fleet: {summary['environments']} environments"
    if len(shown) != len(report.entries):
        title += f", {len(shown)} shown"
    parts: list[RenderableType] = [
        FittedTable(
            title,
            _COLUMNS,
            [_row(e, now, qualified) for e in shown],
            gives_way=_GIVES_WAY,
            folded=_FOLDED,
            wide="notes",
            worded=_WORDED,
            hyphenated=("environment",),
            cell=_cell,
        )
        if shown
        else Text(f"{title}: none to show", style="bold"),
        Text(f"by state: {_counts(summary['by_state'])}"),
        Text(f"by version: {_counts(summary['by_version'])}"),
        Text(
            f"stuck {summary['stuck']}, pending {summary['pending']}, finalization overdue "
            f"{summary['finalization_overdue']}"
        ),
        Text(
            f"oldest unpromoted {short_duration(summary['oldest_unpromoted_seconds'])}, "
            f"oldest pending {short_duration(summary['oldest_pending_seconds'])}"
        ),
    ]
    for survey in report.surveys:
        if survey.error:
            parts.append(Text(f"ensemble {survey.ensemble.name}: {survey.error}", style="bold red"))
    return Group(*parts)
