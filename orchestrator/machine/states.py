"""The sidecar's states and the messages other threads put in its inbox."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import attrs

from orchestrator.process_node import WAITING_FOR_BOOTSTRAP, ProcessState

#: The sidecar's states are the process node's (one spelling, in orchestrator.process_node).
State = ProcessState


#: Phases whose durations are migration work (a histogram each); ready/serving are resting.
RESTING_PHASES = (frozenset(s.value for s in State) - {State.CHECKING.value}) | {
    WAITING_FOR_BOOTSTRAP
}


@attrs.frozen
class Stop:
    """A stop was asked for (a signal, or ``request_stop``)."""

    signal: int


@attrs.frozen
class ZkState:
    """kazoo's session state changed."""

    state: str  # KazooState value: CONNECTED, SUSPENDED, LOST


@attrs.frozen
class Promote:
    """A promotion asked over HTTP, answered through ``done``."""

    deploy_generation: int
    done: Future[dict[str, Any]]
    # Who asked, for the audit: the credential's name (or "anonymous") @ the client's address.
    requested_by: str | None = None


class Stopping(Exception):
    """Raised inside long waits once a stop was requested."""
