"""The upgrade history as a table (``catalog-upgrade history``)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Final

from rich.console import Group, RenderableType
from rich.text import Text

from orchestrator.history import UpgradeRecord
from orchestrator.render.fitted import FittedTable

_STYLES = {
    "completed": "green",
    "bootstrapped": "green",
    "running": "yellow",
    "aborted": "yellow",
    "refused": "red",
    "fenced": "red",
    "failed": "red",
    "pending": "bold yellow",
    "rolled back": "magenta",
    "rollback": "magenta",
}


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


#: The history's columns. At 80 columns the phases, the leader and who promoted give way, in
#: this order, and the outcome wraps (orchestrator.render.fitted).
_COLUMNS: Final = ("gen", "from", "to", "promoted", "by", "leader", "phases", "took", "outcome")
_GIVES_WAY: Final = ("phases", "leader", "by")
_FOLDED: Final = {"phases": 16, "outcome": 14}


def render_history(rows: Sequence[UpgradeRecord], env: str) -> RenderableType:
    """Every upgrade of ``env``, oldest first, as a table that fits the terminal."""
    lines: list[dict[str, str | Text]] = []
    for row in rows:
        outcome = Text(row.outcome, style=_STYLES.get(row.outcome, "white"))
        if row.finalized_at is not None and row.finalized_by not in (None, "immediately"):
            outcome.append(f"\nfinal {_when(row.finalized_at)} by {row.finalized_by}")
        if row.discarded:
            outcome.append(f"\ndiscarded writes to {', '.join(row.discarded)}")
        if row.rule or row.reason:
            outcome.append(f"\n{row.rule or ''}: {row.reason or ''}".rstrip(": "))
        leader = row.leader if row.host is None else f"{row.leader}@{row.host}"
        lines.append(
            {
                "gen": str(row.deploy_generation),
                "from": row.from_version or "-",
                "to": row.to_version,
                "promoted": _when(row.promoted_at or row.took_over_at),
                "by": row.promoted_by or "-",
                "leader": leader or "-",
                "phases": ", ".join(f"{p.name} {p.seconds:.1f}s" for p in row.phases) or "-",
                "took": _seconds(row.seconds),
                "outcome": outcome,
            }
        )
    table = FittedTable(
        f"upgrades of {env} (UTC)",
        _COLUMNS,
        lines,
        gives_way=_GIVES_WAY,
        folded=_FOLDED,
        wide="outcome",
    )
    return Group(table, Text(f"{len(rows)} upgrade(s)", style="italic"))
