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


def test_eviction_hands_keyed_marks_to_the_key_log_and_raises_the_horizon_past_the_rest() -> None:
    """Up to twice the limit the ledger keeps everything; past it, it evicts down to the limit:
    keyed marks (``k`` + 32 hex digits) come back for the key log, the horizon stays below
    them, and only unkeyed evictions raise it."""
    keyed = [WriteMark(f"k{n:032x}", n, n + 1, 1) for n in range(0, 8, 2)]
    unkeyed = [WriteMark(f"u{n}", n, n + 1, 1) for n in range(1, 8, 2)]
    ledger, evicted = WriteLedger().evicting(sorted(keyed + unkeyed, key=lambda m: m.upper), 4)
    assert len(ledger.marks) == 8 and evicted == () and ledger.horizon == 0
    ledger, evicted = ledger.evicting([WriteMark("u8", 8, 9, 1)], 4)
    assert [m.id for m in ledger.marks] == ["u5", "k" + f"{6:032x}", "u7", "u8"]
    assert evicted == tuple(keyed[:3])
    assert ledger.horizon == 4  # u3's upper: the unkeyed evicted; the keyed are in the key log
