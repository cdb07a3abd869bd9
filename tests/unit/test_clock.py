"""The clock against ZooKeeper's (orchestrator.clock): what counts as too far, and what status
says of it."""

from __future__ import annotations

from orchestrator.clock import MAX_CLOCK_OFFSET_SECONDS, ClockOffset, clock_warning


def test_an_unmeasured_clock_never_refuses() -> None:
    assert not ClockOffset().too_far
    assert ClockOffset().published() is None


def test_the_offset_is_the_round_trips_midpoint_against_the_stamp() -> None:
    clock = ClockOffset()
    clock.observe(before=1000.0, after=1000.2, zookeeper_mtime_ms=999_000)
    assert clock.published() == 1.1
    assert not clock.too_far


def test_past_the_bound_by_more_than_the_uncertainty_refuses() -> None:
    clock = ClockOffset()
    far = MAX_CLOCK_OFFSET_SECONDS + 1.0
    clock.observe(before=1000.0 + far, after=1000.0 + far + 0.01, zookeeper_mtime_ms=1_000_000)
    assert clock.too_far
    clock.observe(before=1000.0 - far - 0.01, after=1000.0 - far, zookeeper_mtime_ms=1_000_000)
    assert clock.too_far, "behind counts as much as ahead"


def test_a_slow_round_trip_never_makes_a_sound_clock_look_wrong() -> None:
    clock = ClockOffset()
    # Sent 1 s before the stamp, answered 5 s later: the midpoint is off by 1.5 s, within the
    # 2.5 s uncertainty of the round trip.
    clock.observe(before=999.0, after=1005.0, zookeeper_mtime_ms=1_000_500)
    assert not clock.too_far


def test_status_names_the_process_the_direction_and_the_fix() -> None:
    assert clock_warning("green-2", None) is None
    assert clock_warning("green-2", MAX_CLOCK_OFFSET_SECONDS) is None
    ahead = clock_warning("green-2", 172_800.0)
    assert ahead is not None and "green-2's clock runs 172800.0 s ahead of" in ahead
    assert "NTP" in ahead and "refuses to lead" in ahead
    behind = clock_warning("green-2", -3.0)
    assert behind is not None and "3.0 s behind ZooKeeper's" in behind
