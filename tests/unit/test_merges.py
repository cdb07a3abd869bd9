"""The write path's merge policy (catalog.shard.merges): pure logic, no shard."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.shard.listing import BatchRef
from catalog.shard.merges import (
    MERGE_AFTER_BATCHES,
    MERGE_FANOUT,
    MERGE_FLOOR_ROWS,
    MERGE_MAX_ROWS,
    SLOW_DOWN_BATCHES,
    STOP_BATCHES,
    level,
    merge_plan,
    steady_bound,
)

_names = itertools.count()


def batch(rows: int, upper: int) -> BatchRef:
    return BatchRef(f"b{next(_names)}", 0, rows, upper - 1, upper)


def live(batches: list[BatchRef]) -> int:
    """The batches the thresholds count: all but the settled."""
    return sum(1 for b in batches if b.rows < MERGE_MAX_ROWS)


def settle(batches: list[BatchRef]) -> tuple[list[BatchRef], int]:
    """Merge as the policy says until it picks nothing; the batches left and rows rewritten."""
    rewritten = 0
    while picked := merge_plan(batches):
        assert len(picked) >= 2
        names = {b.name for b in picked}
        rows = sum(b.rows for b in picked)
        rewritten += rows
        upper = max(b.upper for b in picked)
        batches = [b for b in batches if b.name not in names] + [batch(rows, upper)]
    return batches, rewritten


def test_levels_are_powers_of_the_fanout_above_the_floor() -> None:
    floor = MERGE_FLOOR_ROWS
    sizes = (0, 1, 4 * floor - 1, 4 * floor, 16 * floor - 1, 16 * floor, 64 * floor)
    assert [level(r, 4) for r in sizes] == [0, 0, 0, 1, 1, 2, 3]
    # Below the gate no merge is due: a few more files, not a merge every few appends.
    assert steady_bound(1) == MERGE_AFTER_BATCHES - 1
    assert steady_bound(1, 64) == 63  # a fanout past the gate: the levels bound it
    # Settled batches (MERGE_MAX_ROWS rows or more) are merged no further: the bound stops.
    assert steady_bound(10**12) == steady_bound(MERGE_MAX_ROWS - 1)


def test_thresholds_order_the_bound_below_the_slow_down_below_the_cap() -> None:
    """Up to 16M rows (beyond what a sidecar compacts, COMPACT_MAX_ROWS) the steady bound is
    below the slow-down threshold: writers are held back only when merges fall behind."""
    assert steady_bound(16_000_000) < SLOW_DOWN_BATCHES < STOP_BATCHES


def test_one_row_appends_stay_logarithmic_and_rows_are_rewritten_log_times() -> None:
    batches: list[BatchRef] = []
    rewritten = 0
    most = 0
    for t in range(1, 20_001):
        batches, rows = settle([*batches, batch(1, t)])
        rewritten += rows
        most = max(most, live(batches))
        assert live(batches) <= steady_bound(t), (t, len(batches))
    assert sum(b.rows for b in batches) == 20_000
    assert most <= steady_bound(20_000)
    # A row is rewritten about log_F(n / R) times above level 0, and in level 0 at most once
    # every F - 1 appends while it stays there (under R * F rows).
    in_level_0 = MERGE_FLOOR_ROWS * MERGE_FANOUT / (MERGE_FANOUT - 1)
    assert rewritten / 20_000 <= level(20_000) + 1 + in_level_0


def test_a_bulk_writer_s_rows_are_rewritten_a_few_times_and_settle() -> None:
    """1,000-row appends up to 9M rows: a row is rewritten at most once per level below the
    settled one, and every merge outputs less than twice the settled size. (Merges that stopped
    just below the settled size left million-row batches unsettled at the top level, where each
    later merge took one again with a few new batches: past 7M rows, tens of rows rewritten for
    every row appended.)"""
    batches: list[BatchRef] = []
    rewritten = largest = 0
    for t in range(1, 9_001):
        batches.append(batch(1_000, t))
        while picked := merge_plan(batches):
            names = {b.name for b in picked}
            rows = sum(b.rows for b in picked)
            rewritten, largest = rewritten + rows, max(largest, rows)
            batches = [b for b in batches if b.name not in names] + [batch(rows, t)]
    assert rewritten <= level(MERGE_MAX_ROWS) * 9_000_000, rewritten
    assert MERGE_MAX_ROWS <= largest < 2 * MERGE_MAX_ROWS
    assert live(batches) <= steady_bound(9_000_000)


def test_a_merge_takes_the_newest_run_never_an_older_batch_past_a_newer() -> None:
    old = batch(MERGE_MAX_ROWS - 1, 1)
    small = [batch(1, t) for t in range(2, 2 + MERGE_AFTER_BATCHES)]
    picked = merge_plan([*small, old])  # any order in
    assert set(picked) == set(small)
    assert merge_plan([old, *small[:-2]]) == ()  # one short of the gate: nothing


def test_a_list_over_the_slow_down_threshold_comes_back_under_it_in_one_merge() -> None:
    big = batch(MERGE_MAX_ROWS // 2, 1)
    many = [batch(1, t) for t in range(2, 2 + SLOW_DOWN_BATCHES + 10)]
    picked = merge_plan([big, *many])
    assert set(picked) == set(many)
    left, _ = settle([big, *many])
    assert live(left) <= steady_bound(1_000_000 + len(many))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5_000), min_size=1, max_size=300))
def test_any_append_sizes_stay_within_the_steady_bound(sizes: list[int]) -> None:
    """Whatever the size of each append, once merged the list is within the bound."""
    batches: list[BatchRef] = []
    total = 0
    for t, rows in enumerate(sizes, start=1):
        total += rows
        batches, _ = settle([*batches, batch(rows, t)])
        assert live(batches) <= steady_bound(total), (sizes[:t], len(batches))
        # Settled batches hold MERGE_MAX_ROWS rows or more each: they cost a read their rows.
        settled = len(batches) - live(batches)
        assert settled <= total // MERGE_MAX_ROWS, (settled, total)
        assert sum(b.rows for b in batches) == total


def test_the_alert_fires_past_the_slow_down_threshold_and_names_the_cap() -> None:
    """The alert's thresholds are the policy's: it fires past the slow-down threshold, before
    appends are refused at the cap it names."""
    from pathlib import Path

    import yaml

    rules = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "deploy/prometheus/alerts.yaml").read_text()
    )
    alert = next(
        r for g in rules["groups"] for r in g["rules"]
        if r.get("alert") == "CatalogUpgradeShardBatchesHigh"
    )  # fmt: skip
    assert alert["expr"].endswith(f"> {SLOW_DOWN_BATCHES}")
    said = " ".join(alert["annotations"]["description"].split())
    assert f"over {SLOW_DOWN_BATCHES} batches" in said and f"at {STOP_BATCHES} appends" in said


def test_settled_batches_are_merged_no_further_and_count_in_no_threshold() -> None:
    settled = [batch(MERGE_MAX_ROWS, t) for t in range(1, 4)]
    small = [batch(1, t) for t in range(10, 10 + MERGE_AFTER_BATCHES)]
    assert set(merge_plan([*settled, *small])) == set(small)
    assert merge_plan(settled) == ()
