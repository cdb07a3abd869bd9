"""CLI tests of ``catalog-upgrade plan`` and ``validate``: exit codes, JSON shape, rendering."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner, Result

from catalog.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from catalog.release.findings import CATEGORIES
from orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "releases"
BROKEN = ROOT / "tests" / "fixtures" / "broken_releases"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The CLI configures logging onto the runner's streams; later tests must not inherit it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def run(*args: str) -> Result:
    # A wide terminal, so rich tables keep collection names on one line.
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--log-level", "WARNING", *args])


def test_plan_json_shape() -> None:
    """plan --json prints the merged plan: per collection mechanism, instructions and diff."""
    result = run("plan", "--releases", str(EXAMPLE), "--from", "0.10.0", "--to", "0.12.0", "--json")
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    assert (document["from"], document["to"]) == ("0.10.0", "0.12.0")
    by_name = {m["name"]: m for m in document["migrations"]}
    tables = by_name["mz_catalog.mz_tables"]
    assert tables["mechanism"] == "evolution"
    assert tables["global_id"] == "s3"
    assert tables["instructions"] == [
        {"version": "0.11.0", "mechanism": "evolution", "kind": "table"}
    ]
    assert set(tables["diff"]) >= {"added", "dropped", "relaxed"}
    assert tables["diff"]["added"] == ["source_id"]
    assert by_name["mz_catalog.mz_roles"]["mechanism"] == "rewrite"
    assert by_name["mz_introspection.mz_arrangement_sizes"]["mechanism"] == "replacement"
    assert [b["name"] for b in document["new_builtins"]] == [
        "mz_internal.mz_cluster_replica_history"
    ]
    assert document["removed_builtins"] == []


def test_plan_table_output() -> None:
    """plan without --json renders a table naming each collection and mechanism."""
    result = run("plan", "--releases", str(EXAMPLE), "--from", "0.13.0", "--to", "0.14.0")
    assert result.exit_code == EXIT_OK, result.output
    assert "mz_internal.mz_session_history" in result.stdout
    assert "rewrite" in result.stdout
    assert "mz_introspection.mz_scheduling_elapsed" in result.stdout


def test_plan_table_never_cuts_a_field_path_at_80_columns() -> None:
    """At 80 columns the mechanism column gives way (each instruction names its mechanism)
    and long collection names wrap; every schema-diff path stays whole on its line."""
    args = ["--log-level", "WARNING", "plan", "--releases", str(EXAMPLE)]
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, [*args, "--from", "0.10.0",
                                                            "--to", "0.13.0"])  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "collection" in line)
    assert "instructions" in header and "mechanism" not in header
    for path in ("+options.value.secret_id", "+key.items.nulls_last", "+config.disk_limit"):
        assert any(f"│ {path} " in line for line in lines), path
    assert "│ mz_catalog.mz_tables (s3) " in result.stdout


def test_plan_same_version_is_empty() -> None:
    """Planning a release onto itself succeeds with nothing to do."""
    result = run("plan", "--releases", str(EXAMPLE), "--from", "0.12.0", "--to", "0.12.0", "--json")
    assert result.exit_code == EXIT_OK
    assert json.loads(result.stdout)["migrations"] == []


def test_plan_downgrade_is_refused() -> None:
    """plan --from newer --to older exits 4 with the refusal as JSON on stderr."""
    result = run("plan", "--releases", str(EXAMPLE), "--from", "0.12.0", "--to", "0.11.0", "--json")
    assert result.exit_code == EXIT_REFUSED
    error = json.loads(result.stderr)
    assert error["error"] == "migration-refused" and error["exit_code"] == EXIT_REFUSED
    assert error["reason"] == "downgrade"


def test_plan_broken_path_is_refused_naming_the_collection() -> None:
    """A path with a missing instruction exits 4 naming the builtin."""
    args = ["plan", "--releases", str(BROKEN / "missing_instruction")]
    result = run(*args, "--from", "0.1.0", "--to", "0.2.0", "--json")
    assert result.exit_code == EXIT_REFUSED
    assert json.loads(result.stderr)["collections"] == ["mz_catalog.mz_tables"]


@pytest.mark.parametrize(
    "args",
    [
        ["--releases", str(EXAMPLE), "--from", "0.10.0", "--to", "9.9.9"],
        ["--releases", str(EXAMPLE), "--from", "ten", "--to", "0.11.0"],
        ["--releases", "/nonexistent/releases", "--from", "0.10.0", "--to", "0.11.0"],
    ],
    ids=["unknown-version", "not-a-version", "missing-dir"],
)
def test_plan_bad_input_exits_2(args: list[str]) -> None:
    """An unknown or malformed version, or a missing directory, is bad input (exit 2)."""
    result = run("plan", *args)
    assert result.exit_code == EXIT_BAD_INPUT, result.output


def test_validate_example_exits_0() -> None:
    """validate on the example history reports every path working."""
    result = run("validate", "--releases", str(EXAMPLE), "--json")
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert document["failures"] == []
    assert (
        document["paths_checked"]
        == len(document["releases"]) * (len(document["releases"]) - 1) // 2
    )


def test_validate_example_text() -> None:
    """Without --json, a clean history prints one summary line."""
    result = run("validate", "--releases", str(EXAMPLE))
    assert result.exit_code == EXIT_OK
    assert "upgrade paths" in result.stdout


BROKEN_CASES = [
    ("missing_instruction", "missing-instruction", "mz_catalog.mz_tables"),
    ("incompatible_evolution", "incompatible-evolution", "mz_catalog.mz_tables"),
    ("readded_field", "incompatible-evolution", "mz_catalog.mz_sources"),
    ("rename_chain_skipped", "incompatible-evolution", "mz_catalog.mz_sources"),
    ("removed_instruction", "instruction-removed", "mz_catalog.mz_tables"),
    ("backport_not_carried_forward", "backport", "mz_catalog.mz_tables"),
    ("retain_data_replaced", "retain-data-replaced", "mz_internal.mz_session_history"),
    ("unknown_builtin", "unknown-builtin", "mz_catalog.mz_tabels"),
]


@pytest.mark.parametrize(
    ("case", "reason", "collection"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES]
)
def test_validate_broken_history_exits_4_naming_the_culprit(
    case: str, reason: str, collection: str
) -> None:
    """Each broken history exits 4 and its JSON names the reason and the culprit collection."""
    result = run("validate", "--releases", str(BROKEN / case), "--json")
    assert result.exit_code == EXIT_REFUSED, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert (reason, collection) in {(f["reason"], f["collection"]) for f in document["failures"]}
    for failure in document["failures"]:
        assert {"from", "to", "reason", "collection", "message"} <= set(failure)


@pytest.mark.parametrize(
    ("case", "reason", "collection"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES]
)
def test_validate_broken_history_text_names_the_culprit(
    case: str, reason: str, collection: str
) -> None:
    """The human output names the failing path's reason and culprit too."""
    result = run("validate", "--releases", str(BROKEN / case))
    assert result.exit_code == EXIT_REFUSED
    assert reason in result.stdout
    assert collection in result.stdout


