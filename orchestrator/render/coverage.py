"""Lazy-migration coverage as a rich table: per collection, what each schema still holds."""

from __future__ import annotations

from typing import Final

from rich.console import Group, RenderableType
from rich.text import Text

from orchestrator.render.fitted import FittedTable
from orchestrator.status.coverage import CoverageReport

__all__ = ["render_coverage"]


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(map(str, ids)) if ids else "-"


#: The coverage table's columns; at 80 columns ``needed`` (what is stored or read, and the
#: latest) gives way and the collection and free-text columns wrap (orchestrator.render.fitted).
_COLUMNS: Final = (
    "collection", "latest", "stored by schema id (batches/rows)", "readers by schema id",
    "needed", "can retire",
)  # fmt: skip
_FOLDED: Final = {
    "collection": 24, "stored by schema id (batches/rows)": 14, "readers by schema id": 10,
}  # fmt: skip


def render_coverage(
    report: CoverageReport, *, all_rows: bool = False, limit: int = 20
) -> RenderableType:
    """Collections with data under an old schema first (the work compaction has left), then the
    rest; the first ``limit`` rows unless ``all_rows``."""
    rows = sorted(report.collections, key=lambda c: (c.migrated, c.name))
    shown = rows if all_rows else rows[:limit]
    title = (
        f"lazy-migration coverage: {len(report.pending)} of {len(rows)} collection(s) hold "
        f"data under an old schema, {report.retirable} old schema(s) can retire"
    )
    lines: list[dict[str, str | Text]] = []
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
        lines.append(
            {
                "collection": item.name,
                "latest": str(coverage.latest_schema_id),
                "stored by schema id (batches/rows)": Text(
                    stored or "-", style="yellow" if not item.migrated else ""
                ),
                "readers by schema id": readers or "-",
                "needed": _ids(coverage.needed),
                "can retire": Text(
                    _ids(coverage.retirable), style="green" if coverage.retirable else "dim"
                ),
            }
        )
    table = FittedTable(
        title,
        _COLUMNS,
        lines,
        gives_way=("needed",),
        folded=_FOLDED,
        wide="collection",
    )
    if len(shown) < len(rows):
        more = f"{len(rows) - len(shown)} more collection(s): --all shows every one"
        return Group(table, Text(more, style="italic"))
    return table
