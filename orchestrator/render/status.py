"""The upgrade status as rich tables for a terminal."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from catalog.pipeline.pacing import StepProgress
from orchestrator.render.fitted import FittedTable
from orchestrator.status.model import UpgradeStatus

DEFAULT_ROWS: Final = 20


_STATE_STYLE: Final = {
    "starting": "dim",
    "checking": "cyan",
    "ready": "green",
    "migrating": "yellow",
    "serving": "bold green",
    "fenced": "magenta",
    "failed": "bold red",
}


def _age(then: float | None, now: float) -> str:
    if then is None:
        return "-"
    seconds = max(0.0, now - then)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.1f}d ago"


def _clock(then: float) -> str:
    return dt.datetime.fromtimestamp(then, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _error_text(error: Any) -> str:
    if not error:
        return ""
    if isinstance(error, Mapping):
        name = error.get("error")
        message = error.get("message")
        text = f"{name}: {message}" if name and message else str(message or name or dict(error))
        if error.get("suggestion"):
            text += f" (fix: {error['suggestion']})"
        return text
    return str(error)


def finalization_text(finalization: Mapping[str, Any], now: float) -> Text:
    """One line: final since when, or the pending upgrade, its window and how to end it."""
    state = finalization.get("state")
    if state == "final":
        final = finalization.get("finalized") or {}
        if not final:
            return Text("final", style="green")
        return Text(
            f"final since generation {final.get('deploy_generation')} "
            f"({_clock(float(final.get('at') or 0))} UTC, by {final.get('by')})",
            style="green",
        )
    upgrade = finalization.get("upgrade") or {}
    came = f"{upgrade.get('from_version')} (generation {upgrade.get('from_generation')})"
    if state == "finalizing":
        who = (upgrade.get("finalizing") or {}).get("requested_by")
        return Text(f"finalizing (decided by {who}): {came} can no longer be promoted back",
                    style="yellow")  # fmt: skip
    since = upgrade.get("since")
    at = upgrade.get("finalize_at")
    when = (
        "never by itself (run `catalog-upgrade finalize`)"
        if at is None
        else f"at {_clock(float(at))} UTC (in {_until(float(at), now)})"
    )
    return Text(
        f"PENDING since {_age(since, now)}: {came} may be promoted back (rollback); "
        f"finalizes {when}",
        style="bold yellow",
    )


def _until(then: float, now: float) -> str:
    seconds = max(0.0, then - now)
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _state_text(state: str | None) -> Text:
    return Text(_dash(state), style=_STATE_STYLE.get(state or "", ""))


def _add_field(table: Table, field: str, value: str | Text) -> None:
    """A ``field: value`` row; the value is shown as written, never read as markup."""
    table.add_row(Text(field), value if isinstance(value, Text) else Text(value))


def upgrade_text(upgrade: Mapping[str, Any]) -> str:
    """The stage in one line: ``0.10.0 -> 0.11.0: ready`` (and the long step's rows)."""
    versions = " -> ".join(v for v in (upgrade["from_version"], upgrade["to_version"]) if v)
    text = f"{versions}: {upgrade['stage']}" if versions else str(upgrade["stage"])
    step = upgrade.get("step")
    if step:
        done, total = step.get("rows_done"), step.get("rows_total")
        text += f" ({step.get('step')} of {step.get('collection')}"
        text += f", {done:,} of {total:,} rows" if done is not None and total else ""
        text += ", PAUSED)" if step.get("paused") else ")"
    return text


def _catalog_table(status: UpgradeStatus) -> Table:
    catalog = status.catalog
    table = Table(title="catalog", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")

    def row(field: str, value: str | Text) -> None:
        _add_field(table, field, value)

    upgrade = status.to_json()["upgrade"]
    row("upgrade", upgrade_text(upgrade))
    if upgrade.get("why"):
        rule = f" ({upgrade['rule']})" if upgrade.get("rule") else ""
        row("why", f"{upgrade['why']}{rule}")
    if upgrade.get("fix"):
        row("fix", str(upgrade["fix"]))
    if upgrade["next"]:
        row("next", upgrade["next"])
    for number, line in enumerate(upgrade.get("rollback") or (), 1):
        row("rollback" if number == 1 else "", f"{number}. {line}")
    row("version", _dash(catalog.version))
    row("deploy generation", _dash(catalog.deploy_generation))
    row("epoch", _dash(catalog.epoch))
    row("promotion target", _dash(catalog.promotion_target))
    row("collections", str(catalog.collections))
    row("blob storage", _dash(catalog.blob_uri))
    if status.finalization is not None:
        row("finalization", finalization_text(status.finalization.to_json(), status.read_at))
    leader = status.leader
    if leader is None:
        row("leader", "none")
    else:
        where = f"{_dash(leader.epoch.host)} pid {_dash(leader.epoch.pid)}"
        state = leader.process.state if leader.process is not None else "not registered"
        row(
            "leader",
            f"{leader.id} (generation {leader.epoch.deploy_generation}, epoch "
            f"{leader.epoch.epoch}, session {_dash(leader.epoch.session)}, {where}, {state})",
        )
    return table


#: The process table's columns; the optional ones give way first, in this order, when the
#: terminal is too narrow for them all (orchestrator.render.fitted).
_PROCESS_COLUMNS: Final = (
    "id", "version", "gen", "mode", "state", "phase", "since", "host/pid", "session", "error",
)  # fmt: skip
_GIVES_WAY: Final = ("session", "host/pid", "since")
#: The narrowest the folded columns (phase, error) may become.
_FOLDED_MIN: Final = {"phase": 8, "error": 12}


def _processes(status: UpgradeStatus, now: float) -> FittedTable:
    """The processes, as a table that fits the terminal."""
    rows = [
        {
            "id": p.id,
            "version": _dash(p.version),
            "gen": _dash(p.deploy_generation),
            "mode": _dash(p.mode),
            "state": _dash(p.state),
            "phase": _dash(p.phase),
            "since": _age(p.phase_since, now),
            "host/pid": f"{_dash(p.host)}/{_dash(p.pid)}",
            "session": _dash(p.session),
            "error": _error_text(p.error),
        }
        for p in status.processes
    ]
    return FittedTable(
        f"processes ({len(status.processes)})",
        _PROCESS_COLUMNS,
        rows,
        gives_way=_GIVES_WAY,
        folded=_FOLDED_MIN,
        wide="error",
        cell=state_cell,
    )


def state_cell(column: str, value: str) -> Text:
    """A table cell: a state in its colour, an error in red."""
    if column == "state":
        return _state_text(None if value == "-" else value)
    return Text(value, style="red" if column == "error" else "")


def step_text(process_id: str, progress: Mapping[str, Any]) -> Text:
    """One line for a process's long step: ``id: rewrite of S.N 45% (2.2M of 5.0M rows),
    120k rows/s, about 23 s left`` (paused and a limit said when they hold)."""
    step = StepProgress.from_json(progress)
    if step is None:
        return Text(f"{process_id}: a long step (unreadable progress)", style="yellow")
    done = f"{_rows(step.rows_done)}"
    if step.rows_total:
        done = f"{(step.fraction or 0) * 100:.0f}% ({done} of {_rows(step.rows_total)} rows)"
    else:
        done += " rows"
    if step.tasks_total:
        done += f", {step.tasks_done} of {step.tasks_total} tasks"
    parts = [f"{process_id}: {step.step} of {step.collection} {done}"]
    if step.paused:
        parts.append("PAUSED (catalog-upgrade resume)")
    else:
        parts.append(f"{_rows(step.rate)} rows/s")
        if step.eta_seconds is not None:
            parts.append(f"about {_duration(step.eta_seconds)} left")
    if step.limit:
        parts.append(f"limit {_rows(step.limit)} rows/s")
    return Text(", ".join(parts), style="yellow" if step.paused else "")


def _rows(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _counts(values: Iterable[Any]) -> str:
    counted = Counter("-" if v is None else str(v) for v in values)
    return ", ".join(f"{key}: {count}" for key, count in sorted(counted.items()))


#: The collection and migration entry tables' columns. At 80 columns a collection's shard gives
#: way (the entries table names it) and long names wrap; identifiers are never cut.
_COLLECTION_COLUMNS: Final = ("global id", "name", "shard", "schema id", "mechanism")
_ENTRY_COLUMNS: Final = ("global id", "version", "generation", "shard")
_NAME_MIN: Final = 24


def _first(title: str, shown: int, total: int) -> str:
    """A table's title, saying when it lists only the first rows."""
    hidden = total - shown
    return f"{title} (first {shown}; --all shows {hidden} more)" if hidden else title


def _collections_tables(status: UpgradeStatus, all_rows: bool, limit: int) -> list[RenderableType]:
    collections = status.collections
    summary = Table(
        title=f"collections ({len(collections)})", show_header=False, title_justify="left"
    )
    summary.add_column("field", style="bold")
    summary.add_column("value", overflow="fold")
    if status.plan_source is not None:
        _add_field(summary, f"mechanism (plan of {status.plan_source})",
                   _counts(c.mechanism for c in collections))  # fmt: skip
    _add_field(summary, "schema id", _counts(c.schema_id for c in collections))
    _add_field(summary, "migration entries", str(len(status.migration_entries)))
    _add_field(summary, "pending finalization", str(len(status.pending_finalization)))
    tables: list[RenderableType] = [summary]
    shown = collections if all_rows else collections[:limit]
    if shown:
        rows = [
            {"global id": c.global_id, "name": c.name, "shard": c.shard_id,
             "schema id": _dash(c.schema_id), "mechanism": _dash(c.mechanism)}
            for c in shown
        ]  # fmt: skip
        tables.append(
            FittedTable(
                _first("collections", len(shown), len(collections)),
                _COLLECTION_COLUMNS,
                rows,
                gives_way=("shard",),
                folded={"name": _NAME_MIN},
                wide="name",
            )
        )
    entries = status.migration_entries if all_rows else status.migration_entries[:limit]
    if entries:
        rows = [
            {"global id": e.global_id, "version": e.version,
             "generation": str(e.deploy_generation), "shard": e.shard_id}
            for e in entries
        ]  # fmt: skip
        title = _first("migration shard entries", len(entries), len(status.migration_entries))
        tables.append(FittedTable(title, _ENTRY_COLUMNS, rows))
    pending = status.pending_finalization if all_rows else status.pending_finalization[:limit]
    if pending:
        table = Table()
        table.add_column("pending finalization (shard)", overflow="fold")
        for shard_id in pending:
            table.add_row(Text(shard_id))
        hidden = len(status.pending_finalization) - len(pending)
        if hidden:
            table.caption = f"--all shows {hidden} more"
        tables.append(table)
    return tables


def _events_table(status: UpgradeStatus) -> Table:
    table = Table(title=f"recent events ({len(status.events)})", title_justify="left")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("details", overflow="fold")
    for event in status.events:
        details = " ".join(f"{k}={v}" for k, v in sorted(event.fields.items()))
        table.add_row(_clock(event.at), Text(event.kind), Text(details))
    return table


def render_table(
    status: UpgradeStatus,
    *,
    all_rows: bool = False,
    limit: int = DEFAULT_ROWS,
    now: float | None = None,
) -> RenderableType:
    """The terminal view: catalog, processes, collections summary (first ``limit`` rows unless
    ``all_rows``), migration entries, pending finalizations and recent events."""
    now = status.read_at if now is None else now
    parts: list[RenderableType] = []
    if not status.bootstrapped:
        parts.append(
            Text(f"environment {status.environment} is empty (not bootstrapped)", style="bold")
        )
        if status.catalog.promotion_target is not None or status.leader is not None:
            parts.append(_catalog_table(status))
    else:
        parts.append(Text(f"environment {status.environment}", style="bold"))
        parts.append(_catalog_table(status))
    if status.processes:
        parts.append(_processes(status, now))
        parts.extend(step_text(p.id, p.progress) for p in status.processes if p.progress)
    elif status.bootstrapped:
        parts.append(Text("no process registered"))
    if status.bootstrapped:
        parts.extend(_collections_tables(status, all_rows, limit))
    if status.events:
        parts.append(_events_table(status))
    for warning in status.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    for error in status.errors:
        parts.append(Text(f"error: {error['error']}", style="bold red"))
    return Group(*parts)
