"""The process node codec: one value, written by the sidecar and read by every reader."""

from __future__ import annotations

import json

import pytest

from catalog.errors import CorruptStateError
from orchestrator.process_node import (
    CREATING_STATES,
    FINAL_STATES,
    READY_STATES,
    ProcessNode,
    ProcessState,
)

KEY = "processes/green-2"


def node(**changes: object) -> ProcessNode:
    fields: dict[str, object] = {
        "id": "green-2",
        "version": "0.11.0",
        "deploy_generation": 2,
        "mode": "read-only",
        "state": "ready",
        "phase": "ready",
        "plan": {"migrations": [{"global_id": "s1", "shard_id": "x"}]},
        "pid": 42,
        "heartbeat": 1.5,
    }
    fields.update(changes)
    return ProcessNode(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field() -> None:
    """decode(encode(node)) is the node; the JSON has every key of the documented shape."""
    original = node(error={"error": "FencedError", "exit_code": 3}, state="fenced")
    data = original.encode()
    assert ProcessNode.decode(KEY, data) == original
    assert set(json.loads(data)) == {
        "id", "version", "deploy_generation", "mode", "state", "phase", "phase_since", "plan",
        "error", "host", "pid", "session", "epoch", "http", "heartbeat", "started_at",
        "blob_store", "progress", "clock_offset",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "is a JSON list, not an object"),
        (b'{"id": "green-2"}', "required field missing"),
        (b'{"id": "g", "version": "1", "deploy_generation": "two", "mode": "leader", '
         b'"state": "ready"}', "deploy_generation"),
        (b'{"id": "g", "version": "1", "deploy_generation": 2, "mode": "leader", '
         b'"state": "zombie"}', "state 'zombie' is not one of"),
        (b'{"id": "g", "version": "1", "deploy_generation": 2, "mode": "boss", '
         b'"state": "ready"}', "mode 'boss' is not one of"),
    ],
)  # fmt: skip
def test_corrupt_values_name_the_key_and_the_problem(data: bytes, words: str) -> None:
    """A value no writer produces is a CorruptStateError naming the key, never an empty node."""
    with pytest.raises(CorruptStateError) as info:
        ProcessNode.decode(KEY, data)
    assert info.value.key == KEY
    assert KEY in info.value.message and words in info.value.message


def test_invalid_values_cannot_be_built() -> None:
    """The writer cannot produce an unknown state or mode either."""
    with pytest.raises(ValueError):
        node(state="zombie")
    with pytest.raises(ValueError):
        node(mode="boss")


def test_state_groups() -> None:
    """The groups every reader uses partition the states the way the state machine means."""
    assert {s.value for s in READY_STATES} == {"ready", "serving"}
    assert {s.value for s in FINAL_STATES} == {"fenced", "failed"}
    assert ProcessState.MIGRATING in CREATING_STATES
    assert not READY_STATES & FINAL_STATES and not CREATING_STATES & FINAL_STATES
    assert node(state="serving").in_states(READY_STATES)
    assert node(mode="leader").is_leader and not node().is_leader
