"""Blob URIs: what a blob store is named by, recorded in the catalog and shown by status.

A URI never carries a credential (:func:`check_uri` refuses one, exit 2; :func:`redacted` is
what any message shows of a refused one); a local path is recorded absolute and resolved; every
process of an environment must agree on the recorded URI (:func:`agreed_uri`).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Final

from catalog.errors import ConfigurationError

#: Query keys of a blob URI that would carry a credential.
_SECRET_KEYS: Final = frozenset(
    {"access_key", "secret_key", "session_token", "aws_access_key_id", "aws_secret_access_key"}
)


def redacted(uri: str) -> str:
    """``uri`` with any user info and credential query values replaced by ``***``."""
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    cleaned = [(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in query]
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, urllib.parse.urlencode(cleaned, safe=":/"), "")
    )


def check_uri(uri: str) -> None:
    """ConfigurationError (exit 2) for a blob URI that carries a credential: the URI is
    recorded in the catalog and shown by status, so credentials come from the environment."""
    if "://" not in uri:
        return
    parts = urllib.parse.urlsplit(uri)
    keys = {k.lower() for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)}
    if "@" in parts.netloc or keys & _SECRET_KEYS:
        raise ConfigurationError(
            f"blob URI {redacted(uri)} carries credentials: put credentials in the environment "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance role), "
            "never in the URI (it is recorded and shown by status)",
            uri=redacted(uri),
        )


def local_uri(path: str | os.PathLike[str]) -> str:
    """The blob URI of a local directory (what ``--blob DIR`` records)."""
    return str(Path(path).expanduser().resolve())


def normalize_uri(uri: str) -> str:
    """The form a blob URI is recorded and compared in: a local path absolute and resolved,
    any other URI (``s3://``, ``file://``...) as given without a trailing slash."""
    return uri.rstrip("/") if "://" in uri else local_uri(uri)


def agreed_uri(given: str | None, recorded: str) -> str:
    """The environment's recorded blob URI, after checking that ``given`` (``--blob``, may be
    None) does not contradict it: ConfigurationError (exit 2) when it does."""
    if given is not None:
        check_uri(given)
    if given is not None and normalize_uri(given) != normalize_uri(recorded):
        raise ConfigurationError(
            f"--blob {given} differs from the blob URI {recorded} this environment recorded "
            "at bootstrap",
            given=normalize_uri(given),
            recorded=recorded,
            suggestion=f"omit --blob, or pass --blob {recorded}",
        )
    return recorded
