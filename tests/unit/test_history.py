"""The upgrade history's values (orchestrator.history): phases and the record format."""

from __future__ import annotations

from orchestrator.history import Phase, UpgradeRecord, phases_of


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
