"""The upgrade history as a table (``catalog-upgrade history``)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from rich.table import Table

from orchestrator.history import UpgradeRecord

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


def render_history(rows: Sequence[UpgradeRecord], env: str) -> Table:
    table = Table(title=f"upgrades of {env} (UTC)", caption=f"{len(rows)} upgrade(s)")
    for column in ("gen", "from", "to", "promoted", "by", "leader", "phases", "took", "outcome"):
        table.add_column(column)
    for row in rows:
        phases = ", ".join(f"{p.name} {p.seconds:.1f}s" for p in row.phases) or "-"
        outcome = f"[{_STYLES.get(row.outcome, 'white')}]{row.outcome}[/]"
        if row.finalized_at is not None and row.finalized_by not in (None, "immediately"):
            outcome += f"\nfinal {_when(row.finalized_at)} by {row.finalized_by}"
        if row.discarded:
            outcome += f"\ndiscarded writes to {', '.join(row.discarded)}"
        if row.rule or row.reason:
            outcome += f"\n{row.rule or ''}: {row.reason or ''}".rstrip(": ")
        leader = row.leader if row.host is None else f"{row.leader}@{row.host}"
        table.add_row(
            str(row.deploy_generation),
            row.from_version or "-",
            row.to_version,
            _when(row.promoted_at or row.took_over_at),
            row.promoted_by or "-",
            leader or "-",
            phases,
            _seconds(row.seconds),
            outcome,
        )
    return table
