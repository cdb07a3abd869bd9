"""Consolidation's entry point: picks the algorithm that fits the key columns."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from catalog.consolidate import columns
from catalog.consolidate.by_hashing import consolidate_hashed
from catalog.consolidate.by_runs import consolidate_by_runs
from catalog.consolidate.by_sorting import consolidate_sorted
from catalog.consolidate.columns import DIFF, is_fixed_width, is_sortable, key_columns
from catalog.consolidate.floats import normalize_floats
from catalog.consolidate.value_ids import StandIns


def consolidate(table: pa.Table, keys: Sequence[str] | None = None) -> pa.Table:
    """Sum ``_diff`` over identical ``keys`` (default: every column but ``_diff``), drop zeros.

    Works for any column types, nested included; the output keeps the input's schema, with one
    row per distinct key, in no particular order. Flat keys go by :func:`consolidate_by_runs`
    when a fixed-width key column separates the rows well, else by :func:`consolidate_sorted`;
    nested keys the same way once they stand in as their value ids
    (:class:`~catalog.consolidate.value_ids.StandIns`), or by :func:`consolidate_hashed` for
    a small table.
    """
    names = key_columns(table, keys)
    nested = [k for k in names if not is_sortable(table.schema.field(k).type)]
    if nested and table.num_rows < columns.RUNS_MIN_ROWS:
        return consolidate_hashed(table, names)
    table = normalize_floats(table)  # once: the algorithms below are told it is done
    if nested:
        # Nested keys stand in as their value ids: the flat algorithms then apply (a sort of
        # one numeric key, mostly), several times faster than grouping on every column.
        stand_ins = StandIns.of(table, nested)
        return stand_ins.restored(_flat(stand_ins.table, names))
    return _flat(table, names)


def _flat(table: pa.Table, names: list[str]) -> pa.Table:
    """:func:`consolidate` of keys that are all sortable, floats normalized."""
    # Any key order groups equal rows; fixed-width keys first sort and compare fastest.
    fixed = [k for k in names if is_fixed_width(table.schema.field(k).type)]
    names = fixed + [k for k in names if k not in fixed]
    if table.num_rows >= columns.RUNS_MIN_ROWS and table.column(DIFF).null_count == 0:
        out = consolidate_by_runs(table, names, normalized=True)
        if out is not None:
            return out
    return consolidate_sorted(table, names, ordered=False, normalized=True)
