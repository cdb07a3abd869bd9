"""Exhaustive validation: every pair ``X < Y`` of a release history checked as an upgrade path."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.errors import CatalogError, PlanError, ReleaseError
from catalog.release.findings import DataCost, category_of
from catalog.release.levels import ReleaseLevel, release_levels
from catalog.release.loader import find_release
from catalog.release.manifest import Mechanism, Release
from catalog.release.memo import EvolutionCache
from catalog.release.paths import path_problems
from catalog.release.planning import InstructionIndex, Plan, plan, winning_mechanism
from catalog.release.snapshot import CatalogSnapshot, CollectionState
from catalog.release.version import Version
from catalog.schema.rules import RULE_RENAME_DECLARATION_DROPPED, refusal

log = structlog.get_logger(__name__)


def plan_path(
    releases: Sequence[Release], from_version: str | Version, to_version: str | Version
) -> Plan:
    """Plan ``from_version -> to_version`` between two releases of a history.

    The source collections carry the schema history :func:`snapshot_at` builds, so an evolution
    re-adding a field dropped before ``from_version`` is refused here as it is by the shard.
    """
    target = find_release(releases, to_version)
    return plan(snapshot_at(releases, from_version), target)


def walk_histories(
    ordered: Sequence[Release], indexes: Sequence[InstructionIndex], cache: EvolutionCache
) -> list[CatalogSnapshot]:
    """The catalog state after each release of ``ordered``, upgraded one release at a time.

    A collection's history is evolved through every release in version order whose instructions
    evolve it, and starts afresh when it is created, replaced or rewritten (a new shard), or when
    a step is broken (missing instruction or incompatible evolution: that step fails validation
    on its own, and later paths are judged from the release that introduced the change).
    """
    snapshots: list[CatalogSnapshot] = []
    previous: dict[str, CollectionState] = {}
    previous_version: Version | None = None
    for release, index in zip(ordered, indexes, strict=True):
        states: list[CollectionState] = []
        for builtin in release.builtins:
            digest = cache.fingerprint(builtin.schema)
            prior = previous.get(builtin.global_id)
            history: pa.Schema | None = None
            if prior is not None and prior.name == builtin.name and previous_version is not None:
                instructions = index.in_range(builtin.name, previous_version, release.version)
                mechanism = winning_mechanism(instructions) if instructions else None
                if mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE):
                    history = None
                elif digest == prior.fingerprint:
                    history = prior.history
                elif mechanism is Mechanism.EVOLUTION:
                    evolved = cache.evolve(prior.migration_history(), builtin.schema)
                    history = evolved if isinstance(evolved, pa.Schema) else None
            if history is None:
                history = cache.fresh(builtin.schema)
            states.append(
                CollectionState(builtin.global_id, builtin.name, digest, builtin.schema, history)
            )
        snapshots.append(CatalogSnapshot(release.version, tuple(states)))
        previous = {s.global_id: s for s in states}
        previous_version = release.version
    return snapshots


def snapshot_at(releases: Sequence[Release], version: str | Version) -> CatalogSnapshot:
    """The catalog state at ``version`` after upgrading through every earlier release in order.

    Each collection carries its schema history (migration type with tombstones): evolved through
    every release up to ``version`` that evolved it, restarted by a replacement or rewrite.
    """
    ordered = in_version_order(releases)
    wanted = find_release(ordered, version).version
    upto = [r for r in ordered if r.version <= wanted]
    cache = EvolutionCache()
    return walk_histories(upto, _indexes(upto), cache)[-1]


def _indexes(ordered: Sequence[Release]) -> list[InstructionIndex]:
    """Every release's instruction index, each built on the one before where it can be."""
    indexes: list[InstructionIndex] = []
    for release in ordered:
        indexes.append(InstructionIndex.of(release, indexes[-1] if indexes else None))
    return indexes


def in_version_order(releases: Iterable[Release]) -> list[Release]:
    ordered = sorted(releases, key=lambda r: r.version)
    for before, after in itertools.pairwise(ordered):
        if before.version == after.version:
            raise ReleaseError(
                f"two releases at version {after.version}", version=str(after.version)
            )
    return ordered


