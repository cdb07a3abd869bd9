"""Plans: the merged migration of one upgrade ``from -> to``, one entry per collection."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import attrs
import pyarrow as pa
import structlog

from catalog.errors import PlanError, SchemaIncompatibleError
from catalog.release.manifest import (
    MECHANISM_RANK,
    Builtin,
    Mechanism,
    Migration,
    Release,
    Transform,
)
from catalog.release.problems import (
    Problem,
    global_id_reassigned,
    incompatible_problem,
    missing_instruction,
    raise_first,
    retain_data_replaced,
    rewrite_input_unknown,
    unknown_builtin,
)
from catalog.release.snapshot import CatalogSnapshot, CollectionState
from catalog.release.version import Version
from catalog.schema import evolve, schema_diff

log = structlog.get_logger(__name__)


@attrs.frozen
class SchemaDiff:
    """Dotted paths of fields added, dropped, made nullable, and otherwise changed (a type or
    nullability change only a replacement or rewrite can make) between two schemas, and the
    fields renamed (``old.path -> new name``)."""

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    relaxed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    renamed: tuple[str, ...] = ()

    @classmethod
    def between(cls, old: pa.Schema, new: pa.Schema) -> SchemaDiff:
        """The diff of :func:`catalog.schema.schema_diff` as a value."""
        diff = schema_diff(old, new)

        def paths(key: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(diff.get(key, ())))

        return cls(
            paths("added"), paths("dropped"), paths("relaxed"), paths("changed"), paths("renamed")
        )

    @property
    def is_empty(self) -> bool:
        """True when nothing visible changed."""
        return not (self.added or self.dropped or self.relaxed or self.changed or self.renamed)


@attrs.frozen
class RewriteStep:
    """One rewrite of a merged path: the rows are first evolved to ``input`` (the schema the
    transform was written against, the release before ``version`` declares it; None: the rows
    as they stand, no evolution came in between), then ``transform`` runs."""

    version: Version
    transform: Transform
    input: pa.Schema | None = attrs.field(default=None, eq=False)


@attrs.frozen
class PlannedMigration:
    """One collection's migration: the winning mechanism and the instructions merged into it.

    A REWRITE's ``rewrites`` are its steps in order, and ``evolves_after`` says whether
    evolutions follow the last one (its output is then evolved to ``new_schema``)."""

    global_id: str
    name: str
    mechanism: Mechanism
    instructions: tuple[Migration, ...]
    old_schema: pa.Schema
    new_schema: pa.Schema
    rewrites: tuple[RewriteStep, ...] = ()
    evolves_after: bool = False

    def steps(self) -> list[str]:
        """The merged steps in order, as ``plan`` shows them: what a jump does."""
        if self.mechanism is not Mechanism.REWRITE:
            return [self.mechanism.value]
        out = []
        for step in self.rewrites:
            if step.input is not None:
                out.append(f"evolve to {step.version}'s input")
            out.append(f"rewrite {step.version}")
        if self.evolves_after:
            out.append("evolve to the new schema")
        return out

    @property
    def diff(self) -> SchemaDiff:
        """Fields added, dropped and relaxed from the old live schema to the new one."""
        return SchemaDiff.between(self.old_schema, self.new_schema)

    @property
    def transforms(self) -> tuple[Transform, ...]:
        """The REWRITE transforms to apply, oldest instruction first."""
        return tuple(m.transform for m in self.instructions if m.transform is not None)


@attrs.frozen
class Plan:
    """The merged migration plan of one upgrade ``from_version -> to_version``."""

    from_version: Version
    to_version: Version
    migrations: tuple[PlannedMigration, ...] = ()
    new_builtins: tuple[Builtin, ...] = ()
    removed_builtins: tuple[CollectionState, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when the upgrade touches no collection."""
        return not (self.migrations or self.new_builtins or self.removed_builtins)

    def get(self, name: str) -> PlannedMigration | None:
        """The planned migration of collection ``name``, if any."""
        return next((m for m in self.migrations if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (the ``plan --json`` output)."""
        return {
            "from": str(self.from_version),
            "to": str(self.to_version),
            "migrations": [
                {
                    "global_id": m.global_id,
                    "name": m.name,
                    "mechanism": m.mechanism.value,
                    "instructions": [
                        {"version": str(i.version), "mechanism": i.mechanism.value, "kind": i.kind}
                        for i in m.instructions
                    ],
                    "steps": m.steps(),
                    "diff": attrs.asdict(m.diff, value_serializer=_list_values),
                }
                for m in self.migrations
            ],
            "new_builtins": [
                {"global_id": b.global_id, "name": b.name, "kind": b.kind}
                for b in self.new_builtins
            ],
            "removed_builtins": [
                {"global_id": c.global_id, "name": c.name} for c in self.removed_builtins
            ],
        }


def _list_values(_inst: object, _field: object, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


#: Checks one evolution: ``None`` when the builtin's schema may evolve the collection's history.
EvolveCheck = Callable[[CollectionState, Builtin], SchemaIncompatibleError | None]


def _check_evolution(state: CollectionState, builtin: Builtin) -> SchemaIncompatibleError | None:
    try:
        evolve(state.migration_history(), builtin.schema)
    except SchemaIncompatibleError as exc:
        return exc
    return None


@attrs.frozen
class InstructionIndex:
    """A release's instructions grouped by collection and sorted by version, for range queries."""

    version: Version
    by_name: Mapping[str, tuple[tuple[tuple[Any, ...], ...], tuple[Migration, ...]]]
    own: tuple[Migration, ...]
    keys: frozenset[tuple[Version, str, str, Mechanism]]
    newest: tuple[Any, ...] | None = None  # the precedence key of the newest instruction
    source: tuple[Migration, ...] = attrs.field(default=(), eq=False, repr=False)

    @classmethod
    def of(cls, release: Release, previous: InstructionIndex | None = None) -> InstructionIndex:
        """The index of ``release``; built on ``previous`` (an earlier release's) when
        ``release`` lists ``previous``'s instructions first and only newer ones after them, as
        release files do (``migrations=[*PREVIOUS.migrations, ...]``)."""
        if previous is not None:
            extended = cls._extended(release, previous)
            if extended is not None:
                return extended
        grouped: dict[str, list[Migration]] = {}
        ordered = sorted(release.migrations, key=lambda m: m.version.precedence)
        for migration in ordered:
            grouped.setdefault(migration.name, []).append(migration)
        return cls(
            release.version,
            MappingProxyType(
                {
                    name: (tuple(m.version.precedence for m in ms), tuple(ms))
                    for name, ms in grouped.items()
                }
            ),
            tuple(m for m in release.migrations if m.version == release.version),
            frozenset(m.key for m in release.migrations),
            ordered[-1].version.precedence if ordered else None,
            release.migrations,
        )

    @classmethod
    def _extended(cls, release: Release, previous: InstructionIndex) -> InstructionIndex | None:
        migrations, before = release.migrations, previous.source
        # Tuple equality compares identical elements without calling __eq__: shared objects
        # (the usual case) cost a pointer comparison each.
        if len(migrations) < len(before) or migrations[: len(before)] != before:
            return None
        added = sorted(migrations[len(before) :], key=lambda m: m.version.precedence)
        own_order = release.version.precedence
        floor = previous.newest
        if floor is not None and (
            floor >= own_order or (added and added[0].version.precedence < floor)
        ):
            return None
        by_name = dict(previous.by_name)
        for migration in added:
            orders, group = by_name.get(migration.name, ((), ()))
            by_name[migration.name] = (
                (*orders, migration.version.precedence),
                (*group, migration),
            )
        return cls(
            release.version,
            MappingProxyType(by_name),
            tuple(m for m in added if m.version.precedence == own_order),
            previous.keys | {m.key for m in added},
            added[-1].version.precedence if added else floor,
            migrations,
        )

    def in_range(self, name: str, low: Version, high: Version) -> tuple[Migration, ...]:
        """Instructions for ``name`` with ``low < version <= high``, oldest first."""
        entry = self.by_name.get(name)
        if entry is None:
            return ()
        # Bisect on the precedence keys: plain tuple comparisons, no Python-level __lt__.
        orders, migrations = entry
        start = bisect.bisect_right(orders, low.precedence)
        return migrations[start : bisect.bisect_right(orders, high.precedence)]


def winning_mechanism(instructions: Sequence[Migration]) -> Mechanism:
    """The winning mechanism by precedence (replacement > rewrite > evolution)."""
    return max((m.mechanism for m in instructions), key=_RANK.__getitem__)


def rewrite_steps(
    target: Release, builtin: Builtin, instructions: Sequence[Migration]
) -> tuple[tuple[RewriteStep, ...], bool] | Problem:
    """The steps of a REWRITE merge (no replacement among ``instructions``), oldest first, and
    whether evolutions follow the last rewrite; or the problem refusing the path.

    A jump equals its steps: each transform sees the rows in the schema its release was
    written against, so the evolutions before it are applied to them first. That schema is the
    builtin's in the release before the rewrite's version, found among ``target``'s ancestors
    (``previous``); a path that evolves the collection before a rewrite and whose target does
    not say that schema is refused (``rewrite-input-unknown``), never run on rows of another
    schema."""
    steps: list[RewriteStep] = []
    evolved_since: Version | None = None  # the newest evolution since the last rewrite
    for migration in instructions:
        if migration.mechanism is Mechanism.EVOLUTION:
            evolved_since = migration.version
            continue
        assert migration.transform is not None  # a REWRITE (the manifest checks it)
        schema = None
        if evolved_since is not None:
            schema = _schema_before(target, builtin.name, migration.version, evolved_since)
            if schema is None:
                return rewrite_input_unknown(builtin, migration, evolved_since, target)
        steps.append(RewriteStep(migration.version, migration.transform, schema))
        evolved_since = None
    return tuple(steps), evolved_since is not None


def _schema_before(
    target: Release, name: str, version: Version, floor: Version
) -> pa.Schema | None:
    """``name``'s schema in the newest ancestor of ``target`` older than ``version``, when that
    ancestor is not older than ``floor`` (the last instruction before ``version``)."""
    release = target.ancestor_before(version)
    if release is None or release.version < floor:
        return None
    builtin = release.builtin(name)
    return None if builtin is None else builtin.schema


# Precedence by member (an Enum's ``.value`` costs a descriptor call: validation merges often).
_RANK: Final = {mechanism: MECHANISM_RANK[mechanism.value] for mechanism in Mechanism}


def check_collection(
    state: CollectionState,
    target: Release,
    builtin: Builtin,
    index: InstructionIndex,
    fingerprint: str,
    low: Version,
    high: Version,
    evolve_check: EvolveCheck,
) -> Mechanism | Problem | tuple[Migration, ...] | None:
    """The rule for one collection on the path ``low -> high``: the merged mechanism to plan,
    the problem refusing the path, the in-range instructions whose kind names no builtin (they
    are reported as unknown), or None when nothing changes."""
    instructions = index.in_range(builtin.name, low, high)
    if state.name != builtin.name and not any(
        m.former_name == state.name for m in instructions
    ):  # renamed without a conversion on the path
        return global_id_reassigned(state, builtin, low, high)
    mismatched = tuple(m for m in instructions if m.kind != builtin.kind)
    if mismatched:
        return mismatched
    changed = fingerprint != state.fingerprint
    if not instructions:
        return missing_instruction(builtin, low, high) if changed else None
    mechanism = winning_mechanism(instructions)
    if builtin.retain_data and mechanism is Mechanism.REPLACEMENT:
        return retain_data_replaced(builtin, instructions, low, high)
    if mechanism is Mechanism.REWRITE and len(instructions) > 1:
        steps = rewrite_steps(target, builtin, instructions)
        if isinstance(steps, Problem):
            return steps
    if mechanism is Mechanism.EVOLUTION and changed:
        incompatible = evolve_check(state, builtin)
        if incompatible is not None:
            return incompatible_problem(incompatible, builtin, low, high)
    return mechanism


def build_plan(
    source: CatalogSnapshot,
    target: Release,
    *,
    index: InstructionIndex,
    fingerprints: Mapping[str, str],
    evolve_check: EvolveCheck,
    current: Mapping[str, CollectionState] | None = None,
) -> tuple[Plan, list[Problem]]:
    """The plan ``source -> target`` and every problem found; the pure core of plan/validate."""
    low, high = source.version, target.version
    empty = Plan(low, high)
    if high < low:
        error = PlanError(
            f"downgrade not supported: the catalog is at {low}, the release is {high}",
            reason="downgrade",
            from_version=str(low),
            to_version=str(high),
        )
        return empty, [Problem("downgrade", None, error)]
    if current is None:
        current = source.by_global_id()
    by_name = {b.name: b for b in target.builtins}
    problems: list[Problem] = []
    unknown: dict[tuple[Version, str, str, Mechanism], Migration] = {}
    if low < high:
        for migration in index.own:
            builtin = by_name.get(migration.name)
            if builtin is None or builtin.kind != migration.kind:
                unknown[migration.key] = migration
    planned: list[PlannedMigration] = []
    new: list[Builtin] = []
    for builtin in target.builtins:
        state = current.get(builtin.global_id)
        if state is None:
            new.append(builtin)
            continue
        outcome = check_collection(
            state, target, builtin, index, fingerprints[builtin.global_id], low, high,
            evolve_check,
        )  # fmt: skip
        if isinstance(outcome, Problem):
            problems.append(outcome)
        elif isinstance(outcome, Mechanism):
            instructions = index.in_range(builtin.name, low, high)
            steps = (
                rewrite_steps(target, builtin, instructions)
                if outcome is Mechanism.REWRITE
                else ((), False)
            )
            assert not isinstance(steps, Problem)  # check_collection refused those
            planned.append(
                PlannedMigration(
                    builtin.global_id,
                    builtin.name,
                    outcome,
                    instructions,
                    state.schema,
                    builtin.schema,
                    *steps,
                )
            )
        elif outcome:
            unknown.update((m.key, m) for m in outcome)
    problems.extend(unknown_builtin(m, target) for m in unknown.values())
    target_ids = {b.global_id for b in target.builtins}
    removed = tuple(c for gid, c in current.items() if gid not in target_ids)
    result = Plan(low, high, tuple(planned), tuple(new), removed)
    return result, problems


def plan(source: Release | CatalogSnapshot, target: Release) -> Plan:
    """Plan the upgrade from ``source`` (a release or the catalog's state) to ``target``.

    Takes the target's instructions with ``from < version <= to``, grouped by collection, merged
    by precedence; refuses (PlanError or SchemaIncompatibleError) a downgrade, an instruction
    naming no builtin, a changed builtin without instruction (naming every one), a replaced
    ``retain_data`` builtin, or an evolution not backward compatible with the history it comes
    from. Builtins without a collection yet are ``new_builtins``; collections the target no longer
    has are ``removed_builtins``.
    """
    snapshot = (
        source if isinstance(source, CatalogSnapshot) else CatalogSnapshot.from_release(source)
    )
    result, problems = build_plan(
        snapshot,
        target,
        index=InstructionIndex.of(target),
        fingerprints=target.fingerprints(),
        evolve_check=_check_evolution,
    )
    raise_first(problems)
    log.debug(
        "plan_built",
        from_version=str(result.from_version),
        to_version=str(result.to_version),
        migrations=len(result.migrations),
        new=len(result.new_builtins),
        removed=len(result.removed_builtins),
    )
    return result
