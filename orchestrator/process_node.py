"""The process node: each process's live status, ``processes/<id>`` (ephemeral JSON).

The sidecar writes it on every state or phase change and every heartbeat; ``status``, a waiting
``promote``, the leader's orphan collection, the scenario runner and the invariants read it.
They all go through this module: :class:`ProcessState` and :class:`ProcessMode` are the only
spellings of the states and modes, and :class:`ProcessNode` is the one value with one codec.

JSON (every key present; absent values are null)::

    {"id", "version", "deploy_generation", "mode": "read-only"|"leader",
     "state": "starting"|"checking"|"ready"|"migrating"|"serving"|"fenced"|"failed",
     "phase", "phase_since", "plan", "error", "host", "pid", "session", "epoch", "http",
     "heartbeat", "started_at", "blob_store": null or {"reachable": false, "since", "error"},
     "progress": null or {"step", "collection", "rows_done", "rows_total", "bytes_done",
                          "bytes_total", "started_at", "updated_at", "rate", "eta_seconds",
                          "paused", "limit"},
     "clock_offset"}

A value that is not such an object is a :class:`~catalog.errors.CorruptStateError` naming the
key and what is wrong, never a silently empty process.

Reading every process node goes through :func:`read_processes` (or :func:`decode_processes`
for values read in a caller's own pipelined round trip), with one policy for a node that
cannot be decoded: it is neither dropped nor fatal to the read. It is returned in
:attr:`Processes.unreadable` with its error, and each reader says what an unreadable process
means to it (the orphan collection: it may be creating shards, so wait; ``status``: an error
line; the invariants and ``promote --wait``: an error). A node deleted between the listing and
the read is simply absent.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Final

import attrs
import cattrs

from catalog.consensus import Consensus, Versioned
from catalog.environment import PROCESSES_KEY
from catalog.errors import CorruptStateError

__all__ = [
    "CREATING_STATES",
    "FINAL_STATES",
    "READY_STATES",
    "ProcessMode",
    "ProcessNode",
    "ProcessState",
    "Processes",
    "decode_processes",
    "process_key",
    "read_processes",
]


#: The phase of a ready process of an empty environment that nobody promoted or asked to
#: bootstrap (``--auto-promote``): it waits read-only (docs/design.md, "Bootstrapping is
#: explicit").
WAITING_FOR_BOOTSTRAP = "waiting for bootstrap"


class ProcessState(enum.Enum):
    """Where a process is in the state machine of :mod:`orchestrator.sidecar`."""

    STARTING = "starting"
    CHECKING = "checking"
    READY = "ready"
    MIGRATING = "migrating"
    SERVING = "serving"
    FENCED = "fenced"
    FAILED = "failed"


class ProcessMode(enum.Enum):
    READ_ONLY = "read-only"
    LEADER = "leader"


#: States in which ``/readyz`` answers 200.
READY_STATES: Final = frozenset({ProcessState.READY, ProcessState.SERVING})
#: States a process only leaves by exiting.
FINAL_STATES: Final = frozenset({ProcessState.FENCED, ProcessState.FAILED})
#: States in which a process may hold shards it created but has not named yet.
CREATING_STATES: Final = frozenset(
    {ProcessState.STARTING, ProcessState.CHECKING, ProcessState.MIGRATING}
)

_STATE_NAMES: Final = frozenset(s.value for s in ProcessState)
_MODE_NAMES: Final = frozenset(m.value for m in ProcessMode)


@attrs.frozen
class ProcessNode:
    """One process as its node says. ``state`` and ``mode`` hold the JSON names (``"ready"``);
    :attr:`process_state` gives the enum."""

    id: str
    version: str
    deploy_generation: int
    mode: str = attrs.field(validator=attrs.validators.in_(_MODE_NAMES))
    state: str = attrs.field(validator=attrs.validators.in_(_STATE_NAMES))
    phase: str | None = None
    phase_since: float | None = None
    plan: Any = None
    error: Any = None
    host: str | None = None
    pid: int | None = None
    session: str | None = None
    epoch: int | None = None
    http: str | None = None
    heartbeat: float | None = None
    started_at: float | None = None
    # While its blob store does not answer: {"reachable": false, "since", "error"}.
    blob_store: Any = None
    # While it runs a long step: catalog.pipeline.pacing.StepProgress as JSON.
    progress: Any = None
    # Seconds its clock runs ahead of ZooKeeper's (orchestrator.clock; None: not measured yet).
    clock_offset: float | None = None

    @property
    def process_state(self) -> ProcessState:
        return ProcessState(self.state)

    @property
    def is_leader(self) -> bool:
        return self.mode == ProcessMode.LEADER.value

    def in_states(self, states: frozenset[ProcessState]) -> bool:
        return self.process_state in states

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), default=str).encode()

    @classmethod
    def decode(cls, key: str, data: bytes) -> ProcessNode:
        """The node stored at ``key``; CorruptStateError when it is not a valid process node."""
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptStateError(
                f"process node {key} is not JSON: {exc}", key=key, reason="not-json"
            ) from exc
        if not isinstance(value, dict):
            raise CorruptStateError(
                f"process node {key} is a JSON {type(value).__name__}, not an object",
                key=key,
                reason="not-an-object",
            )
        for name, allowed in (("state", _STATE_NAMES), ("mode", _MODE_NAMES)):
            if name in value and value[name] not in allowed:
                raise CorruptStateError(
                    f"process node {key}: {name} {value.get(name)!r} is not one of "
                    f"{', '.join(sorted(allowed))}",
                    key=key,
                    reason="invalid",
                    field=name,
                )
        try:
            return _CONVERTER.structure(value, cls)
        except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
            problems = "; ".join(_messages(exc)) or str(exc)
            raise CorruptStateError(
                f"process node {key} is invalid: {problems}", key=key, reason="invalid"
            ) from exc


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, cattrs.BaseValidationError):
        return list(cattrs.transform_error(exc))
    return [str(exc)]


_CONVERTER = cattrs.Converter(forbid_extra_keys=False)


def process_key(process_id: str) -> str:
    """The key of a process's node (``processes/<id>``)."""
    return f"{PROCESSES_KEY}/{process_id}"


@attrs.frozen
class Processes:
    """The process nodes of an environment as read at one moment, by process id."""

    nodes: Mapping[str, ProcessNode]
    unreadable: Mapping[str, CorruptStateError]

    def raise_unreadable(self) -> None:
        """For a reader to whom an unreadable process is an error: raise the first one's."""
        for name in sorted(self.unreadable):
            raise self.unreadable[name]


def decode_processes(values: Mapping[str, bytes | Versioned | None]) -> Processes:
    """The nodes read as ``values`` (by process id; None: gone since the listing)."""
    nodes: dict[str, ProcessNode] = {}
    unreadable: dict[str, CorruptStateError] = {}
    for name, value in values.items():
        if value is None:
            continue
        data = value.value if isinstance(value, Versioned) else value
        try:
            nodes[name] = ProcessNode.decode(process_key(name), data)
        except CorruptStateError as exc:
            unreadable[name] = exc
    return Processes(nodes, unreadable)


def read_processes(consensus: Consensus) -> Processes:
    """Every process node, in two pipelined round trips (the listing, then the nodes)."""
    names = consensus.children(PROCESSES_KEY)
    found = consensus.get_many([process_key(n) for n in names])
    return decode_processes({n: found[process_key(n)] for n in names})
