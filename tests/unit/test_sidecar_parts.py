"""Pure parts of the sidecar: blob URI resolution, row parsing, JSON values, configuration."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.blob.uri import agreed_uri, normalize_uri
from catalog.errors import BadInputError, ConfigurationError
from catalog_client.jsonforms import jsonable
from orchestrator.sidecar import (
    SidecarConfig,
    resolve_blob_uri,
)
from orchestrator.wire.ndjson import rows_to_table

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("oid", pa.uint32(), nullable=False),
        pa.field("vars", pa.map_(pa.string(), pa.string())),
    ]
)


def test_blob_defaults_to_var_blob_env_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --blob and without a recorded URI, the blob is ./var/blob/<env>, absolute."""
    monkeypatch.chdir(tmp_path)
    assert resolve_blob_uri(None, None, "prod") == str(tmp_path / "var" / "blob" / "prod")


def test_blob_recorded_uri_wins_and_may_be_repeated(tmp_path: Path) -> None:
    """The recorded URI is used when --blob is omitted or names the same place."""
    recorded = str(tmp_path / "blob")
    assert resolve_blob_uri(None, recorded, "e") == recorded
    assert resolve_blob_uri(str(tmp_path / "x" / ".." / "blob"), recorded, "e") == recorded


def test_blob_different_from_recorded_is_refused(tmp_path: Path) -> None:
    """A --blob different from the recorded URI is a configuration error naming both."""
    with pytest.raises(ConfigurationError) as caught:
        resolve_blob_uri(str(tmp_path / "other"), str(tmp_path / "blob"), "e")
    assert caught.value.details["recorded"] == str(tmp_path / "blob")
    assert caught.value.details["given"] == str(tmp_path / "other")


def test_blob_uris_with_a_scheme_are_kept_as_given(tmp_path: Path) -> None:
    """s3://, gs://, file:// URIs are recorded as given (no trailing slash); only plain paths
    are resolved; the sidecar and the data commands compare them the same way."""
    assert normalize_uri("s3://bucket/catalog/") == "s3://bucket/catalog"
    assert normalize_uri(str(tmp_path / "a" / ".." / "b")) == str(tmp_path / "b")
    assert agreed_uri("s3://bucket/catalog/", "s3://bucket/catalog") == "s3://bucket/catalog"
    with pytest.raises(ConfigurationError):
        agreed_uri("s3://bucket/other", "s3://bucket/catalog")


def test_rows_to_table_builds_the_schema() -> None:
    """JSON lines become a table of the collection's schema; missing nullable fields are null."""
    table = rows_to_table(
        b'{"id": "a", "oid": 1}\n\n{"id": "b", "oid": 2, "vars": {"k": "v"}}\n', SCHEMA
    )
    assert table.schema == SCHEMA
    assert table.column("vars").to_pylist() == [None, [("k", "v")]]


@pytest.mark.parametrize(
    ("body", "field", "line"),
    [
        (b'{"id": "a"}\n', "oid", 1),
        (b'{"id": "a", "oid": 1}\n{"id": "b", "oid": 2, "extra": 1}\n', "extra", 2),
        (b'{"id": null, "oid": 1}\n', "id", 1),
        (b'{"id": "a", "oid": 1}\n\n{"id": "b", "oid": "two"}\n', "oid", 3),
        (b'{"id": 7, "oid": 1}\n', "id", 1),
    ],
)
def test_rows_to_table_names_the_bad_field_and_line(body: bytes, field: str, line: int) -> None:
    """A missing required field or an unknown field is refused naming the field and line."""
    with pytest.raises(BadInputError) as caught:
        rows_to_table(body, SCHEMA)
    assert caught.value.details["field"] == field
    assert caught.value.details["line"] == line


@pytest.mark.parametrize(
    "body",
    [b"not json\n", b"[1, 2]\n", b"", b'{"id": "a", "oid": -1}\n', b'{"id": 1, "oid": "x"}\n'],
)
def test_rows_to_table_refuses_malformed_bodies(body: bytes) -> None:
    """Non-JSON, non-object, empty and type-mismatched bodies are bad input."""
    with pytest.raises(BadInputError):
        rows_to_table(body, SCHEMA)


def test_rows_nest_at_most_64_levels_counted_by_depth_not_by_brackets() -> None:
    """A row nested 65 levels is refused naming the limit; a shallow row with many brackets
    (a value of 100 empty objects in a string) passes: depth, not the bracket count, decides."""
    deep = b'{"id": "a", "oid": 1, "vars": ' + b"[" * 64 + b"]" * 64 + b"}\n"
    with pytest.raises(BadInputError) as caught:
        rows_to_table(deep, SCHEMA)
    assert caught.value.details["limit"] == 64
    brackets = "{}" * 100
    table = rows_to_table(f'{{"id": "{brackets}", "oid": 1}}\n'.encode(), SCHEMA)
    assert table.column("id").to_pylist() == [brackets]


def test_jsonable_renders_arrow_values() -> None:
    """Times become ISO 8601, bytes base64, decimals strings and Arrow maps objects."""
    moment = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert jsonable(moment) == "2024-01-02T03:04:05+00:00"
    assert jsonable(b"\x00\x01") == "AAE="
    assert jsonable(decimal.Decimal("1.50")) == "1.50"
    assert jsonable([("k", 1), ("l", 2)]) == {"k": 1, "l": 2}
    assert jsonable([{"a": moment}]) == [{"a": "2024-01-02T03:04:05+00:00"}]


@pytest.mark.parametrize(
    "kwargs", [{"process_id": "a/b"}, {"process_id": ""}, {"deploy_generation": 0}]
)
def test_config_refuses_bad_values(kwargs: dict[str, object]) -> None:
    """A process id with '/' or empty, and a generation below 1, are bad input."""
    base: dict[str, object] = {
        "zk": "h:1",
        "env": "e",
        "release_ref": "r.py",
        "deploy_generation": 1,
    }
    with pytest.raises(BadInputError):
        SidecarConfig(**{**base, **kwargs})  # type: ignore[arg-type]
