"""The sidecar's states and the messages other threads put in its inbox."""

from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import Any

import attrs


class State(enum.Enum):
    STARTING = "starting"
    CHECKING = "checking"
    READY = "ready"
    MIGRATING = "migrating"
    SERVING = "serving"
    FENCED = "fenced"
    FAILED = "failed"


READY_STATES = frozenset({State.READY, State.SERVING})


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
