"""The fleet at 80 columns (orchestrator.render.fleet): a table of a few hundred environments
in mixed states, not one block per environment."""

from __future__ import annotations

import re

import attrs
from rich.console import Console

from orchestrator.fleet.ensembles import Ensemble
from orchestrator.fleet.model import EnvironmentRow, GreenGeneration, LeaderView
from orchestrator.fleet.read import EnsembleSurvey
from orchestrator.fleet.report import FleetReport
from orchestrator.fleet.rules import Thresholds
from orchestrator.render.fleet import render_fleet

NOW = 2_000_000_000.0
HOUR = 3600.0


def _row(ensemble: str, number: int) -> EnvironmentRow:
    """Environment ``number`` of ``ensemble``, in one of seven states by its number."""
    name = f"env-{number:03d}"
    leader = LeaderView(f"{name}-g1", True, "serving", "serving", NOW - 9 * HOUR, "0.10.0")
    base = {"bootstrapped": True, "version": "0.10.0", "deploy_generation": 1, "epoch": 3,
            "leader": leader, "finalization": "final", "finalization_since": NOW - 30 * HOUR,
            "processes": 1, "versions": ("0.10.0",)}  # fmt: skip
    kind = number % 7
    if kind == 1:  # promoted and pending its rollback window
        base |= {"version": "0.11.0", "deploy_generation": 2, "finalization": "pending",
                 "pending_version": "0.11.0", "from_version": "0.10.0",
                 "finalization_since": NOW - 2 * HOUR}  # fmt: skip
    elif kind == 2:  # a green generation waiting for its promotion
        waiting = GreenGeneration(2, "0.11.0", 2, ("ready", "ready"), NOW - 7 * HOUR, False)
        base |= {"green": (waiting,), "processes": 3}
    elif kind == 3:  # a leader stuck in a phase far past its history's median
        stuck = LeaderView(f"{name}-g2", True, "migrating", "rewrite", NOW - 5 * HOUR, "0.11.0")
        base |= {"leader": stuck, "phase_history": {"rewrite": 60.0}}
        if number == 3:  # and one whose green generation's copy is paused
            paused = GreenGeneration(3, "0.12.0", 1, ("checking",), NOW - HOUR, False, True)
            base |= {"green": (paused,)}
    elif kind == 4:  # its leader's process is gone
        base |= {"leader": LeaderView(f"{name}-g1", False)}
    elif kind == 5:
        base = {"bootstrapped": False}
    elif kind == 6:  # pending for long: finalization overdue
        base |= {"finalization": "pending", "pending_version": "0.11.0",
                 "finalization_since": NOW - 80 * HOUR, "version": "0.11.0"}  # fmt: skip
    return EnvironmentRow(ensemble, name, NOW, **base)  # type: ignore[arg-type]


def _report() -> FleetReport:
    surveys = [
        EnsembleSurvey(
            Ensemble(ensemble, f"{ensemble}.zk:2181"),
            tuple(_row(ensemble, n) for n in range(100)),
            NOW,
            0.5,
        )
        for ensemble in ("eu-1", "us-2", "ap-3")
    ]
    surveys.append(EnsembleSurvey(Ensemble("sa-4", "sa-4.zk:2181"),
                                  (EnvironmentRow("sa-4", None, NOW, error="did not answer"),),
                                  NOW, 5.0, error="did not answer"))  # fmt: skip
    return FleetReport.of(surveys, Thresholds(), NOW)


def _text(width: int) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(render_fleet(_report()))
    return console.export_text()


def test_300_environments_read_as_a_table_at_80_columns() -> None:
    text = _text(80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    header = next(line for line in lines if line.startswith("┃"))
    columns = [cell.strip() for cell in header.strip("┃ ").split("┃")]
    assert columns == ["environment", "version", "state", "green", "final", "notes"], header
    # One row a line at least, each environment's name in its first cell, in the table's order.
    named = [m.group(1) for m in re.finditer(r"^│ (\S+/\S+) +│", text, re.MULTILINE)]
    assert len(named) == 301 and named[0] == "eu-1/env-000" and named[-1] == "sa-4/*"
    # Rows wrap inside their cells; a table of 301 rows stays within a few lines each.
    assert len(lines) < 301 * 4, len(lines)
    for state in ("ok", "pending", "green-waiting", "migrating", "no-leader", "empty",
                  "unreachable"):  # fmt: skip
        assert re.search(rf"│ {re.escape(state)} +│", text), state
    # A cell that wraps does so between words: "pending" over "0.11.0", never "pendi".
    final = [
        [cell.strip() for cell in line.strip("│").split("│")][4]
        for line in lines
        if line.startswith("│")
    ]
    wrapped = [i for i, cell in enumerate(final[:-1]) if cell == "pending"]
    assert wrapped and all(final[i + 1] == "0.11.0" for i in wrapped), final[:12]
    assert not any(cell.startswith("pendi") and cell != "pending" for cell in final)
    # A migration names where it goes; a paused step shows.
    assert "│ →0.11.0 " in text and "PAUSED" in text
    # The summary keeps each figure with its name.
    assert "oldest unpromoted 7h, oldest pending 3d" in text, text[-400:]


def test_wide_terminals_show_every_column_and_narrow_ones_blocks() -> None:
    wide = _text(200)
    header = next(line for line in wide.splitlines() if line.startswith("┃"))
    for column in ("gen", "leader", "age"):
        assert f" {column} " in header, header
    narrow = _text(50)
    assert max(len(line) for line in narrow.splitlines()) <= 50
    assert "eu-1/env-001\n  version: 0.11.0\n" in narrow, narrow[:600]


def test_long_names_break_after_a_hyphen_and_stay_a_table() -> None:
    """Names of 21 characters (``history-green-waiting``) would make the table 87 columns: the
    name breaks after a hyphen, never inside a piece, and the fleet stays a table."""
    rows = tuple(_row("x", n) for n in range(7))
    named = tuple(attrs.evolve(r, environment=f"history-green-waiting-{n}") for n, r in
                  enumerate(rows))  # fmt: skip
    survey = EnsembleSurvey(Ensemble("x", "x.zk:2181"), named, NOW, 0.5)
    console = Console(record=True, width=80, color_system=None)
    console.print(render_fleet(FleetReport.of([survey], Thresholds(), NOW)))
    text = console.export_text()
    assert any(line.startswith("┃ environment") for line in text.splitlines()), text
    first = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    names: list[list[str]] = []
    for piece in filter(None, first):  # a row's first cell over its lines, to the next name
        if piece.startswith("history-") or not names:
            names.append([])
        names[-1].append(piece)
    assert ["".join(n) for n in names] == [f"history-green-waiting-{n}" for n in range(7)], first
    assert all(line.endswith("-") for n in names for line in n[:-1]), names  # after a hyphen
    assert any(len(n) > 1 for n in names)  # broken at all: the table needed it
