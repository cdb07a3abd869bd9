"""The sidecar's states and the messages other threads put in its inbox."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import attrs

from orchestrator.process_node import ProcessState

#: The sidecar's states are the process node's (one spelling, in orchestrator.process_node).
State = ProcessState


# Phases whose durations are migration work (a histogram each); ready/serving are resting.
_RESTING_PHASES = frozenset(s.value for s in State) - {State.CHECKING.value}


@attrs.frozen
class _Stop:
    signal: int


@attrs.frozen
class _ZkState:
    state: str  # KazooState value: CONNECTED, SUSPENDED, LOST


@attrs.frozen
class _Promote:
    deploy_generation: int
    done: Future[dict[str, Any]]


class _Stopping(Exception):
    """Raised inside long waits once a stop was requested."""
