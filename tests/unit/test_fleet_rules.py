"""The fleet's judgement of an environment (orchestrator.fleet.rules) and its fleet file."""

from __future__ import annotations

import re

import pytest

from catalog.errors import BadInputError
from orchestrator.durations import parse_duration, short_duration
from orchestrator.fleet.ensembles import FleetFile
from orchestrator.fleet.model import EnvironmentRow, GreenGeneration, LeaderView
from orchestrator.fleet.rules import FINALIZE_OVERDUE, Thresholds, assess

NOW = 1_000_000.0
SERVING = LeaderView("p1", True, "serving", "serving", NOW - 10)


def row(**fields: object) -> EnvironmentRow:
    base: dict[str, object] = {
        "bootstrapped": True, "version": "1.0.0", "deploy_generation": 1, "leader": SERVING,
        "finalization": "final",
    }  # fmt: skip
    return EnvironmentRow("a", "env", NOW, **{**base, **fields})  # type: ignore[arg-type]


def test_states_in_order_of_severity() -> None:
    t = Thresholds()
    assert assess(row(), t, NOW).state == "ok"
    assert assess(row(finalization="pending", finalization_since=NOW - 60), t, NOW).state == (
        "pending"
    )
    green = GreenGeneration(2, "1.1.0", 1, ("ready",), NOW - 60, promoted=False)
    assert assess(row(green=(green,), finalization="pending"), t, NOW).state == "green-waiting"
    migrating = LeaderView("p2", True, "migrating", "registering schemas", NOW - 5)
    assert assess(row(leader=migrating), t, NOW).state == "migrating"
    gone = LeaderView("p1", False)
    judged = assess(row(leader=gone, green=(green,)), t, NOW)
    assert judged.state == "no-leader" and judged.stuck == (
        "no serving leader (p1 not registered)",
    )
    assert assess(row(bootstrapped=False, leader=None), t, NOW).state == "empty"
    assert assess(row(failed=("g2 1.1.0 refused",), leader=gone), t, NOW).state == "failed"
    assert assess(row(errors=("catalog: not JSON",)), t, NOW).state == "unreadable"
    unreachable = EnvironmentRow("c", None, NOW, error="did not answer")
    assert assess(unreachable, t, NOW).state == "unreachable"


def test_stuck_phases_and_unpromoted_generations() -> None:
    t = Thresholds()
    slow = LeaderView("p2", True, "migrating", "rewrite", NOW - 700)
    judged = assess(row(leader=slow, phase_history={"rewrite": 200.0}), t, NOW)
    assert judged.stuck == ("phase rewrite for 11m (usually 3m)",)
    # Past three times its median, but within the minute's floor: not stuck.
    quick = LeaderView("p2", True, "migrating", "rewrite", NOW - 50)
    assert assess(row(leader=quick, phase_history={"rewrite": 2.0}), t, NOW).stuck == ()
    waited = GreenGeneration(2, "1.1.0", 2, ("ready",), NOW - 7 * 3600, promoted=False)
    judged = assess(row(green=(waited,)), t, NOW)
    assert judged.stuck == ("unpromoted for 7h",) and judged.unpromoted_seconds == 7 * 3600
    promoted = GreenGeneration(2, "1.1.0", 2, ("ready",), NOW - 7 * 3600, promoted=True)
    assert assess(row(green=(promoted,)), t, NOW).stuck == ()


def test_finalization_overdue() -> None:
    t = Thresholds()
    late = row(finalization="pending", finalization_since=NOW - FINALIZE_OVERDUE - 1)
    assert assess(late, t, NOW).overdue
    timer = row(finalization="pending", finalization_since=NOW - 7200, finalize_at=NOW - 3601)
    assert assess(timer, t, NOW).overdue
    decided = row(finalization="finalizing", finalization_since=NOW - FINALIZE_OVERDUE - 1)
    assert not assess(decided, t, NOW).overdue


def test_fleet_file_and_thresholds() -> None:
    fleet = FleetFile.of(
        {
            "thresholds": {"unpromoted_after": "2h", "stuck_factor": 4},
            "ensemble": [{"name": "eu", "zk": "a:1,b:1", "read_auth": "env:R"}, {"zk": "c:1"}],
        }
    )
    assert fleet.thresholds == Thresholds(unpromoted_after=7200.0, stuck_factor=4.0)
    assert [(e.name, e.zk) for e in fleet.ensembles] == [("eu", "a:1,b:1"), ("c:1", "c:1")]
    for data, named in (
        ({"ensemble": []}, re.escape("no [[ensemble]]")),
        ({"ensemble": [{"zk": "a:1"}], "extra": 1}, "unknown key 'extra'"),
        ({"ensemble": [{"zk": "a:1"}], "thresholds": {"stuck_factor": 1}}, "above 1"),
        ({"ensemble": [{"zk": "a:1"}], "thresholds": {"soon": "1h"}}, "unknown key 'soon'"),
        ({"ensemble": [{"zk": 3}]}, "zk must be a non-empty string"),
        ({"ensemble": [{"zk": "a:1"}, {"zk": "zk 2:2181"}]},
         re.escape("ensemble 2: invalid ZooKeeper connection string 'zk 2:2181'")),
    ):  # fmt: skip
        with pytest.raises(BadInputError, match=named):
            FleetFile.of(data)


def test_durations() -> None:
    assert parse_duration("24h") == 86400.0 and parse_duration(90) == 90.0
    with pytest.raises(BadInputError, match="is not a duration"):
        parse_duration("-3m")
    assert [short_duration(s) for s in (None, 5, 125, 3 * 3600 + 60, 2 * 86400 + 7200)] == [
        "-", "5s", "2m", "3h 1m", "2d 2h"
    ]  # fmt: skip
