"""The merge policy: which of a shard's batches the write path merges next, and the bounds that
follow from it.

Every append adds one batch, and a read opens every batch the state lists, so a read's cost
follows the write rate unless batches are merged as they arrive. The policy is size-tiered, like
Materialize persist's Spine: a batch's *level* is ``floor(log_F(rows / R))`` with ``F =
MERGE_FANOUT`` and ``R = MERGE_FLOOR_ROWS`` (every batch under ``R * F`` rows is level 0),
raised to the level of any newer batch (so levels never rise toward the newest). Looking from
the newest batch back, the newest run of batches of level ``L`` or below is merged once it holds
``F`` batches of level ``L`` (the lowest such level first), from the newest batch back until
the output reaches ``MERGE_MAX_ROWS`` and settles. Above level 0 the output holds at
least ``R * F^(L+1)`` rows, one level up, so at rest each level holds fewer than ``F`` batches
and a shard of ``n`` rows lists at most ``(F - 1) * (floor(log_F(n / R)) + 1)`` batches
(:func:`steady_bound`): logarithmic in its size, whatever the write rate. A row is rewritten
about ``log_F(n / R)`` times above level 0 (at most three times: batches of ``MERGE_MAX_ROWS``
rows settle), and while in level 0 at most once every ``F - 1`` appends.

Merges run in the background (``orchestrator.dataplane.merger``); when they fall behind, writers
feel it before readers do (RocksDB's level-0 triggers): past ``SLOW_DOWN_BATCHES`` a commit
first waits for the shard's merge, and at ``STOP_BATCHES`` (the hard cap) an append is refused
with 503 ``compaction-behind`` until the merge catches up. A batch list longer than the slow-down
threshold (a shard written before this policy, or after a long outage) is merged from its
largest batch on, so it comes back under the cap in one merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from catalog.shard.listing import BatchRef
from catalog.shard.state import ShardState

__all__ = [
    "MERGE_AFTER_BATCHES",
    "MERGE_FANOUT",
    "MERGE_FLOOR_ROWS",
    "MERGE_MAX_ROWS",
    "SLOW_DOWN_BATCHES",
    "STOP_BATCHES",
    "level",
    "live_batches",
    "merge_plan",
    "steady_bound",
]

#: F: how many batches of one level make the next level's batch.
MERGE_FANOUT: Final = 16
#: Batches under ``MERGE_FLOOR_ROWS * F`` rows are all level 0: a small collection lists a few
#: batches, not one a level from its very first rows (a read opens each; rewriting a few
#: hundred small rows is cheap).
MERGE_FLOOR_ROWS: Final = 256
#: Batches of this many rows or more (``R * F^3``, a level-3 batch) are *settled*: the write
#: path merges them no further and counts them in no threshold (a read of them costs their
#: rows, not their number). A merge stops taking batches once it holds this many rows, so its
#: output settles and holds less than twice as many (it concatenates its inputs in memory).
#: Below, every level merges as it fills, so a bulk writer's 1,000-row bodies climb
#: to million-row batches instead of piling up as thousands of small settled ones; the
#: leader's sweep compacts a shard that lists many (``orchestrator.migrate.compaction``).
MERGE_MAX_ROWS: Final = MERGE_FLOOR_ROWS * MERGE_FANOUT**3
#: No merge is due before a shard lists this many live batches: below, a read opens a few
#: more files, and a merge every few one-row appends would cost each append more.
MERGE_AFTER_BATCHES: Final = 2 * MERGE_FANOUT
#: Live batches of a shard past which a commit first waits for the shard's merge: above the
#: steady bound (45 for a shard of 65,536 rows or more), so only a lagging merge holds
#: writers back.
SLOW_DOWN_BATCHES: Final = 48
#: Live batches at which an append is refused (503 ``compaction-behind``): the hard cap.
STOP_BATCHES: Final = 64


def level(rows: int, fanout: int = MERGE_FANOUT) -> int:
    """``floor(log_fanout(rows / MERGE_FLOOR_ROWS))``, 0 below ``MERGE_FLOOR_ROWS * fanout``
    rows (integers only)."""
    found, size = 0, MERGE_FLOOR_ROWS * fanout
    while rows >= size:
        found += 1
        size *= fanout
    return found


def steady_bound(rows: int, fanout: int = MERGE_FANOUT) -> int:
    """The most unsettled batches a shard of ``rows`` rows lists once its merges caught up."""
    levels = (fanout - 1) * (level(min(rows, MERGE_MAX_ROWS - 1), fanout) + 1)
    return max(MERGE_AFTER_BATCHES - 1, levels)


def live_batches(state: ShardState) -> int:
    """The batches of ``state`` the thresholds count: every one but the settled (a rollup's
    batches count unless they hold ``MERGE_MAX_ROWS`` rows on average: listing them one by one
    would need a read)."""
    inline = sum(1 for b in state.batches if b.rows < MERGE_MAX_ROWS)
    rolled = sum(r.batches for r in state.rollups if r.rows < MERGE_MAX_ROWS * r.batches)
    return inline + rolled


def merge_plan(
    batches: Sequence[BatchRef],
    *,
    fanout: int = MERGE_FANOUT,
    cap: int = SLOW_DOWN_BATCHES,
) -> tuple[BatchRef, ...]:
    """The batches to merge next into one (empty: nothing is due).

    ``batches`` in any order; they are taken oldest first by their upper time (appends are
    in time order, a merge's output keeps its inputs' latest time), so a merge always takes a
    contiguous newest run and its output's times do not straddle an older batch's.
    """
    ordered = sorted((b for b in batches if b.rows < MERGE_MAX_ROWS), key=lambda b: b.upper)
    if len(ordered) < max(2, MERGE_AFTER_BATCHES):
        return ()
    if len(ordered) > cap:
        # Over the slow-down threshold: everything newer than the largest batch at once (all
        # of it when the largest is the newest), back under the cap in one merge.
        largest = max(range(len(ordered)), key=lambda i: (ordered[i].rows, -i))
        run = ordered[largest + 1 :]
        return tuple(run if len(run) >= 2 else ordered)
    # A batch's effective level is the highest of its own and every newer batch's: an older
    # batch smaller than a newer one counts at that one's level, so levels never rise toward
    # the newest and each holds fewer than F batches at rest.
    levels = [level(b.rows, fanout) for b in ordered]
    for i in range(len(levels) - 2, -1, -1):
        levels[i] = max(levels[i], levels[i + 1])
    for lowest in sorted(set(levels)):
        start = len(ordered)
        while start > 0 and levels[start - 1] <= lowest:
            start -= 1
        if sum(1 for found in levels[start:] if found == lowest) >= fanout:
            return _until_settled(ordered[start:])
    return ()


def _until_settled(run: Sequence[BatchRef]) -> tuple[BatchRef, ...]:
    """The newest batches of ``run`` until their rows reach ``MERGE_MAX_ROWS`` (all of it when
    they do not, two at least): an output that large settles.

    Stopping *below* the size would leave an output of nearly ``MERGE_MAX_ROWS`` rows unsettled
    at the top level, where every later merge took it again with a few new batches: a million
    rows rewritten for a few thousand appended. Stopping once the size is reached settles the
    output instead (it holds less than ``2 * MERGE_MAX_ROWS`` rows, every input being
    unsettled), and the level that was due lists fewer batches after it."""
    taken: list[BatchRef] = []
    rows = 0
    for batch in reversed(run):
        taken.append(batch)
        rows += batch.rows
        if len(taken) >= 2 and rows >= MERGE_MAX_ROWS:
            break
    return tuple(reversed(taken))
