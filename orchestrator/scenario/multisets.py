"""Rows as multisets and expected-value comparison, for read and expect_status steps."""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.scenario.format import (
    is_missing,
)


def json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _canonical_row(row: Mapping[str, Any]) -> str:
    """A row as comparable text: keys sorted, null values dropped (TOML has no null)."""
    return json.dumps(
        {k: v for k, v in row.items() if v is not None and k not in _UPDATE_COLUMNS},
        sort_keys=True,
        default=json_default,
    )


_UPDATE_COLUMNS = frozenset({"_ts", "_diff"})


def row_multiset(rows: Sequence[Mapping[str, Any]]) -> collections.Counter[str]:
    """Rows as a multiset of canonical texts; a row carrying ``_diff`` counts that many times."""
    counts: collections.Counter[str] = collections.Counter()
    for row in rows:
        diff = row.get("_diff", 1)
        counts[_canonical_row(row)] += int(diff) if isinstance(diff, int) else 1
    return +counts


def _numbers_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_numbers_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_numbers_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def compare(value: Any, comparator: str, expected: Any) -> str | None:
    """None when ``value`` satisfies the comparison, else what was seen."""
    shown = "absent" if is_missing(value) else json.dumps(value, default=str)[:300]
    if comparator == "exists":
        present = not is_missing(value) and value is not None
        return None if present == expected else f"is {shown}, expected exists = {expected}"
    if is_missing(value):
        return f"is absent, expected {comparator} {expected!r}"
    if comparator == "equals":
        return None if _numbers_equal(value, expected) else f"is {shown}, expected {expected!r}"
    if comparator == "not_equals":
        return None if not _numbers_equal(value, expected) else f"is {shown}, expected otherwise"
    if comparator == "length":
        if not isinstance(value, (list, dict, str)):
            return f"is {shown}, which has no length"
        return None if len(value) == expected else f"has length {len(value)}: {shown}"
    if comparator == "contains":
        if isinstance(value, str):
            ok = isinstance(expected, str) and expected in value
        elif isinstance(value, (list, dict)):
            ok = any(_numbers_equal(v, expected) for v in value) or expected in value
        else:
            ok = False
        return None if ok else f"is {shown}, which does not contain {expected!r}"
    raise AssertionError(comparator)
