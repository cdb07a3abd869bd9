"""The upgrade history's values (orchestrator.history): phases and the record format."""

from __future__ import annotations

from rich.console import Console

from orchestrator.history import Phase, UpgradeRecord, phases_of
from orchestrator.render.history import render_history


def test_each_phase_ends_where_the_next_begins() -> None:
    entered = [("taking over", 100.0), ("registering schemas", 100.5), ("switching", 103.0)]
    phases = phases_of(entered, 104.25)
    assert [(p.name, p.seconds) for p in phases] == [
        ("taking over", 0.5),
        ("registering schemas", 2.5),
        ("switching", 1.25),
    ]
    assert phases_of([], 5.0) == ()


def test_a_record_round_trips_and_counts_from_its_promotion() -> None:
    record = UpgradeRecord(
        deploy_generation=2,
        to_version="0.11.0",
        outcome="completed",
        from_version="0.10.0",
        promoted_by="ops@host",
        promoted_at=10.0,
        took_over_at=11.0,
        finished_at=14.5,
        phases=(Phase("taking over", 11.0, 3.5),),
    )
    data = record.to_json()
    assert data["seconds"] == 4.5  # from the promotion, not the takeover
    assert UpgradeRecord.from_json(data) == record
    bootstrap = UpgradeRecord(1, "0.10.0", "bootstrapped", took_over_at=1.0, finished_at=2.0)
    assert bootstrap.seconds == 1.0
    assert UpgradeRecord(3, "0.12.0", "running").seconds is None


def test_the_history_table_never_cuts_a_value_at_80_columns() -> None:
    """At 80 columns the phases, the leader and who promoted give way and the outcome wraps,
    every value shown whole (no ``promo…``, no ``2026-…``); wide, every column shows."""
    record = UpgradeRecord(
        deploy_generation=2, to_version="0.11.0", outcome="completed", from_version="0.10.0",
        promoted_by="ops@host", promoted_at=1_800_000_000.0, leader="green-2", host="vm",
        took_over_at=1_800_000_001.0, finished_at=1_800_000_004.5,
        phases=(Phase("taking over", 1_800_000_001.0, 0.5),
                Phase("registering schemas", 1_800_000_001.5, 3.0)),
        finalized_at=1_800_000_100.0, finalized_by="ops@host",
    )  # fmt: skip

    def at(width: int) -> str:
        console = Console(record=True, width=width, color_system=None)
        console.print(render_history([record] * 3, "prod"))
        return console.export_text()

    narrow = at(80)
    assert max(len(line) for line in narrow.splitlines()) <= 80 and "…" not in narrow
    header = narrow[: narrow.index("┡")]
    assert "promoted" in header and "outcome" in header and "phases" not in header
    assert "2027-01-15 08:00:00" in narrow and "4.5 s" in narrow and "completed" in narrow
    assert narrow.rstrip().endswith("3 upgrade(s)")
    wide = at(220)
    assert "green-2@vm" in wide and "ops@host" in wide and "registering schemas 3.0s" in wide
    assert "final 2027-01-15 08:01:40 by ops@host" in wide
