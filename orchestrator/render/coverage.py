"""Lazy-migration coverage as a rich table: per collection, what each schema still holds."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from orchestrator.status.coverage import CoverageReport

__all__ = ["render_coverage"]


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(map(str, ids)) if ids else "-"


def render_coverage(report: CoverageReport, *, all_rows: bool = False, limit: int = 20) -> Table:
    """Collections with data under an old schema first (the work compaction has left), then the
    rest; the first ``limit`` rows unless ``all_rows``."""
    rows = sorted(report.collections, key=lambda c: (c.migrated, c.name))
    shown = rows if all_rows else rows[:limit]
    title = (
        f"lazy-migration coverage: {len(report.pending)} of {len(rows)} collection(s) hold "
        f"data under an old schema, {report.retirable} old schema(s) can retire"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("collection", overflow="fold")
    table.add_column("latest", justify="right")
    table.add_column("stored by schema id (batches/rows)", overflow="fold")
    table.add_column("readers by schema id", overflow="fold")
    table.add_column("needed", overflow="fold")
    table.add_column("can retire", overflow="fold")
    for item in shown:
        coverage = item.coverage
        stored = ", ".join(
            f"{u.schema_id}: {u.batches}/{u.rows:,}"
            + (f" (narrower {', '.join(u.narrower)})" if u.narrower else "")
            + (f" (old names {', '.join(u.renamed)})" if u.renamed else "")
            for u in coverage.schemas
            if u.batches
        )
        readers = ", ".join(f"{u.schema_id}: {u.readers}" for u in coverage.schemas if u.readers)
        table.add_row(
            item.name,
            str(coverage.latest_schema_id),
            Text(stored or "-", style="yellow" if not item.migrated else ""),
            readers or "-",
            _ids(coverage.needed),
            Text(_ids(coverage.retirable), style="green" if coverage.retirable else "dim"),
        )
    if len(shown) < len(rows):
        table.caption = f"{len(rows) - len(shown)} more collection(s): --all shows every one"
    return table
