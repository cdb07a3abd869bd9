"""The core of the invariant checker: what it was told and what it counted."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import attrs

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.release import (
    Release,
)
from orchestrator.scenario.invariants.view import (
    DurableView,
    TrackedRows,
    Violation,
)


@attrs.define
class CheckerCore:
    """Checks the invariants of one environment after every step; counts checks and catches."""

    consensus: Consensus
    blob: BlobStore
    releases: Sequence[Release]
    epoch_leaders: dict[int, str] = attrs.field(factory=dict)
    highest_epoch: int = 0
    tracked: dict[str, TrackedRows] = attrs.field(factory=dict)
    checks: collections.Counter[str] = attrs.field(factory=collections.Counter)
    caught: collections.Counter[str] = attrs.field(factory=collections.Counter)
    _last: DurableView | None = attrs.field(default=None, init=False)
    _catalog_seen: tuple[str, int] | None = attrs.field(default=None, init=False)
    _planned: dict[Any, list[Violation]] = attrs.field(factory=dict, init=False)
    _paths: dict[tuple[str, str], bool] = attrs.field(factory=dict, init=False)

    # -- input from the caller -----------------------------------------------------------------
