"""The pending upgrade's stored form: round trip, an unknown newer format, a corrupt value."""

from __future__ import annotations

import json

import pytest

from catalog.environment import CatalogState, CollectionRef, Finalized
from catalog.errors import CorruptStateError
from catalog.pending import Finalizing, PendingUpgrade, ReplacedCollection
from orchestrator.migrate.finalization import finalization_due


def pending(**changes: object) -> PendingUpgrade:
    previous = CatalogState(
        version="0.10.0",
        deploy_generation=2,
        blob_uri="/blob",
        collections={"s1": CollectionRef("s1", "a.b", "old", "f1")},
        finalized=Finalized(1, 10.0, "bootstrap"),
        version_generation=1,
    )
    values: dict[str, object] = {
        "version": "0.11.0",
        "deploy_generation": 2,
        "from_version": "0.10.0",
        "from_generation": 1,
        "since": 100.0,
        "previous": previous,
        "replaced": {"s1": ReplacedCollection("s1", "a.b", "old", "new", 3, inverse=True)},
        "finalize_at": 200.0,
        **changes,
    }
    return PendingUpgrade(**values)  # type: ignore[arg-type]


def test_round_trip_keeps_everything_a_rollback_needs() -> None:
    value = pending(finalizing=Finalizing("ops@host", 150.0, "operator"))
    back = PendingUpgrade.decode(value.encode())
    assert back.to_json() == value.to_json()
    assert back.previous.finalized == Finalized(1, 10.0, "bootstrap")
    assert back.previous.version_generation == 1
    assert back.protected_shards() == {"old"}
    assert back.status_json()["replaced"] == ["a.b"]


def test_a_newer_format_or_a_broken_value_is_corrupt_state_naming_the_key() -> None:
    data = pending().to_json()
    with pytest.raises(CorruptStateError, match="pending"):
        PendingUpgrade.decode(json.dumps({**data, "format": 99}).encode())
    with pytest.raises(CorruptStateError, match="pending"):
        PendingUpgrade.decode(b'{"version": "0.11.0"}')
    with pytest.raises(CorruptStateError, match="pending"):
        PendingUpgrade.decode(b"not json")


def test_the_timer_decides_once_due_and_never_without_a_window() -> None:
    """The window (finalize_at - since, 100 s here) is measured on ZooKeeper's clock from the
    switch: whatever the hosts' clocks said when they wrote since and finalize_at."""
    switched = 5_000.0  # ZooKeeper's time of the switch, far from the leader's own "since"
    assert not finalization_due(pending(), switched, switched + 99.9)
    assert finalization_due(pending(), switched, switched + 100.0)
    assert not finalization_due(pending(), switched, 200.0)  # the leader's clock: not used
    assert not finalization_due(pending(finalize_at=None), switched, 10**9)
    decided = pending(finalizing=Finalizing("x", 1.0, "operator"))
    assert not finalization_due(decided, switched, 10**9)
