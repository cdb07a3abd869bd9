"""A test client of the sidecar's HTTP API: one request, its answer, never an exception for an
HTTP or socket error (status 0 when the process could not be reached)."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["HttpAnswer", "http_request"]


@attrs.frozen
class HttpAnswer:
    """An HTTP answer; ``status`` 0 when the process could not be reached at all."""

    status: int
    body: bytes
    error: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    def json_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]

    def summary(self) -> str:
        """One line for a step's outcome: the status and the body, JSON compacted."""
        if self.status == 0:
            return f"unreachable ({self.error})"
        body = self.text().strip()
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(body), separators=(",", ":"))
        body = body.replace("\n", " ")
        return f"HTTP {self.status}" + (f": {body[:300]}" if body else "")


def http_request(
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """One HTTP request (never raises for HTTP or socket errors: status 0 when unreachable)."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    # The sidecar refuses a POST of another type; a caller may name its own (Arrow).
    if (body is not None or method == "POST") and not request.has_header("Content-type"):
        request.add_header("Content-Type", "application/x-ndjson")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return HttpAnswer(
                status=answer.status, body=answer.read(), headers=dict(answer.headers)
            )
    except urllib.error.HTTPError as exc:
        return HttpAnswer(status=exc.code, body=exc.read(), headers=dict(exc.headers))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return HttpAnswer(status=0, body=b"", error=f"{type(exc).__name__}: {reason}")
