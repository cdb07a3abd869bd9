"""The reasons a plan is refused, each naming the collection, versions, rule and fix."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Final

import attrs

from catalog.errors import CatalogError, PlanError, SchemaIncompatibleError
from catalog.release.manifest import Builtin, Mechanism, Migration, Release
from catalog.release.snapshot import CollectionState
from catalog.release.version import Version


@attrs.frozen
class Problem:
    """One reason a path fails, for one collection (None: the whole path)."""

    reason: str
    collection: str | None
    error: CatalogError


def missing_instruction(builtin: Builtin, low: Version, high: Version) -> Problem:
    error = PlanError(
        f"{builtin.name} changed schema between {low} and {high} without a migration instruction",
        reason="missing-instruction",
        collections=[builtin.name],
        from_version=str(low),
        to_version=str(high),
        suggestion=f"add Migration(version='{high}', schema_name='{builtin.schema_name}', "
        f"object_name='{builtin.object_name}', kind='{builtin.kind}', mechanism=...) "
        "to MIGRATIONS",
    )
    return Problem("missing-instruction", builtin.name, error)


def retain_data_replaced(
    builtin: Builtin, instructions: Sequence[Migration], low: Version, high: Version
) -> Problem:
    culprits = [m.describe() for m in instructions if m.mechanism is Mechanism.REPLACEMENT]
    error = PlanError(
        f"{builtin.name} retains its data and can never be migrated by replacement "
        f"({'; '.join(culprits)})",
        reason="retain-data-replaced",
        collections=[builtin.name],
        instructions=culprits,
        from_version=str(low),
        to_version=str(high),
        suggestion="use an evolution, or a rewrite with a transform, for this collection",
    )
    return Problem("retain-data-replaced", builtin.name, error)


def unknown_builtin(migration: Migration, target: Release) -> Problem:
    error = PlanError(
        f"instruction {migration.describe()} names no builtin {migration.kind} of release "
        f"{target.version}",
        reason="unknown-builtin",
        collections=[migration.name],
        instruction=migration.describe(),
        to_version=str(target.version),
        suggestion=f"name a builtin of {target.version} (schema.name and kind as its BUILTINS "
        "list them), or drop the instruction",
    )
    return Problem("unknown-builtin", migration.name, error)


def rewrite_input_unknown(
    builtin: Builtin, rewrite: Migration, evolved: Version, target: Release
) -> Problem:
    error = PlanError(
        f"{builtin.name} is evolved at {evolved} and rewritten at {rewrite.version}: the rewrite's "
        f"transform takes the schema of the release before {rewrite.version}, which release "
        f"{target.version} does not say",
        reason="rewrite-input-unknown",
        collections=[builtin.name],
        instruction=rewrite.describe(),
        to_version=str(target.version),
        suggestion="make each release from the one before it (Release(..., previous=PREVIOUS)), "
        f"so that {target.version} knows the schema {builtin.name} had before {rewrite.version}",
    )
    return Problem("rewrite-input-unknown", builtin.name, error)


def global_id_reassigned(
    state: CollectionState, builtin: Builtin, low: Version, high: Version
) -> Problem:
    error = PlanError(
        f"GlobalId {builtin.global_id} names {state.name} at {low} but {builtin.name} at {high}",
        reason="global-id-reassigned",
        collections=[builtin.name],
        global_id=builtin.global_id,
        from_version=str(low),
        to_version=str(high),
        suggestion="give the new builtin a new GlobalId; never reuse one",
    )
    return Problem("global-id-reassigned", builtin.name, error)


def incompatible_problem(
    exc: SchemaIncompatibleError, builtin: Builtin, low: Version, high: Version
) -> Problem:
    extra = {
        k: v
        for k, v in exc.details.items()
        if k not in {"rule", "path", "old", "new", "suggestion"}
    }
    error = SchemaIncompatibleError(
        f"{builtin.name}: evolution {low} -> {high} is not backward compatible: {exc.message}",
        rule=exc.rule,
        path=exc.path,
        old=exc.old,
        new=exc.new,
        suggestion=exc.suggestion,
        **{
            **extra,
            "reason": "incompatible-evolution",
            "collection": builtin.name,
            "global_id": builtin.global_id,
            "from_version": str(low),
            "to_version": str(high),
        },
    )
    return Problem("incompatible-evolution", builtin.name, error)


# The order plan() reports problems in: the cheapest to fix and most fundamental first.
_REASON_ORDER: Final = (
    "downgrade",
    "unknown-builtin",
    "global-id-reassigned",
    "missing-instruction",
    "retain-data-replaced",
    "incompatible-evolution",
    "rewrite-input-unknown",
)


def raise_first(problems: Sequence[Problem]) -> None:
    for reason in _REASON_ORDER:
        same = [p for p in problems if p.reason == reason]
        if not same:
            continue
        first = same[0].error
        if len(same) == 1 or isinstance(first, SchemaIncompatibleError):
            raise first
        names = [p.collection for p in same if p.collection is not None]
        raise PlanError(
            f"{_REASON_TITLES[reason]}: {', '.join(names)}",
            reason=reason,
            collections=names,
            from_version=first.details.get("from_version"),
            to_version=first.details.get("to_version"),
        )


_REASON_TITLES: Final = MappingProxyType(
    {
        "downgrade": "downgrade not supported",
        "unknown-builtin": "instructions name unknown builtins",
        "global-id-reassigned": "GlobalIds reassigned to other builtins",
        "missing-instruction": "builtins changed schema without a migration instruction",
        "retain-data-replaced": "builtins that retain data are replaced",
        "incompatible-evolution": "evolutions are not backward compatible",
        "rewrite-input-unknown": "rewrites whose input schema the release does not say",
    }
)
