"""The client-history checker, in the manner of Jepsen's: what the workload's clients saw
against what the collection holds at the end.

It proves, for the workload's rows:

* ``acknowledged-once``: every acknowledged append is present exactly once;
* ``failed-absent``: every failed append (refused before anything was written) is absent;
* ``unknown-at-most-once``: an append whose outcome is unknown is present at most once;
* ``nothing-invented``: no row is present that no client sent;
* ``reads-stable``: a row once read stays in every later read, and in the end.

On a violation the runner writes the history (JSON lines) and a timeline beside the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.scenario.workload import Operation, Read


def check_history(
    operations: Sequence[Operation], reads: Sequence[Read], final: Mapping[str, int]
) -> list[str]:
    """The violations (empty: the history holds) given the final count of each workload row."""
    problems: list[str] = []
    sent = {op.row_id: op for op in operations}
    for op in operations:
        count = final.get(op.row_id, 0)
        if op.outcome == "ok" and count != 1:
            problems.append(f"acknowledged-once: {op.row_id} acknowledged, present {count} times")
        elif op.outcome == "fail" and count != 0:
            problems.append(f"failed-absent: {op.row_id} failed ({op.attempts}), present {count}")
        elif op.outcome == "unknown" and count > 1:
            problems.append(f"unknown-at-most-once: {op.row_id} present {count} times")
    for row, count in sorted(final.items()):
        if row not in sent:
            problems.append(f"nothing-invented: {row} present {count} times, never sent")
    seen: dict[str, float] = {}
    for read in sorted(reads, key=lambda r: r.at):
        for row, first in seen.items():
            if row not in read.rows:
                problems.append(
                    f"reads-stable: {row} read at {first:.2f} s, missing at {read.at:.2f} s"
                )
        for row in read.rows:
            seen.setdefault(row, read.at)
    for row, first in seen.items():
        if final.get(row, 0) == 0:
            problems.append(f"reads-stable: {row} read at {first:.2f} s, missing at the end")
    return problems


def summary(operations: Sequence[Operation], reads: Sequence[Read]) -> str:
    outcomes = {o: 0 for o in ("ok", "fail", "unknown", "pending")}
    for op in operations:
        outcomes[op.outcome] += 1
    return (
        f"{len(operations)} appends ({outcomes['ok']} ok, {outcomes['fail']} failed, "
        f"{outcomes['unknown']} unknown), {len(reads)} reads"
    )


def write_history(
    directory: Path,
    operations: Sequence[Operation],
    reads: Sequence[Read],
    timeline: Sequence[tuple[float, str]],
) -> tuple[Path, Path]:
    """``history.jsonl`` (every operation and read) and ``timeline.txt`` (steps and outcomes,
    by time) in ``directory``; their paths."""
    history = directory / "history.jsonl"
    with history.open("w") as out:
        for item in [*(op.to_json() for op in operations), *(r.to_json() for r in reads)]:
            out.write(json.dumps(item) + "\n")
    events = [*timeline]
    events += [(op.invoked, f"invoke {op.row_id}") for op in operations]
    events += [
        (op.completed, f"{op.outcome} {op.row_id} {' '.join(op.attempts)}")
        for op in operations
        if op.completed is not None
    ]
    lines = [f"{at:9.3f}  {what}" for at, what in sorted(events, key=lambda e: e[0])]
    text = directory / "timeline.txt"
    text.write_text("\n".join(lines) + "\n")
    return history, text
