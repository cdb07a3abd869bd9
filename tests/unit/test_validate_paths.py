"""validate() checks every path collection by collection (catalog.release.paths): its failures
are exactly those of planning each path alone, on random histories broken in every way the
planner knows (missing and removed instructions, incompatible evolutions, widenings and
narrowings, kinds that name no builtin, replaced retain-data builtins, reassigned GlobalIds,
backports)."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import ReleaseError
from catalog.release import Builtin, Mechanism, Migration, Release, validate
from catalog.release.planning import InstructionIndex, build_plan
from catalog.release.validation import (
    EvolutionCache,
    in_version_order,
    removed_failure,
    walk_histories,
)

KINDS = ("table", "source")


def _history(seed: int) -> list[Release] | None:
    """A random history of 2-7 releases of 2-5 builtins; None if it is not a valid value."""
    rng = random.Random(seed)
    count = rng.randint(2, 7)
    versions: list[str] = []
    minor = 1
    while len(versions) < count:
        versions.append(f"0.{minor}.0")
        if rng.random() < 0.3 and len(versions) < count:
            versions.append(f"0.{minor}.1")
        minor += 1
    builtins = [
        Builtin(
            "mz_catalog",
            f"b{i}",
            rng.choice(KINDS),
            f"s{i}",
            pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("a", pa.int64())]),
            retain_data=rng.random() < 0.2,
        )
        for i in range(rng.randint(2, 5))
    ]
    migrations: list[Migration] = []
    history = []
    for number, version in enumerate(versions):
        if number:
            for position, builtin in enumerate(list(builtins)):
                roll = rng.random()
                if roll < 0.35:
                    continue
                mechanism = rng.choice(list(Mechanism))
                if roll < 0.5:
                    schema = builtin.schema.append(pa.field(f"c{number}", pa.string()))
                elif roll < 0.6 and len(builtin.schema) > 1:
                    schema = pa.schema(list(builtin.schema)[:-1])  # a deletion
                elif roll < 0.7:
                    schema = pa.schema([pa.field("id", pa.int32())])  # a type change
                elif roll < 0.78 and "a" in builtin.schema.names:
                    # a's int64 narrowed to int32 (refused), or int32 widened back (lossless)
                    index = builtin.schema.get_field_index("a")
                    narrow = builtin.schema.field(index).type == pa.int64()
                    wider = pa.field("a", pa.int32() if narrow else pa.int64())
                    schema = builtin.schema.set(index, wider)
                else:
                    schema = builtin.schema
                if rng.random() < 0.85:
                    kind = builtin.kind if rng.random() < 0.9 else "log"
                    migrations.append(
                        Migration(
                            version,
                            "mz_catalog",
                            builtin.object_name,
                            kind,
                            mechanism,
                            transform=(lambda b: b) if mechanism is Mechanism.REWRITE else None,
                        )
                    )
                builtins[position] = Builtin(
                    "mz_catalog",
                    builtin.object_name,
                    builtin.kind,
                    builtin.global_id if rng.random() < 0.95 else f"x{number}{position}",
                    schema,
                    retain_data=builtin.retain_data,
                )
            if rng.random() < 0.2 and len(builtins) > 1:
                builtins.pop(rng.randrange(len(builtins)))
        carried = [m for m in migrations if rng.random() < 0.95]
        try:
            history.append(Release(version, list(builtins), carried))
        except ReleaseError:
            return None
    return history


def _reference(history: list[Release]) -> set[tuple[str, str, str, str | None, str]]:
    """Every path planned alone (the planner as `plan` runs it), plus removed instructions."""
    ordered = in_version_order(history)
    cache = EvolutionCache()
    indexes = [InstructionIndex.of(r) for r in ordered]
    snapshots = walk_histories(ordered, indexes, cache)
    found = set()
    for i, source in enumerate(snapshots):
        for j in range(i + 1, len(ordered)):
            target = ordered[j]
            fingerprints = {b.global_id: cache.fingerprint(b.schema) for b in target.builtins}
            _, problems = build_plan(
                source,
                target,
                index=indexes[j],
                fingerprints=fingerprints,
                evolve_check=cache.check,
            )
            for p in problems:
                found.add(
                    (
                        str(source.version),
                        str(target.version),
                        p.reason,
                        p.collection,
                        p.error.message,
                    )
                )
            for key in indexes[i].keys - indexes[j].keys:
                failure = removed_failure(key, source.version, target.version)
                found.add(
                    (
                        str(source.version),
                        str(target.version),
                        failure.reason,
                        failure.collection,
                        failure.error.message,
                    )
                )
    return found


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9))
def test_validate_finds_exactly_what_planning_each_path_finds(seed: int) -> None:
    """The collection-by-collection validation and the path-by-path planner agree."""
    history = _history(seed)
    if history is None:
        return
    report = validate(history)
    got = {
        (str(f.from_version), str(f.to_version), f.reason, f.collection, f.error.message)
        for f in report.failures
    }
    assert got == _reference(history)
    assert len(got) == len(report.failures)


def test_validate_reports_progress_up_to_every_path() -> None:
    """on_progress hears a growing count of checked paths, ending at all of them."""
    history = None
    seed = 0
    while history is None or len(history) < 4:
        seed += 1
        history = _history(seed)
    heard: list[tuple[int, int]] = []
    report = validate(history, on_progress=lambda done, total: heard.append((done, total)))
    assert heard == sorted(heard)
    assert heard[-1] == (report.paths_checked, report.paths_checked)
