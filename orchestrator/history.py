"""Upgrade history: one row per upgrade of an environment (``catalog-upgrade history``).

A leader that finishes its migration appends a record to the ``history`` znode, fenced by its
epoch, in the same step as its ``migrated`` event (one per generation, never rewritten): from
and to version, generation, who promoted and when, who took over (process, host), each phase of
its migration with its duration, and the outcome: ``completed`` (final), ``pending`` (reversible
until finalized, when it is amended to ``completed`` with who finalized it and when), ``rolled
back`` (amended so when the release it came from was promoted back) or ``rollback`` (that
promotion). The znode keeps the newest ``KEEP_UPGRADES`` records (about 400 bytes each), so it
stays far below ZooKeeper's node limit. Only leaders write it (the read-only rule); the upgrades
that never got a leader are read from the event logs instead: a generation refused by its read-
only processes (outcome ``refused``, with the rule and reason), fenced or failed, or promoted
and then overtaken by a newer promotion (``aborted``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from catalog.consensus import Consensus, Create, Fence, SetData, decoding, encode_json
from catalog.environment import HISTORY_KEY
from catalog.errors import EXIT_REFUSED, VersionMismatchError
from catalog.retry import CasRetry
from orchestrator.events import UpgradeEvent, read_events

KEEP_UPGRADES: Final = 100


# Read-only outcomes a generation's own event log can end with.
_ENDINGS: Final = {"refused": "refused", "fenced": "fenced", "failed": "failed"}


@attrs.frozen
class Phase:
    """One phase of a leader's migration: when it started and how long it took."""

    name: str
    started_at: float
    seconds: float


