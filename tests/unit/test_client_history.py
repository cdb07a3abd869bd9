"""The client-history checker on hand-made histories: each property caught alone."""

from __future__ import annotations

from orchestrator.scenario.history import check_history
from orchestrator.scenario.workload import Operation, Read


def op(n: int, outcome: str) -> Operation:
    return Operation(client=0, n=n, invoked=float(n), completed=float(n) + 0.1, outcome=outcome)


def test_a_history_that_holds_has_no_violation() -> None:
    ops = [op(1, "ok"), op(2, "fail"), op(3, "unknown"), op(4, "unknown")]
    reads = [Read(1.5, frozenset({"w0-1"})), Read(5.0, frozenset({"w0-1", "w0-3"}))]
    assert check_history(ops, reads, {"w0-1": 1, "w0-3": 1}) == []


def test_each_property_is_caught() -> None:
    ops = [op(1, "ok"), op(2, "ok"), op(3, "fail"), op(4, "unknown")]
    reads = [Read(1.0, frozenset({"w0-2"})), Read(2.0, frozenset())]
    final = {"w0-1": 2, "w0-3": 1, "w0-4": 2, "w9-9": 1}
    problems = check_history(ops, reads, final)
    rules = sorted(p.split(":")[0] for p in problems)
    assert rules == [
        "acknowledged-once",  # w0-1 twice
        "acknowledged-once",  # w0-2 missing
        "failed-absent",  # w0-3
        "nothing-invented",  # w9-9
        "reads-stable",  # w0-2 read, then missing in a read
        "reads-stable",  # ... and at the end
        "unknown-at-most-once",  # w0-4 twice
    ], problems
