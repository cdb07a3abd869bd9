"""The CLI's tables for rows and drift (orchestrator.render): they fit the terminal and show
every value as written, never reading it as rich markup."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console, RenderableType

from orchestrator.drift import CollectionRow, Drift, DriftReport
from orchestrator.render.drift import render_drift
from orchestrator.render.row_table import render_rows

#: Text that rich would read as markup: a closing tag with nothing to close raises.
MARKUP = "[/oops] [bold]x"


def text_at(width: int, renderable: RenderableType) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def drift_at(width: int, report: DriftReport) -> str:
    console = Console(record=True, width=width, color_system=None)
    render_drift(report, console)
    return console.export_text()


def test_read_rows_show_values_as_written_and_turn_into_blocks_when_too_wide() -> None:
    """``read`` shows a bracketed value, a null and a long text whole: a table when it fits,
    one block per row (as ``psql``'s expanded display) when it does not; ``_ts`` is left out."""
    sql = "CREATE TABLE a_rather_long_table_name (id int, name text, address text)"
    table = pa.table({
        "id": ["u1", "u2"], "oid": [1, 2], "name": [MARKUP, "orders"], "owner_id": ["u1", None],
        "create_sql": [sql, None], "_ts": pa.array([5, 5], pa.uint64()), "_diff": [1, 1],
    })  # fmt: skip
    rows = render_rows(table, "mz_catalog.mz_tables as of 5", "2 rows (engine arrow)")
    wide = text_at(200, rows)
    assert f"│ {MARKUP} " in wide and f"│ {sql} │" in wide and "_ts" not in wide
    assert "│ null " in wide and wide.rstrip().endswith("2 rows (engine arrow)")
    narrow = text_at(60, rows)
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert f"u1\n  oid: 1\n  name: {MARKUP}\n  owner_id: u1\n" in narrow
    assert "u2\n  oid: 2\n  name: orders\n  owner_id: null\n" in narrow


def test_drift_fits_80_columns_and_shows_messages_as_written() -> None:
    """At 80 columns the shard and the contraction give way and no fingerprint is cut; a
    difference's message is printed as written."""
    row = CollectionRow(
        name="mz_internal.mz_cluster_replica_statuses", global_id="s22",
        shard_id="ae8a0254c5ed440fb66e02092aec257d", mechanism="replacement",
        fingerprint="34809f17d6440123", registered="9999aaaabbbb0000", contraction_owed=True,
    )  # fmt: skip
    drift = Drift("schema", row.name, "34809f17d644", "9999aaaabbbb", f"odd name {MARKUP}")
    report = DriftReport("0.12.0", "0.11.0", (row,), (drift,))
    narrow = drift_at(80, report)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    header = narrow[: narrow.index("┡")]
    assert "registered" in header and "shard" not in header and "contraction" not in header
    assert "│ 34809f17d644 │ 9999aaaabbbb │" in narrow
    assert f"  schema: odd name {MARKUP}" in narrow
    wide = drift_at(200, report)
    assert "ae8a0254c5ed440fb66e02092aec257d" in wide and "│ owed " in wide
