"""Random release histories for the differential test of upgrade paths.

A history is 4 to 8 releases of 3 to 6 collections. Each release after the first migrates some
collections by a random mechanism: an evolution (a nullable field added, or a field deleted), a
replacement (a new schema, types changed), or a rewrite (a transform written against the
previous release's schema: values mapped, a type changed, a field added with values). Every
release is made from the one before it (``previous``), as release files are, and rows are made
for every collection at every version. Everything follows from the seed.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from catalog.release import Builtin, Mechanism, Migration, Release

ID = pa.field("id", pa.string(), nullable=False)
_TYPES = (pa.int64(), pa.string())
# A replacement discards all before it, so it is the rarest: paths keep rows to compare.
_WEIGHTS = {Mechanism.EVOLUTION: 5, Mechanism.REWRITE: 4, Mechanism.REPLACEMENT: 1}


@attrs.frozen
class Rewrite:
    """A REWRITE transform written against ``source`` producing ``target``: each field of the
    target is the source field of its name mapped by ``ops`` (``inc``: +7, ``text``: an int as
    text, ``upper``: a string upper-cased), or, where the source has none, made from ``id``."""

    source: pa.Schema
    target: pa.Schema
    ops: Mapping[str, str]

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not batch.schema.remove_metadata().equals(self.source.remove_metadata()):
            raise TypeError(f"written against {self.source}, given {batch.schema}")
        columns = []
        for field in self.target:
            if field.name in self.source.names:
                column = batch.column(field.name)
                op = self.ops.get(field.name)
                if op == "inc":
                    column = pc.add(column, 7)
                elif op == "text":
                    column = pc.cast(column, pa.string())
                elif op == "upper":
                    column = pc.utf8_upper(column)
            else:  # a field the rewrite adds, with values
                column = pc.binary_join_element_wise(batch.column("id"), "+", "")
            columns.append(column.cast(field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.target)


@attrs.frozen
class History:
    """Releases oldest first, and the rows each release appends to each collection."""

    seed: int
    releases: tuple[Release, ...]
    rows: Mapping[str, Mapping[str, list[dict[str, Any]]]]  # version -> name -> rows

    def describe(self) -> str:
        lines = [f"history of seed {self.seed}:"]
        for release in self.releases:
            own = [m for m in release.migrations if m.version == release.version]
            steps = ", ".join(f"{m.object_name} {m.mechanism.value}" for m in own) or "-"
            lines.append(f"  {release.version}: {steps}")
        return "\n".join(lines)


def random_history(seed: int) -> History:
    """The history of ``seed`` (4 to 8 versions, 3 to 6 collections)."""
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(rng.randint(3, 6))]
    used: dict[str, set[str]] = {name: {"id"} for name in names}
    schemas = {name: _schema(rng, used[name], rng.randint(1, 3)) for name in names}
    builtins = {name: _builtin(name, i, schemas[name]) for i, name in enumerate(names)}
    release = Release("0.1.0", list(builtins.values()))
    releases = [release]
    migrations: list[Migration] = []
    for minor in range(2, rng.randint(4, 8) + 1):
        version = f"0.{minor}.0"
        for name in names:
            if rng.random() < 0.4:
                continue
            mechanism = rng.choices(list(_WEIGHTS), weights=list(_WEIGHTS.values()))[0]
            old = schemas[name]
            transform = None
            if mechanism is Mechanism.EVOLUTION:
                new = _evolved(rng, old, used[name])
            elif mechanism is Mechanism.REPLACEMENT:
                new = _schema(rng, used[name], rng.randint(1, 3))
            else:
                new, transform = _rewritten(rng, old, used[name])
            schemas[name] = new
            builtins[name] = _builtin(name, names.index(name), new)
            migrations.append(
                Migration(version, "mz_catalog", name, "table", mechanism, transform=transform)
            )
        release = Release(version, list(builtins.values()), list(migrations), previous=release)
        releases.append(release)
    rows = {
        str(r.version): {b.name: _rows(rng, b.schema, f"{r.version}-{b.object_name}") for b in
                         r.builtins}
        for r in releases
    }  # fmt: skip
    return History(seed, tuple(releases), rows)


def _builtin(name: str, index: int, schema: pa.Schema) -> Builtin:
    return Builtin("mz_catalog", name, "table", f"s{index + 1}", schema)


def _new_field(rng: random.Random, used: set[str]) -> pa.Field:
    name = f"f{len(used)}"
    used.add(name)
    return pa.field(name, rng.choice(_TYPES))


def _schema(rng: random.Random, used: set[str], fields: int) -> pa.Schema:
    return pa.schema([ID, *(_new_field(rng, used) for _ in range(fields))])


def _evolved(rng: random.Random, old: pa.Schema, used: set[str]) -> pa.Schema:
    """A field added at the end (nullable, a name never used), or one deleted."""
    deletable = [f for f in old if f.name != "id"]
    if deletable and rng.random() < 0.4:
        gone = rng.choice(deletable)
        return pa.schema([f for f in old if f.name != gone.name])
    return pa.schema([*old, _new_field(rng, used)])


def _rewritten(rng: random.Random, old: pa.Schema, used: set[str]) -> tuple[pa.Schema, Rewrite]:
    """Values mapped (and an int field turned into text), maybe a field added with values."""
    ops: dict[str, str] = {}
    fields = [ID]
    for field in old:
        if field.name == "id":
            continue
        if pa.types.is_integer(field.type):
            op = rng.choice(["inc", "text", "keep"])
            ops[field.name] = op
            fields.append(pa.field(field.name, pa.string()) if op == "text" else field)
        else:
            ops[field.name] = rng.choice(["upper", "keep"])
            fields.append(field)
    if rng.random() < 0.5:
        added = pa.field(f"f{len(used)}", pa.string())
        used.add(added.name)
        fields.append(added)
    new = pa.schema(fields)
    return new, Rewrite(old, new, ops)


def _rows(rng: random.Random, schema: pa.Schema, prefix: str) -> list[dict[str, Any]]:
    out = []
    for k in range(rng.randint(1, 3)):
        row: dict[str, Any] = {"id": f"{prefix}-{k}"}
        for field in schema:
            if field.name == "id":
                continue
            if rng.random() < 0.2:
                row[field.name] = None
            elif pa.types.is_integer(field.type):
                row[field.name] = rng.randint(-1000, 1000)
            else:
                row[field.name] = rng.choice(["a", "b", "cd", "Ünï"]) + str(rng.randint(0, 9))
        out.append(row)
    return out


def seeds_from_environment(variable: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Seeds named by ``variable`` (``7``, ``1-50`` or ``3,17,29``), else ``default``."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return tuple(seeds)


def commit_seed() -> int:
    """A seed that changes with the commit under test (the date when git cannot tell)."""
    found = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    text = found.stdout.strip() if found.returncode == 0 else time.strftime("%Y%m%d")
    return int(hashlib.sha256(text.encode()).hexdigest()[:6], 16)
