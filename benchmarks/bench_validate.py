"""Benchmark: exhaustive validation of a 500-release x 200-builtin history (target: under 10 s).

Generates a synthetic, valid release history in memory (seeded, so every run validates the same
history): every release changes a dozen builtins by evolution (add or delete a column, nested
additions included), replacement or rewrite, patch releases interleave with minor releases and
are carried forward, and builtins are added and removed now and then (never one its release
migrates). Each release lists the previous one's instructions first, as release files do
(``migrations=[*PREVIOUS.migrations, ...]``), and names it (``previous=PREVIOUS``). Then times
``catalog.release.validate`` over all ``n * (n - 1) / 2`` upgrade paths (124,750 at 500
releases). The history is valid, so any failure is a bug of the generator or of ``validate``:
the benchmark prints the first failures, records nothing and exits 1.

Prints one JSON object and writes it to ``benchmarks/results/validate.json``::

    {"releases": 500, "builtins": 200, "paths": 124750, "seconds": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import attrs
import pyarrow as pa

import provenance
from catalog.release import Builtin, Mechanism, Migration, Release, validate
from orchestrator.logs import configure_logging

RESULTS = Path(__file__).resolve().parent / "results" / "validate.json"
SCHEMAS = ("mz_catalog", "mz_internal", "mz_introspection")
KINDS = ("table", "source", "log")
CHANGES_PER_RELEASE = 12


def _keep(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def _base_schema(index: int) -> pa.Schema:
    """Eight columns, two of them nested, shaped a little differently per builtin."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("oid", pa.uint32(), nullable=False),
            pa.field("name", pa.string(), nullable=False),
            pa.field("owner_id", pa.string()),
            pa.field("size", pa.int64() if index % 2 else pa.int32()),
            pa.field("created_at", pa.timestamp("ms", tz="UTC")),
            pa.field("config", pa.struct([pa.field("workers", pa.int32())])),
            pa.field("tags", pa.map_(pa.string(), pa.string())),
        ]
    )


def _versions(count: int) -> list[str]:
    """Minor releases with a patch release after every third one."""
    versions: list[str] = []
    minor = 1
    while len(versions) < count:
        versions.append(f"0.{minor}.0")
        if minor % 3 == 0 and len(versions) < count:
            versions.append(f"0.{minor}.1")
        minor += 1
    return versions


def _evolved(schema: pa.Schema, rng: random.Random, version: str) -> pa.Schema:
    tag = version.replace(".", "_")
    choice = rng.random()
    deletable = [f.name for f in schema if f.nullable and f.name not in ("config", "tags")]
    if choice < 0.15 and deletable:
        doomed = rng.choice(deletable)
        return pa.schema([f for f in schema if f.name != doomed])
    if choice < 0.35 and "config" in schema.names:
        config = schema.field("config")
        nested = pa.struct([*config.type, pa.field(f"opt_{tag}", pa.string())])
        return schema.set(schema.get_field_index("config"), pa.field("config", nested))
    return schema.append(pa.field(f"c_{tag}", pa.string()))


def _changed_type(version: str) -> pa.Schema:
    """An incompatible change: replace the whole shape (only a new shard takes it)."""
    tag = version.replace(".", "_")
    return pa.schema(
        [pa.field("id", pa.string(), nullable=False), pa.field(f"v_{tag}", pa.float64())]
    )


def generate(releases: int, builtins: int, seed: int) -> list[Release]:
    """A valid history of ``releases`` releases of about ``builtins`` builtins each."""
    rng = random.Random(seed)
    current: list[Builtin] = [
        Builtin(
            SCHEMAS[i % 3],
            f"builtin_{i}",
            KINDS[i % 3],
            f"s{i}",
            _base_schema(i),
            retain_data=i % 17 == 0,
        )
        for i in range(builtins)
    ]
    next_id = builtins
    migrations: list[Migration] = []
    history: list[Release] = []
    for number, version in enumerate(_versions(releases)):
        if number:
            changed = rng.sample(current, CHANGES_PER_RELEASE)
            for builtin in changed:
                roll = rng.random()
                if roll < 0.7:
                    mechanism, schema = Mechanism.EVOLUTION, _evolved(builtin.schema, rng, version)
                elif roll < 0.85 and not builtin.retain_data:
                    mechanism, schema = Mechanism.REPLACEMENT, _changed_type(version)
                else:
                    mechanism, schema = Mechanism.REWRITE, _changed_type(version)
                migrations.append(
                    Migration(
                        version,
                        builtin.schema_name,
                        builtin.object_name,
                        builtin.kind,
                        mechanism,
                        transform=_keep if mechanism is Mechanism.REWRITE else None,
                    )
                )
                position = current.index(builtin)
                current[position] = attrs.evolve(builtin, schema=schema)
            if number % 10 == 0:
                # Only a builtin this release leaves alone may go: an instruction of a release
                # must name one of its builtins (popping a just-migrated one made the history
                # of 200 releases report 140 failures, all this generator's).
                touched = {b.global_id for b in changed}
                removable = [i for i, b in enumerate(current) if b.global_id not in touched]
                current.pop(rng.choice(removable))
                current.append(
                    Builtin(
                        "mz_internal",
                        f"builtin_{next_id}",
                        "source",
                        f"s{next_id}",
                        _base_schema(next_id),
                    )
                )
                next_id += 1
        # Each release names the one it was made from, as release files do
        # (``previous=PREVIOUS``): a rewrite after an evolution reads its input schema there.
        previous = history[-1] if history else None
        history.append(Release(version, list(current), list(migrations), previous=previous))
    return history


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=500)
    parser.add_argument("--builtins", type=int, default=200)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    configure_logging("WARNING")  # stdout carries only the JSON result

    started = time.perf_counter()
    history = generate(args.releases, args.builtins, args.seed)
    generated = time.perf_counter() - started

    started = time.perf_counter()
    report = validate(history)
    seconds = time.perf_counter() - started

    result = {
        "benchmark": "validate",
        "releases": len(history),
        "builtins": args.builtins,
        "instructions": len(history[-1].migrations),
        "paths": report.paths_checked,
        "failures": len(report.failures),
        "seconds": round(seconds, 3),
        "generate_seconds": round(generated, 3),
        "target_seconds": 10.0,
        "python": platform.python_version(),
        "seed": args.seed,
    }
    print(json.dumps(result))
    if not report.ok:  # a bug of the generator or of validate: nothing to record
        for failure in report.failures[:5]:
            print(failure, file=sys.stderr)
        return 1
    provenance.record(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
