"""Where a long copy commits: slices that cover the copy once, end at batch uppers, and hold
about the rows asked, whatever the batches (catalog.pipeline.checkpoints)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from catalog.pipeline.checkpoints import (
    CHECKPOINT_FRACTION,
    CHECKPOINT_MIN_ROWS,
    next_checkpoint,
    slice_rows,
)
from catalog.shard import BatchRef


@st.composite
def batches(draw: st.DrawFn) -> list[BatchRef]:
    """Contiguous appends, some merged into wider batches (as compaction leaves them)."""
    bounds = draw(st.lists(st.integers(1, 5), min_size=1, max_size=30))
    refs, at = [], 0
    for n, width in enumerate(bounds):
        refs.append(BatchRef(f"b{n}", 0, draw(st.integers(0, 1000)), at, at + width))
        at += width
    return draw(st.permutations(refs))


@given(batches(), st.integers(1, 3000), st.data())
def test_slices_cover_the_copy_once_and_each_moves_it_on(
    refs: list[BatchRef], rows: int, data: st.DataObject
) -> None:
    end = max(r.upper for r in refs)
    lower = data.draw(st.integers(0, end - 1))
    goal = data.draw(st.integers(lower + 1, end))
    cuts, at = [], lower
    while at < goal:
        cut = next_checkpoint(refs, at, goal, rows)
        assert at < cut <= goal
        cuts.append(cut)
        at = cut
    assert cuts == sorted(set(cuts)) and cuts[-1] == goal


def test_appends_are_cut_where_they_hold_the_rows_asked() -> None:
    appends = [BatchRef(f"b{n}", 0, 1000, n, n + 1) for n in range(100)]
    assert next_checkpoint(appends, 0, 100, 2500) == 3  # 3,000 rows: the third batch's end
    assert next_checkpoint(appends, 97, 100, 2500) == 100
    assert next_checkpoint(appends, 0, 2, 2500) == 2  # never past the goal


def test_a_compacted_batch_is_cut_inside_its_times() -> None:
    compacted = [BatchRef("c", 0, 1_000_000, 0, 100), BatchRef("a", 0, 10, 100, 101)]
    cuts, at = [], 0
    while at < 101:
        at = next_checkpoint(compacted, at, 101, 100_000)
        cuts.append(at)
    assert cuts == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 101]
    one_time = [BatchRef("c", 0, 1_000_000, 7, 8)]
    assert next_checkpoint(one_time, 7, 8, 10) == 8  # rows of one time are never split
def test_a_slice_is_a_fraction_of_the_copy_and_never_tiny() -> None:
    assert slice_rows(0) == CHECKPOINT_MIN_ROWS
    assert slice_rows(10_000) == CHECKPOINT_MIN_ROWS
    four_million = 4_000_000
    assert slice_rows(four_million) == four_million * CHECKPOINT_FRACTION
    assert slice_rows(four_million) <= 0.1 * four_million  # what a restart redoes, at most


def test_a_slice_holds_a_batch_per_core_at_least() -> None:
    appends = [BatchRef(f"b{n}", 0, 1000, n, n + 1) for n in range(10)]
    assert next_checkpoint(appends, 0, 10, 1000) == 1
    assert next_checkpoint(appends, 0, 10, 1000, batches=4) == 4
    assert next_checkpoint(appends, 8, 10, 1000, batches=4) == 10
