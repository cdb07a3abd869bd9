"""The write ledger's promise, as a property: a missing id proves 'not landed' exactly when the
ledger covers the append's expected upper."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from catalog.shard import WriteLedger, WriteMark


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40),
    limit=st.integers(min_value=1, max_value=8),
)
def test_every_append_past_the_horizon_is_found(sizes: list[int], limit: int) -> None:
    """After any run of appends, every append that moved the upper past the horizon is in the
    ledger, at most ``limit`` marks are kept, and the horizon never passes the upper."""
    ledger, upper, appended = WriteLedger(), 0, []
    for number, step in enumerate(sizes):
        mark = WriteMark(f"w{number}", upper, upper + step, step)
        ledger = ledger.recorded([mark], limit)
        appended.append(mark)
        upper += step
    assert len(ledger.marks) <= limit and ledger.horizon <= upper
    for mark in appended:
        if mark.upper > ledger.horizon:
            assert ledger.find(mark.id) == mark
    # An id that never landed is absent; the answer "not landed" is only given when covered.
    assert ledger.find("never") is None
    assert ledger.covers(upper)


def test_recording_a_known_id_again_changes_nothing() -> None:
    mark = WriteMark("a", 0, 1, 1)
    ledger = WriteLedger().recorded([mark])
    assert ledger.recorded([mark]) == ledger


def test_a_copy_carries_the_source_horizon() -> None:
    source = WriteLedger((WriteMark("s", 5, 6, 1),), horizon=5)
    target = WriteLedger().carried(source)
    assert target.find("s") is not None and target.horizon == 5 and not target.covers(4)
