"""The rows invariant's model of upgrades and rollbacks (pure logic over the example history):
what each collection must hold after the catalog moves."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from catalog.release import load_release_dir
from orchestrator.scenario.invariants.acknowledged import RowRules
from orchestrator.scenario.invariants.view import TrackedRows

RELEASES = load_release_dir(Path(__file__).resolve().parents[2] / "scenarios" / "releases")
# Rewritten by 0.13.0 with no inverse: a rollback of 0.14.0 to 0.10.0 discards its writes.
COMMENTS = "mz_internal.mz_comments"
# Rewritten by 0.11.0 with an inverse: a rollback carries its writes back.
ROLES = "mz_catalog.mz_roles"


def rules() -> RowRules:
    unused: Any = None  # moved() reads the releases only
    return RowRules(unused, unused, RELEASES, {})


def acked(collection: str, *tokens: str) -> TrackedRows:
    return TrackedRows(collection, "id", collections.Counter(tokens))


def test_rows_first_written_after_the_upgrade_go_with_a_rollback_that_discards_them() -> None:
    """A collection nobody had written before the upgrade, written after it, then rolled back
    with its writes discarded, must hold nothing (found by simulation seed 33 on an isolated
    ensemble: the model expected the discarded row)."""
    model = rules()
    model.moved("0.10.0", "0.14.0")
    model.tracked[COMMENTS] = acked(COMMENTS, "after")
    model.moved("0.14.0", "0.10.0")
    assert COMMENTS not in model.tracked


def test_rows_before_the_upgrade_come_back_and_carried_rows_stay() -> None:
    """Rows written before the upgrade are expected again after the rollback (the old shard
    holds them); rows written after it stay expected where an inverse carries them back."""
    model = rules()
    model.tracked[COMMENTS] = acked(COMMENTS, "before")
    model.moved("0.10.0", "0.14.0")
    model.tracked[COMMENTS].acked["after"] += 1
    model.tracked[ROLES] = acked(ROLES, "after")
    model.moved("0.14.0", "0.10.0")
    assert model.tracked[COMMENTS].acked == collections.Counter({"before": 1})
    assert model.tracked[ROLES].acked == collections.Counter({"after": 1})
