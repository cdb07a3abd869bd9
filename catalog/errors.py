"""One exception hierarchy for catalog-upgrade (docs/design.md section 3).

Every error carries the data that explains it (path, field, version, generation) and maps onto
one documented exit code, so the CLI catches only :class:`CatalogError` and translates it:

    0 success, 2 bad input or configuration (nothing written), 3 fenced by a newer generation
    or epoch, 4 migration refused, 1 anything unexpected.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_BAD_INPUT = 2
EXIT_FENCED = 3
EXIT_REFUSED = 4


class CatalogError(Exception):
    """Root of every error this project raises on purpose.

    ``code``: for a refusal of a request, its short name (the ``error`` of an HTTP answer's
    body, where ``orchestrator.sidecar.api`` maps the class to its status)."""

    exit_code: int = EXIT_UNEXPECTED
    code: str | None = None

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description: the error class, its message and its data."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            "exit_code": self.exit_code,
            **{k: _jsonable(v) for k, v in self.details.items()},
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


# --- exit code 2: bad input or configuration -------------------------------------------------


class BadInputError(CatalogError):
    """The user gave something invalid (a file, an argument, a URI); nothing was written."""

    exit_code = EXIT_BAD_INPUT


class ReleaseError(BadInputError):
    """A release manifest is invalid or cannot be loaded."""


class ConfigurationError(BadInputError):
    """The environment or the machine is not set up as required (Java missing, blob URI differs)."""


class GenerationTakenError(ConfigurationError):
    """A process was started at a deploy generation that already runs another release: a
    generation stands for one release (``orchestrator.fencing.release_fence``), so it may
    neither lead nor wait to; the fix is a new generation."""


# --- exit code 3: fenced ---------------------------------------------------------------------


class FencedError(CatalogError):
    """A newer deploy generation or epoch took over; never retry."""

    exit_code = EXIT_FENCED


class LeadershipExpiredError(FencedError):
    """A leadership ended because its ZooKeeper session expired, not because anyone took over:
    its writes stop like a fenced leader's, and the process takes its leadership back (or a
    follower of its generation takes over), so a client retries."""


# --- exit code 4: migration refused ----------------------------------------------------------


class MigrationRefusedError(CatalogError):
    """The upgrade may not proceed: missing instruction, incompatible evolution, newer catalog."""

    exit_code = EXIT_REFUSED


class SchemaIncompatibleError(MigrationRefusedError):
    """A schema change breaks a rule of docs/design-evolution.md.

    ``rule`` is a stable id (e.g. ``type-changed``), ``path`` the dotted field path (``s.items.x``),
    ``old``/``new`` the types involved and ``suggestion`` a fix an engineer can apply.
    """

    def __init__(
        self,
        message: str,
        *,
        rule: str,
        path: str,
        old: Any = None,
        new: Any = None,
        suggestion: str | None = None,
        **details: Any,
    ) -> None:
        super().__init__(
            message, rule=rule, path=path, old=old, new=new, suggestion=suggestion, **details
        )
        self.rule = rule
        self.path = path
        self.old = old
        self.new = new
        self.suggestion = suggestion


class ReaderFencedError(SchemaIncompatibleError):
    """A reader schema is not a valid migration target of the shard's schemas."""


class PlanError(MigrationRefusedError):
    """A migration plan cannot be built (missing instruction, retain_data replaced, downgrade)."""


# --- exit code 1: storage and coordination ---------------------------------------------------


class ConsensusError(CatalogError):
    """A ZooKeeper-backed operation failed."""


class VersionMismatchError(ConsensusError):
    """A compare-and-set lost a race: re-read and retry. Carries the current value and version."""

    def __init__(
        self, message: str, *, key: str, current: Any = None, version: int | None = None, **d: Any
    ) -> None:
        super().__init__(message, key=key, version=version, **d)
        self.key = key
        self.current = current
        self.version = version


class ConnectionLostError(ConsensusError):
    """ZooKeeper did not answer; the outcome of the last write is unknown."""


class TransactionTooLargeError(ConsensusError):
    """A transaction (or one op of it) would exceed ZooKeeper's request limit: never sent,
    never retried (the server would drop the connection, and a resend would fail alike)."""


class WriteOutcomeUnknownError(ConsensusError):
    """A write's answer was lost and nothing durable tells whether it landed; never retry it
    blindly (it may be a duplicate)."""


class CorruptStateError(ConsensusError):
    """A znode's value cannot be decoded: names the ``key`` and what is wrong with it."""

    def __init__(self, message: str, *, key: str, **details: Any) -> None:
        super().__init__(message, key=key, **details)
        self.key = key


class BlobError(CatalogError):
    """Blob storage failed (catalog.blob.faults sorts a store's failures into the kinds below)."""


class BlobUnreachableError(BlobError):
    """The blob store did not answer, or answered that it cannot now (down, partitioned,
    overloaded): an outage to wait out and retry, never a sign of lost or corrupt data."""

    code = "blob-store-unreachable"


class BlobStoreFullError(BlobError):
    """The blob store takes no more writes now: its file system is full (ENOSPC), over a
    quota (EDQUOT) or read-only (EROFS). Reads still work; nothing was written: retry the
    write with the same key once space is freed."""

    code = "blob-store-full"


class BlobDeniedError(BlobError, ConfigurationError):
    """The blob store refused our credentials or this operation (exit 2: configuration)."""

    code = "blob-store-denied"


class BlobBucketMissingError(BlobError, ConfigurationError):
    """The bucket does not exist (exit 2: catalog-upgrade does not create buckets)."""

    code = "blob-bucket-missing"


class CorruptBlobError(BlobError):
    """A stored batch is missing, partial or not valid Parquet."""


class BlobMissingError(CorruptBlobError):
    """A blob that a state names is gone (usually replaced by a compaction under the read)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **{"reason": "missing", **details})


class ShardError(CatalogError):
    """A shard operation was invalid (finalized, rows outside the frontier, unknown schema)."""


class ShardFinalizedError(ShardError):
    """The shard is sealed or finalized: no more writes."""


class ShardNotFoundError(ShardError):
    """The shard does not exist (never created, or discarded)."""


class ShardGuardMovedError(ShardError):
    """An append's guard (a version check of another key) moved: nothing was appended."""


class ShardLeasedError(ShardError):
    """Finalization waited in vain: readers still hold leases on the shard."""