def test_validate_unloadable_history_exits_2() -> None:
    """A duplicated GlobalId is a load error: exit 2, the error names the id."""
    result = run("validate", "--releases", str(BROKEN / "duplicate_global_id"), "--json")
    assert result.exit_code == EXIT_BAD_INPUT
    error = json.loads(result.stderr)
    assert error["error"] == "bad-input" and error["exit_code"] == EXIT_BAD_INPUT
    assert error["field"] == "global_id"
    assert error["value"] == "s1"


def test_validate_missing_directory_exits_2(tmp_path: Path) -> None:
    """A directory that does not exist is bad input."""
    result = run("validate", "--releases", str(tmp_path / "nope"))
    assert result.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize(
    ("case", "reason", "collection"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES]
)
def test_validate_findings_name_category_rule_releases_and_fix(
    case: str, reason: str, collection: str
) -> None:
    """Every failure is a finding with a category (what --fail-on takes), a rule id, the
    releases of its path, its collection and a fix; --fail-on of a category it does not have
    passes."""
    result = run("validate", "--releases", str(BROKEN / case), "--json")
    findings = [f for f in json.loads(result.output)["findings"] if f["collection"] == collection]
    assert findings, result.output
    finding = findings[0]
    assert finding["category"] in CATEGORIES and finding["category"] != "data-dependent-cost"
    assert finding["rule"] and len(finding["releases"]) == 2 and finding["fix"]
    present = {f["category"] for f in json.loads(result.output)["findings"]}
    other = next(c for c in CATEGORIES if c not in present)
    passing = run("validate", "--releases", str(BROKEN / case), "--fail-on", other)
    blocking = run("validate", "--releases", str(BROKEN / case), "--fail-on", finding["category"])
    assert (passing.exit_code, blocking.exit_code) == (EXIT_OK, EXIT_REFUSED)


def test_validate_lists_rewrites_and_replacements_as_data_dependent_costs() -> None:
    """The example history's REWRITE and REPLACEMENT instructions are findings that block only
    when asked (--fail-on data-dependent-cost)."""
    result = run("validate", "--releases", str(ROOT / "scenarios" / "releases"), "--json")
    assert result.exit_code == EXIT_OK
    findings = json.loads(result.output)["findings"]
    assert {f["category"] for f in findings} == {"data-dependent-cost", "version-bump"}
    costs = [f for f in findings if f["category"] == "data-dependent-cost"]
    assert {"rewrite", "replacement"} <= {f["rule"] for f in costs}
    assert any(f["collection"] == "mz_catalog.mz_roles" and f["releases"] == ["0.11.0"]
               for f in costs)  # fmt: skip
    asked = run(
        "validate", "--releases", str(ROOT / "scenarios" / "releases"),
        "--fail-on", "data-dependent-cost",
    )  # fmt: skip
    assert asked.exit_code == EXIT_REFUSED


