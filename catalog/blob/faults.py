"""What a failure of the blob store means, in the project's own errors.

pyarrow reports every failure of a file system as an ``OSError`` whose message carries the
cloud SDK's error name (``AWS Error NETWORK_CONNECTION during HeadObject operation``, ``AWS
Error ACCESS_DENIED ...``, ``... (HTTP status 503) ...``). :func:`blob_error` sorts them into
kinds that every caller keeps apart:

* **unreachable** (:class:`~catalog.errors.BlobUnreachableError`): the store did not answer or
  said it cannot now (refused or reset connections, timeouts, 5xx, throttling). An outage:
  wait and retry. It is never reported as missing or corrupt data.
* **denied** (:class:`~catalog.errors.BlobDeniedError`, exit 2): credentials refused, or the
  operation not allowed to them.
* **bucket missing** (:class:`~catalog.errors.BlobBucketMissingError`, exit 2).
* **missing** (:class:`~catalog.errors.BlobMissingError`): the object is not there.
* **full** (:class:`~catalog.errors.BlobStoreFullError`): the store's file system is full, over a
  quota or read-only (ENOSPC, EDQUOT, EROFS): it takes no writes now, reads still work.
* anything else stays a plain :class:`~catalog.errors.BlobError`.
"""

from __future__ import annotations

import errno
import re
from typing import Any, Final

from catalog.errors import (
    BlobBucketMissingError,
    BlobDeniedError,
    BlobError,
    BlobMissingError,
    BlobStoreFullError,
    BlobUnreachableError,
)

UNREACHABLE: Final = "unreachable"
DENIED: Final = "denied"
NO_BUCKET: Final = "no-bucket"
MISSING: Final = "missing"
FULL: Final = "full"
OTHER: Final = "other"

#: The errno of a file system that takes no more writes: full, over a quota, read-only.
_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})

_PATTERNS: Final = (
    (
        FULL,
        re.compile(
            r"No space left on device|Disk quota exceeded|Read-only file system",
            re.IGNORECASE,
        ),
    ),
    (
        NO_BUCKET,
        re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|bucket does not exist", re.IGNORECASE),
    ),
    (
        DENIED,
        re.compile(
            r"ACCESS_DENIED|AccessDenied|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId"
            r"|SIGNATURE_DOES_NOT_MATCH|SignatureDoesNotMatch|EXPIRED_TOKEN|ExpiredToken"
            r"|UNRECOGNIZED_CLIENT|HTTP status 40[13]\b|Permission denied|Forbidden"
        ),
    ),
    (
        UNREACHABLE,
        re.compile(
            r"NETWORK_CONNECTION|SERVICE_UNAVAILABLE|SLOW_DOWN|THROTTLING|INTERNAL_FAILURE"
            r"|REQUEST_TIMEOUT|HTTP status 5\d\d"
            r"|curlCode: (?:6|7|28|52|55|56)\b"
            r"|Could not connect|Couldn't connect|Connection (?:refused|reset)|timed? ?out"
            r"|Broken pipe|Unable to connect",
            re.IGNORECASE,
        ),
    ),
    (MISSING, re.compile(r"NO_SUCH_KEY|NoSuchKey|RESOURCE_NOT_FOUND|HTTP status 404\b")),
)


def fault_of(exc: BaseException) -> str:
    """The kind of a file system failure (one of the constants above)."""
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return FULL
    if isinstance(exc, FileNotFoundError):
        return MISSING
    if isinstance(exc, PermissionError):
        return DENIED
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return UNREACHABLE
    text = str(exc)
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return OTHER


def is_transport(exc: BaseException) -> bool:
    """The failure says nothing about the data: the store could not be asked, or refused us."""
    return fault_of(exc) in (UNREACHABLE, DENIED, NO_BUCKET)


def blob_error(exc: BaseException, message: str, **details: Any) -> BlobError:
    """``exc`` (a file system's failure while doing ``message``) as the project's error."""
    kind = fault_of(exc)
    text = f"{message}: {exc}"
    if kind == UNREACHABLE:
        return BlobUnreachableError(f"blob store unreachable: {text}", **details)
    if kind == DENIED:
        return BlobDeniedError(
            f"blob store denied access: {text}",
            suggestion="check the credentials in the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the instance role) and their permissions",
            **details,
        )
    if kind == NO_BUCKET:
        return BlobBucketMissingError(
            f"bucket missing: {text}",
            suggestion="create the bucket first: catalog-upgrade never creates one",
            **details,
        )
    if kind == MISSING:
        return BlobMissingError(text, **details)
    if kind == FULL:
        return BlobStoreFullError(
            f"blob store full: {text}",
            suggestion="free space on the blob store (or raise its quota, or make it "
            "writable); retry the write with the same key",
            retry_after=5,
            **details,
        )
    return BlobError(text, **details)
