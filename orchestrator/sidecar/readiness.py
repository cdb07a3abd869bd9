"""What ``/readyz`` answers: the conditions behind a sidecar's readiness, each named."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from orchestrator.process_node import READY_STATES
from orchestrator.zk import why_unreachable

if TYPE_CHECKING:
    from orchestrator.sidecar.connection import SidecarConnection
    from orchestrator.sidecar.machine import SidecarMachine
    from orchestrator.sidecar.progress import Progress


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


def sidecar_readiness(
    zk: str, progress: Progress, connection: SidecarConnection, machine: SidecarMachine
) -> Readiness:
    """The checks behind a sidecar's ``/readyz``: ZooKeeper (and, when it does not answer, why),
    registration, state, durable state; for a leader also the blob store and writes."""
    state = progress.state
    connected = connection.connected
    # Only when the session is not connected: ask the servers why (no quorum? all down?).
    servers = "" if connected else why_unreachable(zk, timeout=0.5)
    checks = [
        ReadinessCheck(
            "zookeeper",
            connected,
            f"not connected to {zk}" + (f": {servers}" if servers else ""),
        ),
        ReadinessCheck("registered", connection.registered, "process node not registered"),
        ReadinessCheck(
            "state",
            state in READY_STATES,
            f"state is {state.value}" + (f" ({progress.phase})" if progress.phase else ""),
        ),
    ]
    unreadable = machine.health.unreadable
    checks.append(
        ReadinessCheck(
            "durable-state",
            unreadable is None,
            "" if unreadable is None else f"cannot read {unreadable.key}: {unreadable.message}",
        )
    )
    if machine.leadership is not None:
        store = machine.store
        checks.append(
            ReadinessCheck(
                "blob-store",
                store.unreachable is None,
                f"blob store unreachable since {store.detail()}",
            )
        )
        checks.append(
            ReadinessCheck(
                "writes",
                not connection.writes_paused,
                "leader writes paused: ZooKeeper session suspended"
                + (f" ({servers})" if servers else ""),
            )
        )
    return Readiness(tuple(checks))
