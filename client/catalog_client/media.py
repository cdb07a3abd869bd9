"""The media types of the sidecar's HTTP API: what a body is, as both ends name it."""

from __future__ import annotations

from typing import Final

__all__ = ["ARROW_STREAM_TYPE", "JSON_LINES_TYPE", "JSON_TYPE"]

#: Rows as JSON lines: one object a line (``POST /append``, ``GET /read``).
JSON_LINES_TYPE: Final = "application/x-ndjson"
#: Rows as an Arrow IPC stream (``POST /append``, ``GET /read`` with this ``Accept``).
ARROW_STREAM_TYPE: Final = "application/vnd.apache.arrow.stream"
#: A JSON document (``/status``, ``POST /promote``, every refusal).
JSON_TYPE: Final = "application/json"
