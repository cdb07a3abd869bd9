"""The status over HTTP: the live page and the documents it polls.

    GET /                     the live status page (orchestrator.status.page)
    GET /status[?coverage]    the ``status --json`` document (with lazy-migration coverage)
    GET /history              the upgrade history, oldest first (``history --json`` rows)

A sidecar serves them, and so does ``catalog-upgrade status --serve`` (which needs no sidecar),
through the same server (``orchestrator.sidecar.statusonly``); both read ZooKeeper on every
request, and the page polls once a second.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from catalog.consensus import Consensus
from orchestrator.history import read_history
from orchestrator.status.coverage import read_coverage
from orchestrator.status.page import STATUS_PAGE
from orchestrator.status.read import read_status

__all__ = ["history_document", "page_response", "status_document"]

PAGE_TYPE = "text/html; charset=utf-8"


def status_document(consensus: Consensus, *, coverage: bool = False) -> dict[str, Any]:
    """``status --json``, plus ``coverage`` when asked."""
    document = read_status(consensus).to_json()
    if coverage:
        document["coverage"] = read_coverage(consensus).to_json()
    return document


def history_document(consensus: Consensus) -> list[dict[str, Any]]:
    return [record.to_json() for record in read_history(consensus)]


def page_response() -> Response:
    return Response(STATUS_PAGE, content_type=PAGE_TYPE, headers={"Cache-Control": "no-store"})