def test_plan_json_findings_are_validates_for_that_path() -> None:
    """plan --json carries the path's findings: its costly instructions, and failures the
    planner itself does not refuse (an instruction removed); --fail-on makes them block."""
    path = ["--releases", str(EXAMPLE), "--from", "0.10.0", "--to", "0.12.0"]
    planned = run("plan", *path, "--json")
    document = json.loads(planned.stdout)
    assert document["ok"] is True and document["refusal"] is None
    costs = {(f["collection"], f["rule"], tuple(f["releases"])) for f in document["findings"]}
    assert ("mz_catalog.mz_roles", "rewrite", ("0.11.0",)) in costs
    assert all("0.10.0" not in releases for _, _, releases in costs)  # only releases crossed
    asked = run("plan", "--releases", str(EXAMPLE), "--from", "0.10.0", "--to", "0.12.0",
                "--fail-on", "data-dependent-cost")  # fmt: skip
    assert (planned.exit_code, asked.exit_code) == (EXIT_OK, EXIT_REFUSED)
    assert "note (data-dependent-cost)" in asked.stdout

    removed = ["plan", "--releases", str(BROKEN / "removed_instruction"), "--from", "0.2.0",
               "--to", "0.3.0"]  # fmt: skip
    lenient = run(*removed, "--json")
    assert lenient.exit_code == EXIT_OK, lenient.output  # exit codes stay as they were
    finding = json.loads(lenient.stdout)["findings"][0]
    assert (finding["category"], finding["releases"]) == ("removed-instruction", ["0.2.0", "0.3.0"])
    assert finding["collection"] and finding["fix"]
    assert run(*removed, "--fail-on", "removed-instruction").exit_code == EXIT_REFUSED
    assert run(*removed, "--fail-on", "backport").exit_code == EXIT_OK


def test_plan_json_of_a_refused_path_has_its_findings_and_the_refusal() -> None:
    """A refused path still prints its document (ok false, the finding, the refusal), and the
    refusal on stderr with exit 4, as before."""
    args = ["plan", "--releases", str(BROKEN / "missing_instruction")]
    result = run(*args, "--from", "0.1.0", "--to", "0.2.0", "--json")
    assert result.exit_code == EXIT_REFUSED
    document = json.loads(result.stdout)
    assert (
        document["ok"] is False
        and document["refusal"]["error"] == json.loads(result.stderr)["error"]
    )
    assert [f["category"] for f in document["findings"]] == ["missing-instruction"]
    assert document["findings"][0]["collection"] == "mz_catalog.mz_tables"


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    from orchestrator.cli import main

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == EXIT_OK, result.output
    assert result.output == f"catalog-upgrade, version {version('catalog-upgrade')}\n"


def test_validate_derives_each_releases_change_level_and_flags_an_understated_number() -> None:
    """The example history's three understated releases are version-bump findings (explained in
    docs/releases.md), which block only when asked (--fail-on version-bump)."""
    result = run("validate", "--releases", str(EXAMPLE), "--json")
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.output)
    bumps = {
        f["releases"][1]: (f["declared"], f["required"], f["collection"])
        for f in document["findings"]
        if f["category"] == "version-bump"
    }
    assert bumps == {
        "0.11.1": ("patch", "minor", "mz_internal.mz_source_statuses"),
        "0.14.1": ("patch", "minor", "mz_catalog.mz_clusters"),
        "1.1.0": ("minor", "major", "mz_catalog.mz_clusters"),
    }
    levels = {level["version"]: level for level in document["levels"]}
    assert levels["0.11.0"]["required"] == "major" and levels["0.11.0"]["declared"] == "major"
    assert {"level": "major", "collection": "mz_catalog.mz_roles", "change": "rewrite"} in levels[
        "0.11.0"
    ]["changes"]
    text = run("validate", "--releases", str(EXAMPLE))
    assert "finding (version-bump): 1.1.0 is numbered as a minor release" in text.output
    asked = run("validate", "--releases", str(EXAMPLE), "--fail-on", "version-bump")
    assert asked.exit_code == EXIT_REFUSED


def test_plan_shows_the_change_level_of_its_path() -> None:
    path = ["--releases", str(EXAMPLE), "--from", "1.0.0", "--to", "1.1.0"]
    document = json.loads(run("plan", *path, "--json").stdout)
    assert (document["level"]["declared"], document["level"]["required"]) == ("minor", "major")
    assert any(f["category"] == "version-bump" for f in document["findings"])
    shown = run("plan", *path)
    assert "change level: major (mz_catalog.mz_clusters: field" in shown.output
    assert "the version number says minor" in shown.output
    patch = run("plan", "--releases", str(EXAMPLE), "--from", "0.11.1", "--to", "0.12.0")
    assert "change level: major" in patch.output and "says major" in patch.output
