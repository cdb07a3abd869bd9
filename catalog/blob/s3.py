"""Opening an ``s3://BUCKET/PREFIX`` blob store: a client that gives up on an unanswering store
within seconds, at the endpoint named by the caller or the URI's query, credentials from the
standard AWS chain only (the URI never carries them: catalog.blob.uri)."""

from __future__ import annotations

import urllib.parse

import attrs
import pyarrow as pa
import pyarrow.fs as pafs

from catalog.errors import BadInputError

#: Seconds to wait for a connection; seconds a request may stall (no byte moving either way:
#: a store that accepted a request and does not answer it); attempts per request.
CONNECT_TIMEOUT = 2.0
STALL_TIMEOUT = 3.0
ATTEMPTS = 3
#: The longest an operation waits on a store that accepts requests and never answers before it
#: fails as unreachable. Measured (tests/integration/test_blob.py): a stalled PutObject costs
#: about 9 s an attempt (the SDK waits 1 s for ``100-continue``, the 3 s stall, and 5 s of its
#: own before it gives the attempt up), so 3 attempts and their backoff take about 28 s, and a
#: stalled read about 10 s; the bound keeps a margin for a loaded machine.
GIVE_UP_SECONDS = 35.0
_QUERY = frozenset({"endpoint_override", "scheme", "region"})


@attrs.frozen
class OpenedS3:
    """An S3 file system, the store's root (``bucket/prefix``), its endpoint (None: AWS) and
    the URI with that endpoint written in (what another process, a Spark executor, opens)."""

    filesystem: pafs.S3FileSystem
    root: str
    endpoint: str | None
    location: str


def open_s3(uri: str, parts: urllib.parse.SplitResult, endpoint: str | None) -> OpenedS3:
    """The store ``uri`` (split as ``parts``) names; ``endpoint`` wins over the query's.
    BadInputError for an unknown query option, no bucket, or options pyarrow refuses."""
    options = dict(urllib.parse.parse_qsl(parts.query))
    unknown = sorted(set(options) - _QUERY)
    if unknown or not parts.netloc:
        raise BadInputError(
            f"blob URI {uri!r} is not usable: "
            + (f"unknown option {', '.join(unknown)} " if unknown else "no bucket ")
            + "(s3://BUCKET/PREFIX?endpoint_override=HOST:PORT&scheme=http&region=R)",
            uri=uri,
        )
    scheme = options.get("scheme")
    endpoint = endpoint or options.get("endpoint_override")
    if endpoint and "://" in endpoint:
        scheme, _, endpoint = endpoint.partition("://")
    region = options.get("region") or ("us-east-1" if endpoint else None)
    try:
        filesystem = pafs.S3FileSystem(
            endpoint_override=endpoint,
            scheme=scheme or "https",
            region=region,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=STALL_TIMEOUT,  # curl's low-speed time: a stalled transfer fails
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
            # A blob smaller than a part goes up in one PutObject at its close, not as a
            # multipart upload (three requests); a failure is then reported by the close,
            # which every write of catalog.blob goes through.
            allow_delayed_open=True,
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInputError(f"blob URI {uri!r} is not usable: {exc}", uri=uri) from exc
    located = {k: v for k, v in options.items() if k not in ("endpoint_override", "scheme")}
    if endpoint:
        located |= {"endpoint_override": endpoint, "scheme": scheme or "https"}
    location = urllib.parse.urlunsplit(
        ("s3", parts.netloc, parts.path, urllib.parse.urlencode(located, safe=":/"), "")
    )
    return OpenedS3(filesystem, (parts.netloc + parts.path).rstrip("/"), endpoint, location)
