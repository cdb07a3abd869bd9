"""What a blob store's failure means (catalog.blob.faults) and what a blob URI may carry
(catalog.blob.uri): pure logic, on the messages pyarrow's S3, GCS and local file systems give."""

from __future__ import annotations

import pytest

from catalog.blob.faults import DENIED, MISSING, NO_BUCKET, OTHER, UNREACHABLE, blob_error, fault_of
from catalog.blob.uri import agreed_uri, check_uri, redacted
from catalog.errors import (
    EXIT_BAD_INPUT,
    BlobBucketMissingError,
    BlobDeniedError,
    BlobError,
    BlobMissingError,
    BlobUnreachableError,
    ConfigurationError,
    CorruptBlobError,
)

# Messages as pyarrow 15-21 word them (S3 via the AWS SDK, curl underneath).
CASES = [
    (
        "When getting information for key 'a' in bucket 'b': AWS Error NETWORK_CONNECTION "
        "during HeadObject operation: curlCode: 7, Could not connect to server",
        UNREACHABLE,
    ),
    ("AWS Error UNKNOWN (HTTP status 503) during PutObject operation: Slow Down", UNREACHABLE),
    ("AWS Error SLOW_DOWN during PutObject operation", UNREACHABLE),
    ("curlCode: 28, Timeout was reached", UNREACHABLE),
    ("AWS Error ACCESS_DENIED during HeadBucket operation: No response body.", DENIED),
    ("AWS Error UNKNOWN (HTTP status 403) during HeadObject operation", DENIED),
    ("AWS Error INVALID_ACCESS_KEY_ID during ListObjectsV2 operation", DENIED),
    (
        "When initiating multiple part upload for key 'x' in bucket 'nobucket': AWS Error "
        "NO_SUCH_BUCKET during CreateMultipartUpload operation: The specified bucket does not "
        "exist",
        NO_BUCKET,
    ),
    ("AWS Error NO_SUCH_KEY during GetObject operation", MISSING),
    ("Parquet magic bytes not found in footer. Either the file is corrupted or this is not a "
     "parquet file.", OTHER),
]  # fmt: skip


@pytest.mark.parametrize(("message", "kind"), CASES)
def test_a_failure_is_sorted_by_what_it_says(message: str, kind: str) -> None:
    assert fault_of(OSError(message)) == kind


def test_python_exceptions_are_sorted_by_type() -> None:
    assert fault_of(FileNotFoundError("x")) == MISSING
    assert fault_of(PermissionError("x")) == DENIED
    assert fault_of(ConnectionRefusedError("x")) == UNREACHABLE
    assert fault_of(TimeoutError("x")) == UNREACHABLE


def test_each_kind_is_its_own_error_and_exit_code() -> None:
    """Unreachable is an outage (never corrupt, never a configuration error); denied and a
    missing bucket are configuration (exit 2)."""
    unreachable = blob_error(OSError(CASES[0][0]), "reading blob k", key="k")
    assert type(unreachable) is BlobUnreachableError
    assert not isinstance(unreachable, (CorruptBlobError, ConfigurationError))
    denied = blob_error(OSError(CASES[4][0]), "reading blob k")
    assert isinstance(denied, BlobDeniedError) and denied.exit_code == EXIT_BAD_INPUT
    assert "AWS_ACCESS_KEY_ID" in denied.details["suggestion"]
    missing_bucket = blob_error(OSError(CASES[7][0]), "writing blob k")
    assert isinstance(missing_bucket, BlobBucketMissingError)
    assert missing_bucket.exit_code == EXIT_BAD_INPUT
    assert isinstance(blob_error(OSError(CASES[8][0]), "reading"), BlobMissingError)
    assert type(blob_error(OSError("something else"), "reading")) is BlobError


@pytest.mark.parametrize(
    "uri",
    [
        "s3://AKIAEXAMPLE:topsecret@bucket/env",
        "s3://topsecret@bucket/env",
        "s3://bucket/env?secret_key=topsecret&access_key=AKIAEXAMPLE",
        "gs://bucket/env?session_token=topsecret",
    ],
)
def test_a_uri_carrying_a_credential_is_refused_without_showing_it(uri: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_uri(uri)
    text = caught.value.message + str(caught.value.to_json())
    assert "topsecret" not in text and "AKIAEXAMPLE" not in text
    assert "put credentials in the environment" in caught.value.message
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert "topsecret" not in redacted(uri)


def test_plain_uris_pass_and_agreement_checks_credentials_first() -> None:
    for uri in ("s3://bucket/env?endpoint_override=127.0.0.1:9000&scheme=http", "/tmp/blob"):
        check_uri(uri)
    with pytest.raises(ConfigurationError) as caught:
        agreed_uri("s3://key:topsecret@bucket/other", "s3://bucket/env")
    assert "topsecret" not in str(caught.value.to_json())
