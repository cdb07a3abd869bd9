"""The planner's rule on every upgrade path of a history at once, collection by collection.

Planning each of the ``n (n - 1) / 2`` paths alone costs ``paths x builtins`` rule checks: 25
million for 500 releases of 200 builtins. But a collection's outcome on the path ``i -> j``
depends only on its catalog state at ``i``, its builtin in ``j`` and ``j``'s instructions for it
with ``v_i < version <= v_j``. So:

* for one target ``j`` and one builtin, the sources ``i`` fall into *segments* within which the
  state and the in-range instructions are the same: the rule is checked once per segment (and
  for every source of a segment where it fails, since each refusal names its path);
* from ``j - 1`` to ``j``, a builtin whose definition did not change, whose instructions ``j`` did
  not extend, and which passed on every path to ``j - 1`` passes on every path to ``j`` from the
  same sources (for a rewritten builtin, when ``j`` is made from ``j - 1``, so that both find
  the schemas its rewrites take alike): only the new source ``j - 1`` is checked.
  Instructions are cumulative in a sane history (each release carries every earlier one);
  where ``j``'s list is not a superset of ``j - 1``'s, every builtin of ``j`` is checked in
  full.

The result equals planning each path alone with :func:`catalog.release.planning._build_plan`
(a property test compares them), at a cost that grows with the changes, not the paths.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence

from catalog.release.manifest import Builtin, Mechanism, Migration, Release
from catalog.release.planning import EvolveCheck, InstructionIndex, check_collection
from catalog.release.problems import Problem, unknown_builtin
from catalog.release.snapshot import CatalogSnapshot, CollectionState

__all__ = ["path_problems"]

# A collection's states over the sources: (first source index, state or None), by first index.
_Timeline = list[tuple[int, CollectionState | None]]


def _timelines(snapshots: Sequence[CatalogSnapshot]) -> dict[str, _Timeline]:
    """Each GlobalId's state as the sources go, one entry where it changes."""
    timelines: dict[str, _Timeline] = {}
    keys: dict[str, tuple[object, ...] | None] = {}
    for i, snapshot in enumerate(snapshots):
        seen = set()
        for state in snapshot.collections:
            seen.add(state.global_id)
            key: tuple[object, ...] = (state.name, state.fingerprint, id(state.history))
            if keys.get(state.global_id) != key:
                keys[state.global_id] = key
                timelines.setdefault(state.global_id, []).append((i, state))
        for gid, held in keys.items():
            if held is not None and gid not in seen:
                keys[gid] = None
                timelines[gid].append((i, None))
    return timelines


def _state_at(timeline: _Timeline, i: int) -> CollectionState | None:
    position = bisect.bisect_right(timeline, i, key=lambda entry: entry[0]) - 1
    return timeline[position][1] if position >= 0 else None


def _definition(builtin: Builtin, fingerprint: str) -> tuple[object, ...]:
    return (builtin.name, builtin.kind, fingerprint, builtin.retain_data)


def _extends(before: InstructionIndex, after: InstructionIndex) -> frozenset[str] | None:
    """The collections whose instructions ``after`` adds to ``before``'s (all newer than
    ``before``), or None when ``after`` is not such an extension."""
    if before.newest is not None and before.newest > before.version.precedence:
        return None
    added = after.keys - before.keys
    if len(after.keys) - len(added) != len(before.keys):
        return None  # something of ``before`` is missing from ``after``
    if any(key[0] <= before.version for key in added):
        return None
    return frozenset(key[1] for key in added)


def _same_ancestry(
    target: Release, before: Release, index: InstructionIndex, name: str
) -> bool:
    """Whether ``target`` finds the schemas a rewrite of ``name`` takes where ``before`` does:
    always, when ``name`` has no rewrite; else when ``target`` is made from ``before``."""
    entry = index.by_name.get(name)
    if entry is None or all(m.mechanism is not Mechanism.REWRITE for m in entry[1]):
        return True
    return target.previous is not None and target.previous.version == before.version


