"""The sidecar's view of its blob store: answering, or unreachable since when and why.

An outage of the store is a state of the process, not a crash. Whatever meets a
:class:`~catalog.errors.BlobUnreachableError` (an append, a read, the leader's maintenance or
its probe every finalize interval) reports it here; the next operation that succeeds clears
it. While the store is unreachable the leader's ``/readyz`` fails (check ``blob-store``), its
process node and ``status`` say so, ``catalog_upgrade_blob_store_up`` is 0, and appends are
refused at once with 503 and ``Retry-After`` instead of waiting on the store's timeouts.

A full store (ENOSPC, EDQUOT, EROFS: :class:`~catalog.errors.BlobStoreFullError`) answers but
takes no writes: each append that meets it is refused (503 ``blob-store-full``), reads go on,
and the state lasts until a write succeeds (an append, or the leader's probe of a few bytes
every finalize interval while full). ``catalog_upgrade_blob_store_full`` is 1 meanwhile, and the
process node and ``status`` say so. Safe from any thread (plain assignments of immutable values).
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from catalog.errors import BlobStoreFullError, BlobUnreachableError
from orchestrator.machine.metrics import SidecarMetrics

log = structlog.get_logger(__name__)

#: Seconds a client should wait before retrying a write refused for an outage.
RETRY_AFTER_SECONDS = 5
#: The blob the leader writes and deletes while the store is full, to learn it has room again.
SPACE_PROBE_KEY = "probe/space"


class BlobStoreHealth:
    """Whether the blob store answers this process."""

    def __init__(self, metrics: SidecarMetrics) -> None:
        self._metrics = metrics
        self._failure: BlobUnreachableError | None = None
        self._since: float | None = None
        self._full: BlobStoreFullError | None = None
        self._full_since: float | None = None

    @property
    def unreachable(self) -> BlobUnreachableError | None:
        """The failure that made the store unreachable (None: it answers)."""
        return self._failure

    def failed(self, exc: BlobUnreachableError) -> None:
        """An operation met an outage."""
        self._metrics.blob_store_failures.inc()
        if self._failure is None:
            self._since = time.time()
            log.warning("blob_store_unreachable", message=exc.message)
            self._metrics.blob_store_up.set(0)
        self._failure = exc

    def answered(self) -> None:
        """An operation succeeded: the store answers again."""
        if self._failure is None:
            return
        down = time.time() - (self._since or time.time())
        self._failure, self._since = None, None
        self._metrics.blob_store_up.set(1)
        log.info("blob_store_reachable", unreachable_seconds=round(down, 1))

    @property
    def full(self) -> BlobStoreFullError | None:
        """The refusal that found the store full (None: the last write went through)."""
        return self._full

    def filled(self, exc: BlobStoreFullError) -> None:
        """A write met a full store (it answered, so it is reachable)."""
        self.answered()
        if self._full is None:
            self._full_since = time.time()
            log.warning("blob_store_full", message=exc.message)
            self._metrics.blob_store_full.set(1)
        self._full = exc

    def written(self) -> None:
        """A write succeeded: the store answers and has room."""
        self.answered()
        if self._full is None:
            return
        full = time.time() - (self._full_since or time.time())
        self._full, self._full_since = None, None
        self._metrics.blob_store_full.set(0)
        log.info("blob_store_has_room", full_seconds=round(full, 1))

    def refuse_writes(self) -> None:
        """Raise at once (503) while the store is known to be unreachable."""
        failure = self._failure
        if failure is not None:
            raise BlobUnreachableError(
                f"blob store unreachable since {self.detail()}: writes are refused until it "
                "answers again",
                since=self._since,
                retry_after=RETRY_AFTER_SECONDS,
            )

    def detail(self) -> str:
        """How long and why, for ``/readyz?verbose``."""
        failure, since = self._failure, self._since
        if failure is None or since is None:
            return ""
        return f"{time.strftime('%H:%M:%S', time.gmtime(since))} UTC ({failure.message})"

    def report(self) -> dict[str, Any] | None:
        """What the process node says of the store (None while it answers and has room)."""
        failure, since = self._failure, self._since
        if failure is not None:
            return {"reachable": False, "since": since, "error": failure.message}
        full, since = self._full, self._full_since
        if full is not None:
            return {"reachable": True, "full": True, "since": since, "error": full.message}
        return None
