"""``drift``'s table: every builtin of the release as the environment holds it, then each
difference."""

from __future__ import annotations

from typing import Final

from rich.console import Console
from rich.text import Text

from orchestrator.drift import DriftReport
from orchestrator.render.fitted import FittedTable

#: The table's columns. At 80 columns the shard and the contraction give way (the differences
#: below name an owed contraction that matters) and long names wrap; a fingerprint is never
#: cut (orchestrator.render.fitted).
_COLUMNS: Final = ("collection", "shard", "mechanism", "schema", "registered", "contraction")


def render_drift(report: DriftReport, console: Console) -> None:
    title = f"release {report.release} against the catalog at {report.catalog_version or '-'}"
    rows: list[dict[str, str | Text]] = []
    for row in report.collections:
        same = row.registered == row.fingerprint
        registered = row.registered[:12] if row.registered else "-"
        rows.append(
            {
                "collection": row.name,
                "shard": row.shard_id or "-",
                "mechanism": row.mechanism or "-",
                "schema": row.fingerprint[:12],
                "registered": Text(registered, style="" if same else "yellow"),
                "contraction": "owed" if row.contraction_owed else "-",
            }
        )
    console.print(
        FittedTable(
            title, _COLUMNS, rows, gives_way=("shard", "contraction"), folded={"collection": 30},
            wide="collection",
        )
    )  # fmt: skip
    if report.ok:
        console.print("no drift: the environment matches the release", style="green")
        return
    console.print(f"{len(report.drifts)} difference(s):", style="bold red")
    for drift in report.drifts:
        console.print(Text(f"  {drift.kind}: {drift.message}"))
