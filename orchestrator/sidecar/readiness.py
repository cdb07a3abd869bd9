"""What ``/readyz`` answers: the conditions behind a sidecar's readiness, each named."""

from __future__ import annotations

import attrs


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
