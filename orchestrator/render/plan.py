"""Rendering of migration plans and validation reports (``plan`` and ``validate`` commands).

The models live in :mod:`catalog.release`; this module only turns them into rich tables for a
terminal or into the JSON documents the commands print with ``--json``.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Final

from rich.console import Console
from rich.text import Text

from catalog.errors import CatalogError
from catalog.release import Mechanism, PathFailure, Plan, SchemaDiff, ValidationReport
from catalog.release.levels import ReleaseLevel
from orchestrator.render.fitted import FittedTable

__all__ = ["plan_json", "render_findings", "render_plan", "render_report", "report_json"]

_PLAN_COLUMNS: Final = ("collection", "mechanism", "instructions", "schema diff")
_MECHANISM_STYLE: Final = MappingProxyType(
    {Mechanism.EVOLUTION: "green", Mechanism.REPLACEMENT: "yellow", Mechanism.REWRITE: "magenta"}
)


def plan_json(
    plan: Plan | None,
    report: ValidationReport,
    refusal: CatalogError | None,
    from_version: str,
    to_version: str,
    level: ReleaseLevel,
) -> str:
    """The ``plan --json`` document: the plan (``from`` and ``to`` only when it was refused),
    its change ``level``, ``ok``, the path's ``findings`` and the ``refusal`` (as on stderr),
    if any."""
    document: dict[str, Any] = (
        plan.to_json() if plan is not None else {"from": from_version, "to": to_version}
    )
    document["level"] = level.to_json()
    document["ok"] = refusal is None and report.ok
    document["findings"] = report.findings()
    from orchestrator.sidecar.refusals import process_error  # the API's vocabulary

    document["refusal"] = None if refusal is None else process_error(refusal)
    return _dumps(document)


def report_json(report: ValidationReport) -> str:
    """The ``validate --json`` document."""
    return _dumps(report.to_json())


def _dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False)


def render_plan(plan: Plan, console: Console, level: ReleaseLevel) -> None:
    """Print ``plan`` and its change level: one row per migrated collection, then new and
    removed builtins."""
    console.print(Text(f"Migration plan {plan.from_version} -> {plan.to_version}", style="bold"))
    reason = level.reason()
    console.print(
        Text(
            f"change level: {level.required}"
            + (f" ({reason})" if reason else " (no schema change)")
            + f"; the version number says {level.declared}",
            style="red" if level.understated else "dim",
        )
    )
    if plan.is_empty:
        console.print("nothing to migrate")
        return
    if plan.migrations:
        rows: list[dict[str, str | Text]] = [
            {
                "collection": f"{migration.name} ({migration.global_id})",
                # A rewrite merged with evolutions shows its steps in order: what a jump does.
                "mechanism": Text(
                    "\n".join(migration.steps()), style=_MECHANISM_STYLE[migration.mechanism]
                ),
                "instructions": "\n".join(
                    f"{m.version} {m.mechanism.value}" for m in migration.instructions
                ),
                "schema diff": _diff_text(migration.diff),
            }
            for migration in plan.migrations
        ]
        # At 80 columns the mechanism (the instructions name it too) gives way and long
        # names wrap; a field path is never cut (orchestrator.render.fitted).
        console.print(
            FittedTable(
                "", _PLAN_COLUMNS, rows, gives_way=("mechanism",), folded={"collection": 24},
                wide="collection",
            )
        )  # fmt: skip
        console.print(
            "schema diff: +added -dropped relaxed? (now nullable) ~changed (type or nullability) "
            "old>new (renamed)",
            style="dim",
        )
    if plan.new_builtins:
        console.print(Text("New builtins (created by the leader):", style="bold"))
        for builtin in plan.new_builtins:
            console.print(Text(f"  + {builtin.name} ({builtin.kind}, {builtin.global_id})"))
    if plan.removed_builtins:
        console.print(Text("Removed builtins (shards finalized by the leader):", style="bold"))
        for collection in plan.removed_builtins:
            console.print(Text(f"  - {collection.name} ({collection.global_id})"))


def _diff_text(diff: SchemaDiff) -> Text:
    """``+added -dropped relaxed? ~changed old>new``: one token per dotted field path."""
    text = Text()
    tokens = [
        *((f"+{p}", "green") for p in diff.added),
        *((f"-{p}", "red") for p in diff.dropped),
        *((f"{p}?", "cyan") for p in diff.relaxed),
        *((f"~{p}", "yellow") for p in diff.changed),
        *((p.replace(" -> ", ">"), "blue") for p in diff.renamed),
    ]
    for token, style in tokens:
        if text:
            text.append("\n")
        text.append(token, style=style)
    return text


def _render_costs(report: ValidationReport, console: Console) -> None:
    for cost in report.costs:
        finding = cost.finding()
        rows = "" if cost.rows is None else f" ({cost.rows:,} rows now)"
        console.print(
            Text(f"note (data-dependent-cost): {finding['message']}{rows}; {finding['fix']}",
                 style="dim")
        )  # fmt: skip


def _render_levels(report: ValidationReport, console: Console) -> None:
    for level in report.levels:
        if level.understated:
            finding = level.finding()
            console.print(
                Text(f"finding (version-bump): {finding['message']}; {finding['fix']}",
                     style="yellow")
            )  # fmt: skip


def render_findings(report: ValidationReport, console: Console) -> None:
    """Print one path's findings under its plan (``plan``): each failure, then each cost."""
    for failure in report.failures:
        finding = failure.finding()
        where = " ".join(str(part) for part in (finding["collection"], finding["path"]) if part)
        console.print(
            Text(f"finding ({finding['category']}, {finding['rule']}) {where}: "
                 f"{finding['message']}", style="red")
        )  # fmt: skip
        if finding["fix"]:
            console.print(Text(f"  fix: {finding['fix']}", style="dim"))
    _render_costs(report, console)
    _render_levels(report, console)


def render_report(report: ValidationReport, console: Console) -> None:
    """Print ``report``: a summary line, then each distinct failure with the paths it breaks.

    Failures are grouped by reason, culprit collection and rule, since one mistake in release Y
    typically breaks every path into Y; the message and fix are those of the first such path.
    """
    releases = len(report.releases)
    _render_costs(report, console)
    _render_levels(report, console)
    if report.ok:
        console.print(
            f"all {report.paths_checked} upgrade paths between {releases} releases work",
            style="green",
            highlight=False,
        )
        return
    console.print(
        f"{len(report.failing_paths())} of {report.paths_checked} upgrade paths between "
        f"{releases} releases fail",
        style="bold red",
        highlight=False,
    )
    groups: dict[tuple[str, str, str, str], list[PathFailure]] = {}
    for failure in report.failures:
        key = (
            failure.reason,
            failure.collection or "",
            failure.rule or "",
            str(failure.error.details.get("instruction", "")),
        )
        groups.setdefault(key, []).append(failure)
    for (reason, collection, rule, _), failures in groups.items():
        first = failures[0]
        console.print()
        title = Text()
        title.append(reason, style="bold red")
        if rule:
            title.append(f" ({rule})", style="red")
        title.append(f"  {collection}", style="bold")
        console.print(title)
        paths = ", ".join(f"{f.from_version} -> {f.to_version}" for f in failures)
        console.print(Text(f"  paths: {paths}"))
        console.print(Text(f"  {first.message}"))
        suggestion = first.error.details.get("suggestion")
        if suggestion and suggestion not in first.message:
            console.print(Text(f"  fix: {suggestion}", style="dim"))
