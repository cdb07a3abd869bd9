"""``drift``'s table: every builtin of the release as the environment holds it, then each
difference."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.drift import DriftReport


def render_drift(report: DriftReport, console: Console) -> None:
    title = f"release {report.release} against the catalog at {report.catalog_version or '-'}"
    table = Table(title=title, title_justify="left")
    for column in ("collection", "shard", "mechanism", "schema", "registered", "contraction"):
        table.add_column(column, overflow="fold")
    for row in report.collections:
        same = row.registered == row.fingerprint
        table.add_row(
            row.name,
            row.shard_id or "-",
            row.mechanism or "-",
            row.fingerprint[:12],
            Text(row.registered[:12] if row.registered else "-", style="" if same else "yellow"),
            "owed" if row.contraction_owed else "-",
        )
    console.print(table)
    if report.ok:
        console.print("no drift: the environment matches the release", style="green")
        return
    console.print(f"{len(report.drifts)} difference(s):", style="bold red")
    for drift in report.drifts:
        console.print(f"  {drift.kind}: {drift.message}", highlight=False)
