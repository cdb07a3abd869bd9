"""One error hierarchy: the kinds code branches on are types that still carry their data."""

from __future__ import annotations

import ast
from pathlib import Path

from catalog.errors import (
    EXIT_UNEXPECTED,
    BlobMissingError,
    CatalogError,
    CorruptBlobError,
    CorruptStateError,
    ShardError,
    ShardGuardMovedError,
    ShardLeasedError,
    ShardNotFoundError,
)
from catalog.shard.state import shard_error
from orchestrator.sidecar.http import REFUSALS, HttpError

ROOT = Path(__file__).resolve().parents[2]


def test_shard_reasons_code_branches_on_are_types() -> None:
    """not-found, guard-moved and leased raise their own class, with the reason kept as data."""
    for reason, kind in (
        ("not-found", ShardNotFoundError),
        ("guard-moved", ShardGuardMovedError),
        ("leased", ShardLeasedError),
    ):
        error = shard_error("m", "s1", reason)
        assert type(error) is kind and isinstance(error, ShardError)
        assert error.to_json()["reason"] == reason and error.details["shard_id"] == "s1"
    assert type(shard_error("m", "s1", "upper-regression")) is ShardError


def test_blob_missing_is_a_corrupt_blob_with_its_reason() -> None:
    error = BlobMissingError("blob k is missing", key="k")
    assert isinstance(error, CorruptBlobError)
    assert error.details == {"reason": "missing", "key": "k"}


def test_every_error_class_has_one_root() -> None:
    """HTTP refusals and corrupt state are CatalogErrors like everything else."""
    assert issubclass(HttpError, CatalogError) and issubclass(CorruptStateError, CatalogError)
    for refusal in REFUSALS:
        assert issubclass(refusal, CatalogError) and refusal.code, refusal


def test_http_error_is_raised_only_by_the_http_module() -> None:
    """The data plane and idempotency raise domain errors; only the HTTP edge knows statuses."""
    for package in ("catalog", "orchestrator"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "orchestrator" / "sidecar" / "http.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Raise) and node.exc is not None:
                    raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                    assert ast.unparse(raised) != "HttpError", f"{path}:{node.lineno}"
    assert CorruptStateError("bad", key="catalog").exit_code == EXIT_UNEXPECTED


def test_no_code_branches_on_a_reason_string() -> None:
    """Code tests the error's type, never ``details["reason"]`` (tests and JSON may read it)."""
    for package in ("catalog", "orchestrator"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Compare):
                    continue
                text = ast.unparse(node.left)
                if "details" in text and "reason" in text:
                    raise AssertionError(f"{path}:{node.lineno} compares an error's reason")
