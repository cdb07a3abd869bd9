"""Request ids: one per call of the client, sent in ``X-Request-Id`` with each of its requests
(its retries included) and logged by the sidecar with everything the request logs, so a call
is found in the sidecar's log by the id the client reports.

The sidecar takes a client's id when it is 1 to 128 characters of letters, digits and
``-_.:``; otherwise (or without one) it makes its own. Either way the answer carries it back.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

__all__ = ["REQUEST_ID_HEADER", "new_request_id", "usable_request_id"]

REQUEST_ID_HEADER: Final = "X-Request-Id"

_USABLE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_request_id() -> str:
    return uuid.uuid4().hex


def usable_request_id(sent: str | None) -> str:
    """``sent`` when it is a usable id, else a new one."""
    if sent is not None and _USABLE.fullmatch(sent):
        return sent
    return new_request_id()
