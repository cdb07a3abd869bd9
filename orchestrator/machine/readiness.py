"""What ``/readyz`` answers: the conditions behind a sidecar's readiness, each named."""

from __future__ import annotations

import attrs

from catalog.errors import CorruptStateError
from catalog.pipeline.pacing import StepProgress
from orchestrator.machine.objectstore import BlobStoreHealth
from orchestrator.machine.states import State
from orchestrator.process_node import READY_STATES
from orchestrator.zookeeper.clients import why_unreachable


def _ready_in(step: StepProgress | None) -> str:
    """``; ready in about N min`` while a long step has an ETA."""
    if step is None or step.eta_seconds is None or step.paused:
        return ""
    minutes = max(1, round(step.eta_seconds / 60))
    return f"; {step.step} of {step.collection}: ready in about {minutes} min"


@attrs.frozen
class ReadinessCheck:
    """One condition behind ``/readyz``."""

    name: str
    ok: bool
    detail: str = ""


@attrs.frozen
class Readiness:
    checks: tuple[ReadinessCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def render(self) -> str:
        """Kubernetes-style lines: ``[+]name ok`` / ``[-]name failed: detail``."""
        lines = [
            f"[+]{c.name} ok" if c.ok else f"[-]{c.name} failed: {c.detail}".rstrip(": ")
            for c in self.checks
        ]
        lines.append("readyz check passed" if self.ok else "readyz check failed")
        return "\n".join(lines) + "\n"


@attrs.frozen(kw_only=True)
class SidecarConditions:
    """What readiness is decided from, read off the process by the data plane: its state and
    phase, its ZooKeeper session, its registration, whether it leads, the durable node it
    cannot read (if any), and the blob store's health."""

    zk: str
    state: State
    phase: str | None
    connected: bool
    registered: bool
    writes_paused: bool
    leading: bool
    unreadable: CorruptStateError | None
    store: BlobStoreHealth
    #: The long step under way, if any, and whether the operator paused this generation.
    step: StepProgress | None = None
    paused: bool = False


def sidecar_readiness(now: SidecarConditions) -> Readiness:
    """The checks behind a sidecar's ``/readyz``: ZooKeeper (and, when it does not answer, why),
    registration, state, durable state; for a leader also the blob store and writes."""
    # Only when the session is not connected: ask the servers why (no quorum? all down?).
    servers = "" if now.connected else why_unreachable(now.zk, timeout=0.5)
    checks = [
        ReadinessCheck(
            "zookeeper",
            now.connected,
            f"not connected to {now.zk}" + (f": {servers}" if servers else ""),
        ),
        ReadinessCheck("registered", now.registered, "process node not registered"),
        ReadinessCheck(
            "state",
            now.state in READY_STATES,
            f"state is {now.state.value}"
            + (f" ({now.phase})" if now.phase else "")
            + _ready_in(now.step),
        ),
        # A read-only process is ready only once its checks ran in full: a paused one is not.
        # A serving leader stays ready (a pause holds its long steps, not its appends).
        ReadinessCheck(
            "pace",
            not (now.paused and not now.leading),
            "paused by the operator (catalog-upgrade resume)",
        ),
    ]
    unreadable = now.unreadable
    checks.append(
        ReadinessCheck(
            "durable-state",
            unreadable is None,
            "" if unreadable is None else f"cannot read {unreadable.key}: {unreadable.message}",
        )
    )
    if now.leading:
        checks.append(
            ReadinessCheck(
                "blob-store",
                now.store.unreachable is None,
                f"blob store unreachable since {now.store.detail()}",
            )
        )
        checks.append(
            ReadinessCheck(
                "writes",
                not now.writes_paused,
                "leader writes paused: ZooKeeper session suspended"
                + (f" ({servers})" if servers else ""),
            )
        )
    return Readiness(tuple(checks))
