"""The HTTP API's error vocabulary: every ``error`` code an answer may carry, its status, and
when it is sent. The one table: the server names its refusals from it (:func:`refusal_of`), the
OpenAPI document enumerates it, the manual's table is written from it, and a test checks that
every error the server can raise or make lands in it.

The refusals only a sidecar makes are defined beside their raisers, each with its code: a
request's form (``too-many-rows`` in :mod:`orchestrator.wire.ipc`, the idempotency keys in
:mod:`orchestrator.dataplane.idempotency`) and the states of a process that serves
(``read-only``, ``no-shard`` in :mod:`~orchestrator.dataplane.serving`, ``migrating`` in
:mod:`~orchestrator.dataplane.reader`, ``writes-paused`` in
:mod:`~orchestrator.dataplane.writer`...).
The HTTP layer's own (a malformed request, a credential) are in
:mod:`orchestrator.http.refusals`. The durable model's errors, which the sidecar answers too,
stay in :mod:`catalog.errors`. This module gives each its status and its meaning.

A code is kebab-case. A domain error with a code of its own (``read-only``,
``idempotency-key-reused``) answers that code; any other answers its family's (``bad-input``,
``fenced``, ``migration-refused``, ``zookeeper-unreachable``), its details kept, and anything
else ``unexpected``. No class name and no exit code appear in an HTTP body.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

from catalog.errors import (
    EXIT_UNEXPECTED,
    BadInputError,
    BlobBucketMissingError,
    BlobDeniedError,
    BlobStoreFullError,
    BlobUnreachableError,
    CatalogError,
    ConnectionLostError,
    FencedError,
    MigrationRefusedError,
)
from orchestrator.dataplane.groupcommit import AppendOutcomeUnknownError
from orchestrator.dataplane.idempotency import (
    BadIdempotencyKeyError,
    IdempotencyKeyInProgressError,
    IdempotencyKeyReusedError,
)
from orchestrator.dataplane.merger import CompactionBehindError
from orchestrator.dataplane.plane import BusyError
from orchestrator.dataplane.reader import MigratingError, UnreadableTimeError
from orchestrator.dataplane.serving import NoShardError, NotLeaderError, UnknownCollectionError
from orchestrator.dataplane.writer import CommitContendedError, WritesPausedError
from orchestrator.http.refusals import HTTP_REFUSALS, Refusal, own
from orchestrator.wire.ipc import TooManyRowsError

__all__ = [
    "ERRORS",
    "body_of",
    "process_error",
    "refusal_named",
    "refusal_of",
]

S: Final = HTTPStatus
#: The API's own codes, by status.
_API: Final[tuple[Refusal, ...]] = (
    own(BadIdempotencyKeyError, S.BAD_REQUEST, "an `Idempotency-Key` that is not of its form"),
    Refusal("bad-input", S.BAD_REQUEST, "malformed input, named: the line and field of a JSON "
            "line, the field of an Arrow stream, a generation no process registered",
            error=BadInputError),
    own(UnknownCollectionError, S.NOT_FOUND, "the release has no such builtin collection"),
    own(NoShardError, S.NOT_FOUND, "the collection has no shard yet"),
    own(NotLeaderError, S.CONFLICT, "an append to a process the epoch does not name: append "
         "through the leader"),
    Refusal("fenced", S.CONFLICT, "the process was fenced by a newer generation or epoch",
            error=FencedError),
    Refusal("migration-refused", S.CONFLICT, "the upgrade does not allow it; `rule` says why "
            "(`requires-finalization`: the pending upgrade's contraction comes first)",
            error=MigrationRefusedError),
    own(IdempotencyKeyInProgressError, S.CONFLICT, "the same key is being appended right now: "
         "retry"),
    own(UnreadableTimeError, S.CONFLICT, "a read `as_of` a time compaction no longer holds"),
    own(TooManyRowsError, S.REQUEST_ENTITY_TOO_LARGE, "more rows than "
         "`--http-max-append-rows`"),
    own(IdempotencyKeyReusedError, S.UNPROCESSABLE_ENTITY, "the key was used for another body"),
    own(BlobDeniedError, S.INTERNAL_SERVER_ERROR, "the blob store refuses the sidecar's "
         "credentials"),
    own(BlobBucketMissingError, S.INTERNAL_SERVER_ERROR, "the blob store has no such bucket"),
    own(WritesPausedError, S.SERVICE_UNAVAILABLE, "writes wait for a state that passes (a "
         "takeover, a pause): retry after `Retry-After` with the same key"),
    own(BlobUnreachableError, S.SERVICE_UNAVAILABLE, "the blob store does not answer: retry "
         "after `Retry-After` with the same key"),
    own(BlobStoreFullError, S.SERVICE_UNAVAILABLE, "the blob store's file system is full, "
         "over a quota or read-only (nothing written; reads still work): retry after "
         "`Retry-After` with the same key once space is freed"),
    own(CompactionBehindError, S.SERVICE_UNAVAILABLE, "the shard's merges fell behind its "
         "appends (it lists the hard cap of batches): retry after `Retry-After` with the same "
         "key"),
    own(CommitContendedError, S.SERVICE_UNAVAILABLE, "a commit that lost its compare-and-set "
         "to the shard's other writes (merges, the sweep) until its retries ran out; nothing "
         "written: retry after `Retry-After` with the same key"),
    own(AppendOutcomeUnknownError, S.SERVICE_UNAVAILABLE, "an append whose commit did not "
         "end within its deadline (a stalled store): it may still land; retry after "
         "`Retry-After` with the same key to learn its outcome"),
    Refusal("zookeeper-unreachable", S.SERVICE_UNAVAILABLE, "ZooKeeper does not answer: retry "
            "after `Retry-After`", error=ConnectionLostError),
    own(MigratingError, S.SERVICE_UNAVAILABLE, "a read the new leader answers once its "
         "migration switched the catalog (a cut-over): retry"),
    own(BusyError, S.GATEWAY_TIMEOUT, "the process did not handle a promotion in time"),
)

#: Every code, by status: the HTTP layer's (orchestrator.http.refusals) and the API's.
ERRORS: Final[tuple[Refusal, ...]] = tuple(
    sorted((*HTTP_REFUSALS, *_API), key=lambda refusal: refusal.status)
)

_BY_CODE: Final[Mapping[str, Refusal]] = {r.code: r for r in ERRORS}
_BY_ERROR: Final[Mapping[type[CatalogError], Refusal]] = {
    r.error: r for r in ERRORS if r.error is not None
}


def refusal_named(code: str) -> Refusal:
    """The refusal of ``code`` (KeyError for a code that is not in the table)."""
    return _BY_CODE[code]


def refusal_of(exc: BaseException) -> Refusal:
    """The refusal that answers ``exc``: its class's, else its nearest ancestor's, else
    ``unexpected``."""
    for klass in type(exc).__mro__:
        found = _BY_ERROR.get(klass)
        if found is not None:
            return found
    return _BY_CODE["unexpected"]


def body_of(exc: CatalogError) -> dict[str, Any]:
    """The JSON body that answers ``exc``: its code, its message and its details."""
    body = exc.to_json()
    body.pop("exit_code", None)
    body["error"] = refusal_of(exc).code
    return body


def process_error(exc: BaseException) -> dict[str, Any]:
    """Why a process ends, as its node, ``/status`` and its last event carry it: the error's
    code in this vocabulary (as an HTTP body names it), its message and details, and the exit
    code the process ends with (what a supervisor sees). No class name."""
    if isinstance(exc, CatalogError):
        return {**body_of(exc), "exit_code": exc.exit_code}
    return {"error": "unexpected", "message": str(exc) or type(exc).__name__,
            "exit_code": EXIT_UNEXPECTED}  # fmt: skip
