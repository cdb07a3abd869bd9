"""Consolidation of update tables: sum ``_diff`` over identical rows and drop zero sums.

An update table holds a collection's columns plus ``_diff`` (int64), and usually ``_ts``;
consolidating it keys on every column but ``_diff``. Three algorithms give the same rows:

* :func:`consolidate_by_runs`, for sortable keys of which one numeric column separates the
  rows well: a NumPy argsort of that one column; rows alone in their run of equal values are
  kept as they are, pairs (a row and its retraction, the common case of a shard's history) are
  compared column by column, runs of three or more are sorted. Unique rows are never gathered:
  they are copied out in input order on a second thread while the pairs are compared, or
  sliced without a copy when they form long ranges. 10M rows: about 0.2 s.
* :func:`consolidate_sorted`, for keys of sortable flat types (:func:`is_sortable`): sort by
  the keys, mark where a row differs from its predecessor, sum ``_diff`` per run. Only the
  first key is compared on every row; later keys are compared only where all earlier keys
  were equal. About 5x faster than hash-grouping many keys, and the output comes sorted (what
  compaction marks ``ordered``).
* :func:`consolidate_hashed`, for any types: ``Table.group_by``. Arrow cannot group on nested
  columns, so each nested column is first replaced by a dense int64 *value id* (equal values,
  equal ids) built bottom-up: primitive leaves are dictionary-encoded, structs combine their
  children's ids, lists become the binary string of their elements' ids; the representative
  row of each group is then taken back from the input by index.

:func:`consolidate` tries them in that order. A large table with nested keys takes the first
two as well: its nested columns stand in as their value ids for the sort, and each kept row's
value is taken back (:class:`~catalog.consolidate.value_ids.StandIns`); 10M rows with a list
column: 0.3 s (all lists null) to 0.6 s (a list each), against 3.8 to 4.4 s by hash
grouping. Nulls equal nulls; floats compare as values,
the way Spark groups them (:mod:`catalog.consolidate.floats`): ``0.0`` equals ``-0.0`` and
every NaN equals every NaN, and the output holds the normalized value (``0.0``, the canonical
NaN), so both engines consolidate to the same bits."""

from __future__ import annotations

from catalog.consolidate.by_hashing import consolidate_hashed
from catalog.consolidate.by_runs import consolidate_by_runs
from catalog.consolidate.by_sorting import consolidate_sorted
from catalog.consolidate.choose import consolidate
from catalog.consolidate.columns import DIFF, TS, is_nested, is_sortable, repeated

__all__ = [
    "DIFF",
    "TS",
    "consolidate",
    "consolidate_by_runs",
    "consolidate_hashed",
    "consolidate_sorted",
    "is_nested",
    "is_sortable",
    "repeated",
]