@attrs.frozen
class UpgradeRecord:
    """One upgrade of the environment."""

    deploy_generation: int
    to_version: str
    outcome: str
    from_version: str | None = None
    promoted_by: str | None = None
    promoted_at: float | None = None
    leader: str | None = None
    host: str | None = None
    took_over_at: float | None = None
    finished_at: float | None = None
    phases: tuple[Phase, ...] = ()
    rule: str | None = None
    reason: str | None = None
    #: When the upgrade became final, and who decided (None while pending, or rolled back).
    finalized_at: float | None = None
    finalized_by: str | None = None
    #: A rollback: the collections whose rows written under the rolled-back release were
    #: dropped (``--discard-writes-to``).
    discarded: tuple[str, ...] = ()

    @property
    def seconds(self) -> float | None:
        """From promotion (or takeover, for a bootstrap) to the end of the migration."""
        start = self.promoted_at or self.took_over_at
        if start is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - start)

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["phases"] = [attrs.asdict(p) for p in self.phases]
        data["seconds"] = None if self.seconds is None else round(self.seconds, 3)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpgradeRecord:
        fields = {f.name for f in attrs.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["phases"] = tuple(Phase(**p) for p in data.get("phases", ()))
        values["discarded"] = tuple(data.get("discarded", ()))
        return cls(**values)


def phases_of(entered: Sequence[tuple[str, float]], ended_at: float) -> tuple[Phase, ...]:
    """Phases from the times each was entered (the next one's start ends it)."""
    if not entered:
        return ()
    ends = [at for _, at in entered[1:]] + [ended_at]
    return tuple(
        Phase(name, round(at, 3), round(max(0.0, end - at), 3))
        for (name, at), end in zip(entered, ends, strict=True)
    )


def read_records(consensus: Consensus) -> tuple[list[UpgradeRecord], int]:
    """The leaders' records, oldest first, and the znode's version (-1: none yet)."""
    found = consensus.get(HISTORY_KEY)
    if found is None:
        return [], -1
    data = found.json()
    with decoding(HISTORY_KEY, "upgrade history"):
        if not isinstance(data, list):
            raise TypeError(f"expected a list, found {type(data).__name__}")
        return [UpgradeRecord.from_json(item) for item in data], found.version


def record_upgrade(consensus: Consensus, record: UpgradeRecord, *, fence: Fence) -> None:
    """Append ``record``, fenced; keeps the newest ``KEEP_UPGRADES``.

    The history is append-only: a generation stands for one release (``orchestrator.fencing``),
    so its first record stands, and a re-run of its leader (a restart, a successor after a
    crash) adds nothing and rewrites nothing. Only :func:`amend_record` changes a record's
    outcome (finalized, rolled back)."""

    def attempt() -> None:
        records, version = read_records(consensus)
        if any(r.deploy_generation == record.deploy_generation for r in records):
            return
        kept = [*records, record][-KEEP_UPGRADES:]
        value = encode_json([r.to_json() for r in kept])
        op = Create(HISTORY_KEY, value) if version < 0 else SetData(HISTORY_KEY, value, version)
        consensus.commit([op], fence=fence)

    CasRetry(retryable=(VersionMismatchError,))(attempt)


def amend_record(
    consensus: Consensus,
    deploy_generation: int,
    *,
    fence: Fence,
    pending_of: str | None = None,
    **changes: Any,
) -> None:
    """Change the record of ``deploy_generation``'s upgrade (finalized, rolled back), and with
    ``pending_of`` every record still ``pending`` to that version (its redeploys at later
    generations), fenced; nothing when the history holds none (never recorded, or aged out)."""

    def matches(r: UpgradeRecord) -> bool:
        return r.deploy_generation == deploy_generation or (
            pending_of is not None and r.outcome == "pending" and r.to_version == pending_of
        )

    def attempt() -> None:
        records, version = read_records(consensus)
        if not any(matches(r) for r in records):
            return
        changed = [attrs.evolve(r, **changes) if matches(r) else r for r in records]
        value = encode_json([r.to_json() for r in changed])
        consensus.commit([SetData(HISTORY_KEY, value, version)], fence=fence)

    CasRetry(retryable=(VersionMismatchError,))(attempt)


def read_history(consensus: Consensus) -> list[UpgradeRecord]:
    """Every upgrade the environment remembers, oldest first: the leaders' records, and
    from the event logs the generations that never completed (refused, fenced, failed,
    aborted) or are still running."""
    records, _version = read_records(consensus)
    done = {r.deploy_generation for r in records}
    events = read_events(consensus, limit=200)
    derived: dict[int, UpgradeRecord] = {}
    promoted: dict[int, UpgradeEvent] = {}
    for event in events:
        generation = event.fields.get("deploy_generation")
        if not isinstance(generation, int) or generation in done:
            continue
        if event.kind == "promoted":
            promoted[generation] = event
        ending = _ENDINGS.get(event.kind)
        if ending is not None:
            error = event.fields.get("error") or {}
            derived[generation] = UpgradeRecord(
                deploy_generation=generation,
                to_version=str(event.fields.get("version", "?")),
                # exit 4: the migration itself was refused (a rule of the plan or schema).
                outcome="refused" if error.get("exit_code") == EXIT_REFUSED else ending,
                finished_at=event.at,
                rule=error.get("rule") or error.get("reason"),
                reason=error.get("message"),
            )
    newest = max((*done, *promoted), default=0)
    for generation, event in promoted.items():
        found = derived.get(generation)
        by = event.fields.get("requested_by")
        if found is not None:
            derived[generation] = attrs.evolve(found, promoted_by=by, promoted_at=event.at)
            continue
        outcome = "running" if generation == newest else "aborted"
        versions = [e.fields.get("version") for e in events if e.kind == "ready"
                    and e.fields.get("deploy_generation") == generation]  # fmt: skip
        derived[generation] = UpgradeRecord(
            deploy_generation=generation,
            to_version=str(versions[-1]) if versions else "?",
            outcome=outcome,
            promoted_by=by,
            promoted_at=event.at,
        )
    rows = [*records, *derived.values()]
    return sorted(rows, key=lambda r: (r.promoted_at or r.took_over_at or r.finished_at or 0.0,
                                       r.deploy_generation))  # fmt: skip
