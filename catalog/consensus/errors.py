"""kazoo's exceptions as this project's errors: the one home of that mapping.

* a lost connection, an expired session or a timeout: ``ConnectionLostError`` (retryable; the
  outcome of a write is unknown);
* ``NoAuthError`` (the node's ACL refuses these credentials): ``AccessDeniedError``, exit 2,
  naming the key and the options that carry credentials.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from catalog.errors import ConfigurationError, ConnectionLostError

CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


class AccessDeniedError(ConfigurationError):
    """ZooKeeper refused these credentials for a node (exit 2): nothing was written."""


def access_denied(key: str) -> AccessDeniedError:
    return AccessDeniedError(
        f"ZooKeeper refused access to {key or 'the environment root'}: the environment is "
        "secured and this process has no credentials, or the wrong ones (pass --zk-auth "
        "file:PATH or env:NAME; a read-only credential only reads)",
        key=key,
        suggestion="--zk-auth file:PATH",
    )


@contextlib.contextmanager
def translated(what: str, key: str = "") -> Iterator[None]:
    """Run a ZooKeeper call, raising this project's error for kazoo's connection and access
    errors (``what`` completes "ZooKeeper did not answer ...")."""
    try:
        yield
    except NoAuthError as exc:
        raise access_denied(key) from exc
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError(f"ZooKeeper did not answer {what}", key=key) from exc