def path_problems(
    ordered: Sequence[Release],
    indexes: Sequence[InstructionIndex],
    snapshots: Sequence[CatalogSnapshot],
    fingerprints: Sequence[Mapping[str, str]],
    evolve_check: EvolveCheck,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, int, Problem]]:
    """``(i, j, problem)`` for every problem the planner finds on every path ``i -> j``
    (``fingerprints[j]``: release ``j``'s builtin fingerprints by GlobalId); ``on_progress``
    hears the number of paths checked so far after each target release."""
    orders = [release.version.precedence for release in ordered]
    timelines = _timelines(snapshots)
    # Per GlobalId: (definition, target index, passed on every path to it) of the last target.
    last: dict[str, tuple[tuple[object, ...], int, bool]] = {}
    for j in range(1, len(ordered)):
        target, index = ordered[j], indexes[j]
        high = target.version
        by_name = {b.name: b for b in target.builtins}
        extended = _extends(indexes[j - 1], index)
        unknown: dict[int, dict[tuple[object, ...], Migration]] = {}
        own_unknown = [
            m for m in index.own if (b := by_name.get(m.name)) is None or b.kind != m.kind
        ]
        for builtin in target.builtins:
            gid = builtin.global_id
            fingerprint = fingerprints[j][gid]
            definition = _definition(builtin, fingerprint)
            seen = last.get(gid)
            reuse = (
                seen is not None
                and seen[1] == j - 1
                and seen[2]
                and seen[0] == definition
                and extended is not None
                and builtin.name not in extended
                and _same_ancestry(target, ordered[j - 1], index, builtin.name)
            )
            timeline = timelines.get(gid, [])
            first = j - 1 if reuse else 0
            passed = True
            for start, end in _segments(timeline, index, builtin.name, orders, first, j):
                state = _state_at(timeline, start)
                if state is None:
                    continue  # a new builtin on these paths
                low = ordered[start].version
                outcome = check_collection(
                    state, target, builtin, index, fingerprint, low, high, evolve_check
                )
                if isinstance(outcome, Problem):
                    passed = False
                    yield start, j, outcome
                    for i in range(start + 1, end):
                        again = check_collection(
                            state, target, builtin, index, fingerprint, ordered[i].version,
                            high, evolve_check,
                        )  # fmt: skip
                        if isinstance(again, Problem):
                            yield i, j, again
                elif isinstance(outcome, tuple):
                    passed = False
                    for i in range(start, end):
                        wrong = index.in_range(builtin.name, ordered[i].version, high)
                        found = unknown.setdefault(i, {})
                        found.update((m.key, m) for m in wrong if m.kind != builtin.kind)
            last[gid] = (definition, j, passed)  # a reuse stands on a pass of every path to j-1
        for i in range(j):
            found = {m.key: m for m in own_unknown}
            found.update(unknown.get(i, {}))
            for migration in found.values():
                yield i, j, unknown_builtin(migration, target)
        if on_progress is not None:
            on_progress(j * (j + 1) // 2)


def _segments(
    timeline: _Timeline,
    index: InstructionIndex,
    name: str,
    orders: Sequence[tuple[object, ...]],
    first: int,
    end: int,
) -> Iterator[tuple[int, int]]:
    """The ranges ``[start, stop)`` of sources in ``[first, end)`` within which the state and
    ``index``'s in-range instructions for ``name`` stay the same."""
    if end - first == 1:
        yield first, end  # one source: nothing to cut
        return
    cuts = {first, end}
    for start, _state in timeline:
        if first < start < end:
            cuts.add(start)
    entry = index.by_name.get(name)
    if entry is not None:
        for order in entry[0]:
            # Sources at or past the instruction's version no longer include it.
            cut = bisect.bisect_left(orders, order)
            if first < cut < end:
                cuts.add(cut)
    bounds = sorted(cuts)
    yield from itertools.pairwise(bounds)
