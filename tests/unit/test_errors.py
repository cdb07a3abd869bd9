"""One error hierarchy: the kinds code branches on are types that still carry their data."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from catalog.errors import (
    EXIT_UNEXPECTED,
    BlobMissingError,
    CatalogError,
    CorruptBlobError,
    CorruptStateError,
    FencedError,
    MigrationRefusedError,
    ShardError,
    ShardGuardMovedError,
    ShardLeasedError,
    ShardNotFoundError,
    VersionMismatchError,
)
from catalog.shard.state import shard_error
from orchestrator.dataplane.writer import CommitContendedError, write_outcome
from orchestrator.http.refusals import HttpError
from orchestrator.sidecar.refusals import (
    ERRORS,
    body_of,
    process_error,
    refusal_named,
    refusal_of,
)

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
    for refusal in ERRORS:
        assert refusal.error is None or issubclass(refusal.error, CatalogError), refusal


def test_http_error_is_raised_only_by_the_api_application() -> None:
    """The data plane and idempotency raise domain errors; only the HTTP edge knows statuses."""
    for package in ("catalog", "orchestrator"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "orchestrator" / "sidecar" / "api.py":
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


def _every_error_class() -> list[type[CatalogError]]:
    """Every CatalogError class of the product, its modules imported."""
    import importlib
    import pkgutil

    for package in ("catalog", "orchestrator"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if ".testing." not in module.name and not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    found: list[type[CatalogError]] = []
    pending: list[type[CatalogError]] = [CatalogError]
    while pending:
        klass = pending.pop()
        found.append(klass)
        pending.extend(klass.__subclasses__())
    return found


def test_every_error_the_server_can_raise_answers_a_code_of_the_table() -> None:
    """The API's one vocabulary: any CatalogError answers a kebab-case code of the table, with
    the table's status, no class name and no exit code in its body."""
    classes = _every_error_class()
    assert len(classes) > 30
    codes = {r.code for r in ERRORS}
    for klass in classes:
        if klass is HttpError:
            continue
        error = klass.__new__(klass)
        CatalogError.__init__(error, "m", detail=1)
        refusal = refusal_of(error)
        body = body_of(error)
        assert body["error"] == refusal.code in codes, klass
        assert "exit_code" not in body and body["detail"] == 1, klass
        if klass.code is not None:  # a refusal of its own is named by its own code
            assert refusal.code == klass.code, klass
    assert refusal_of(ValueError("a defect")).code == "unexpected"
    assert all(code == code.lower() and " " not in code and "_" not in code for code in codes)


def test_every_code_the_http_layer_names_is_in_the_table() -> None:
    """Every literal code given to HttpError, refusal() or _refuse() is in the table."""
    named = set()
    sources = [*(ROOT / "orchestrator" / "sidecar").glob("*.py"),
               *(ROOT / "orchestrator" / "http").glob("*.py")]  # fmt: skip
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called in ("HttpError", "refusal", "self._refuse") and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        named.add(first.value)
    assert {"body-too-large", "misdirected-host", "too-many-connections"} <= named
    for code in named:
        refusal_named(code)  # KeyError names a code missing from the table


def test_a_process_error_is_named_in_the_vocabulary_with_its_exit_code() -> None:
    """A process node and ``/status`` say why a process ended by the API's codes, never a
    class name; the exit code stays, as the process's exit status."""
    fenced = process_error(FencedError("leadership of epoch 1 ended", epoch=1))
    assert fenced == {"error": "fenced", "message": "leadership of epoch 1 ended", "epoch": 1,
                      "exit_code": 3}  # fmt: skip
    refused = process_error(MigrationRefusedError("no instruction for s.t", rule="plan"))
    assert (refused["error"], refused["exit_code"], refused["rule"]) == (
        "migration-refused", 4, "plan")
    assert process_error(RuntimeError("boom")) == {
        "error": "unexpected", "message": "boom", "exit_code": 1}


def test_a_commit_that_lost_every_race_is_refused_for_a_retry_not_unexpected() -> None:
    """A compare-and-set that lost its last race (a slow first attempt can use up the retry's
    deadline) wrote nothing: 503 with the same key, never 500 ``unexpected``."""
    unused = typing.cast(typing.Any, None)  # only the outage and session paths use these
    with (
        pytest.raises(CommitContendedError) as raised,
        write_outcome(unused, unused, 1.0, lambda: True),
    ):
        raise VersionMismatchError("setdata of shards/s/batches lost a race", key="x")
    refusal = refusal_of(raised.value)
    assert (refusal.code, int(refusal.status)) == ("commit-contended", 503)
    assert raised.value.details["retry_after"] == 1
    assert "lost a race" in body_of(raised.value)["message"]