@attrs.frozen
class PathFailure:
    """One reason the upgrade path ``from_version -> to_version`` fails.

    ``reason`` is a stable id: ``missing-instruction``, ``incompatible-evolution`` (the error
    carries the schema rule, e.g. ``field-readded``), ``instruction-removed``, ``backport``,
    ``retain-data-replaced``, ``unknown-builtin`` or ``global-id-reassigned``. ``collection`` is
    the culprit ``schema.object``; ``error`` the refusal the planner would raise on that path.
    """

    from_version: Version
    to_version: Version
    reason: str
    collection: str | None
    error: CatalogError = attrs.field(eq=False)

    @property
    def message(self) -> str:
        """The human explanation."""
        return self.error.message

    @property
    def rule(self) -> str | None:
        """The schema rule broken, for ``incompatible-evolution``."""
        return getattr(self.error, "rule", None)

    @property
    def category(self) -> str:
        """The finding's category (:data:`CATEGORIES`)."""
        return category_of(self.reason)

    def finding(self) -> dict[str, Any]:
        """This failure as a finding: category, rule id, releases, collection, path, fix."""
        details = self.error.details
        return {
            "category": self.category,
            "rule": self.rule or self.reason,
            "releases": [str(self.from_version), str(self.to_version)],
            "collection": self.collection,
            "path": details.get("path"),
            "message": self.message,
            "fix": details.get("suggestion") or getattr(self.error, "suggestion", None),
        }

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description of this failure."""
        described = self.error.to_json()
        for key in ("message", "exit_code", "reason", "from_version", "to_version", "collections"):
            described.pop(key, None)
        return {
            "from": str(self.from_version),
            "to": str(self.to_version),
            "reason": self.reason,
            "collection": self.collection,
            "message": self.message,
            **described,
        }


@attrs.frozen
class ValidationReport:
    """The result of :func:`validate`: every path checked and every failure found."""

    releases: tuple[Version, ...]
    paths_checked: int
    failures: tuple[PathFailure, ...]
    costs: tuple[DataCost, ...] = ()
    # Each release's declared and required change level (after the first release).
    levels: tuple[ReleaseLevel, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every upgrade path works."""
        return not self.failures

    def findings(self) -> list[dict[str, Any]]:
        """Every failure, then every data-dependent cost, then every release numbered below
        its changes (``version-bump``), as findings."""
        return (
            [f.finding() for f in self.failures]
            + [c.finding() for c in self.costs]
            + [level.finding() for level in self.levels if level.understated]
        )

    def with_rows(self, rows: Mapping[str, int]) -> ValidationReport:
        """This report with each data-dependent cost's rows from ``rows`` (by collection)."""
        costs = tuple(attrs.evolve(c, rows=rows.get(c.collection)) for c in self.costs)
        return attrs.evolve(self, costs=costs)

    def between(self, from_version: Version, to_version: Version) -> ValidationReport:
        """This report narrowed to the one path ``from_version -> to_version`` (``plan``'s
        findings): its failures, and the costly instructions of the releases it crosses."""
        path = (from_version, to_version)
        return ValidationReport(
            path,
            1,
            tuple(f for f in self.failures if (f.from_version, f.to_version) == path),
            tuple(c for c in self.costs if from_version < c.version <= to_version),
            tuple(v for v in self.levels if from_version < v.version <= to_version),
        )

    def fails_on(self, categories: Iterable[str]) -> bool:
        """Whether a finding falls in one of ``categories`` (what ``--fail-on`` asks)."""
        wanted = set(categories)
        return any(finding["category"] in wanted for finding in self.findings())

    def failing_paths(self) -> list[tuple[Version, Version]]:
        """The distinct failing ``(from, to)`` pairs, in order."""
        return sorted({(f.from_version, f.to_version) for f in self.failures})

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (the ``validate --json`` output)."""
        return {
            "ok": self.ok,
            "releases": [str(v) for v in self.releases],
            "paths_checked": self.paths_checked,
            "failing_paths": len(self.failing_paths()),
            "failures": [f.to_json() for f in self.failures],
            "findings": self.findings(),
            "levels": [level.to_json() for level in self.levels],
        }


def validate(
    releases: Iterable[Release], *, on_progress: Callable[[int, int], None] | None = None
) -> ValidationReport:
    """Check every pair ``X < Y`` of ``releases`` as an upgrade path.

    For each path this runs the planner from the catalog state at ``X`` (histories as
    :func:`snapshot_at` builds them, the strictest history a shard at ``X`` can have) to ``Y``,
    and compares the instruction lists: an instruction of ``X`` missing from ``Y`` is
    ``instruction-removed``, or ``backport`` when ``X`` is a patch release, the instruction belongs
    to ``X``'s patch line and ``Y`` is a later release line. Fingerprints and ``evolve`` results are
    memoised, so the cost grows with the number of distinct schemas, not paths times builtins.
    """
    ordered = in_version_order(releases)
    cache = EvolutionCache()
    indexes = _indexes(ordered)
    fingerprints = [{b.global_id: cache.fingerprint(b.schema) for b in r.builtins} for r in ordered]
    snapshots = walk_histories(ordered, indexes, cache)
    total = len(ordered) * (len(ordered) - 1) // 2
    failures = [
        PathFailure(
            ordered[i].version,
            ordered[j].version,
            problem.reason,
            problem.collection,
            problem.error,
        )
        for i, j, problem in path_problems(
            ordered,
            indexes,
            snapshots,
            fingerprints,
            cache.check,
            None if on_progress is None else lambda done: on_progress(done, total),
        )
    ]
    failures.extend(_removed_instructions(ordered, indexes))
    failures.extend(_dropped_renames(ordered, cache))
    failures.sort(
        key=lambda f: (
            f.from_version.precedence,
            f.to_version.precedence,
            f.reason,
            f.collection or "",
            f.error.message,
        )
    )
    n = len(ordered)
    costs = sorted(
        {
            DataCost(m.version, m.name, m.mechanism)
            for r in ordered
            for m in r.migrations
            if m.mechanism in (Mechanism.REWRITE, Mechanism.REPLACEMENT)
        },
        key=lambda c: (c.version.precedence, c.collection),
    )
    report = ValidationReport(
        tuple(r.version for r in ordered),
        n * (n - 1) // 2,
        tuple(failures),
        tuple(costs),
        tuple(release_levels(ordered, indexes)),
    )
    log.debug(
        "releases_validated",
        releases=n,
        paths=report.paths_checked,
        failures=len(report.failures),
    )
    return report


def _dropped_renames(ordered: Sequence[Release], cache: EvolutionCache) -> list[PathFailure]:
    """A release keeping a renamed field under its new name but no longer declaring a former
    name an earlier release declared: an upgrade from before that rename would delete the old
    field and add the new one empty. Every such path fails (rule
    ``rename-declaration-dropped``); a field deleted in between ends its chain."""
    failures: list[PathFailure] = []
    # By global id: (path, former name) -> the index of the first release declaring it.
    declared: dict[str, dict[tuple[str, str], int]] = {}
    for k, release in enumerate(ordered):
        for builtin in release.builtins:
            mine = dict(cache.renames(builtin.schema))
            watched = declared.setdefault(builtin.global_id, {})
            for (path, former), first in list(watched.items()):
                if former in mine.get(path, ()):
                    continue
                del watched[(path, former)]
                if path not in cache.paths(builtin.schema):
                    continue  # the field was deleted or renamed on: its chain ended
                error = refusal(
                    RULE_RENAME_DECLARATION_DROPPED, path,
                    f"renamed from {former} in {ordered[first].version}, no longer declared in "
                    f"{release.version}: from before the rename {former} would be deleted",
                    former, path,
                )  # fmt: skip
                failures.extend(
                    PathFailure(ordered[i].version, release.version, "incompatible-evolution",
                                builtin.name, error)
                    for i in range(first)
                )  # fmt: skip
            for path, formers in mine.items():
                for former in formers:
                    watched.setdefault((path, former), k)
    return failures


def _removed_instructions(
    ordered: Sequence[Release], indexes: Sequence[InstructionIndex]
) -> list[PathFailure]:
    """Every path ``i -> j`` on which ``j`` lacks an instruction ``i`` has: from when each
    instruction is held, followed through the differences of consecutive releases (a history
    whose lists only grow costs one set difference per release)."""
    n = len(ordered)
    held: dict[tuple[Version, str, str, Mechanism], list[list[int]]] = (
        {key: [[0, n]] for key in indexes[0].keys} if indexes else {}
    )
    for j in range(1, n):
        before, after = indexes[j - 1].keys, indexes[j].keys
        for key in before - after:
            held[key][-1][1] = j
        for key in after - before:
            held.setdefault(key, []).append([j, n])
    failures = []
    for key, spans in held.items():
        if len(spans) == 1 and spans[0][1] == n:
            continue  # held from its first release on: never removed
        members = {i for start, end in spans for i in range(start, end)}
        for i in sorted(members):
            for j in range(i + 1, n):
                if j not in members and not _converted(key, ordered[j]):
                    failures.append(removed_failure(key, ordered[i].version, ordered[j].version))
    return failures


def _converted(key: tuple[Version, str, str, Mechanism], release: Release) -> bool:
    """Whether ``release`` subsumes the instruction ``key`` it lacks: a conversion of the
    builtin from the description the instruction names, at its version or later (every path
    that needed the instruction crosses the conversion, a replacement)."""
    version, name, kind, _ = key
    return any(m.converts(name, kind) and m.version >= version for m in release.migrations)


def removed_failure(
    key: tuple[Version, str, str, Mechanism], low: Version, high: Version
) -> PathFailure:
    version, name, kind, mechanism = key
    described = f"{version} {name} ({kind}) {mechanism.value}"
    backport = (
        low.is_patch and version.line == low.line and version.is_patch and high.line > low.line
    )
    if backport:
        reason = "backport"
        message = (
            f"patch release {low} carries instruction {described} that the later release "
            f"{high} lacks: backported migrations must be carried forward"
        )
    else:
        reason = "instruction-removed"
        message = f"release {high} removed instruction {described} that {low} has"
    error = PlanError(
        message,
        reason=reason,
        collections=[name],
        instruction=described,
        from_version=str(low),
        to_version=str(high),
        suggestion=f"keep {described} in the MIGRATIONS of {high} and every later release",
    )
    return PathFailure(low, high, reason, name, error)
