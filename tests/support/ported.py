"""Materialize's tests of its builtin schema migration, as histories of this product.

* :data:`MATERIALIZE_MIGRATIONS` is Materialize's real ``MIGRATIONS`` list
  (``src/adapter/src/catalog/open/builtin_schema_migration.rs``, from its smallest supported
  version 0.147.0 to 26.36.0-dev.0, prereleases included): real names, kinds, versions and
  mechanisms. :func:`materialize_history` makes one release per version of it, each made from
  the one before. The builtins that became materialized views were tables before (Materialize
  removed their table steps and added a replacement at the conversion): here the first
  materialized-view step of each is a conversion from ``table``. Columns are ours (Materialize's
  are SQL relation descriptions): an evolution adds a nullable column, as
  ``mz_type_pg_metadata`` gained ``typsend``; a replacement changes a column's type.
* :func:`ported_history` is the history of ``test_builtin_schema_migration`` for one seed: 10
  versions after the first, 5 builtins (tables or sources), 0 to 2 steps per version by any of
  our three mechanisms, and how many processes each version starts (0 to 3: a version without
  processes is jumped over).

Release files for real sidecars are written by :func:`write_release_files`: each imports this
module, so a sidecar loads the same history from the same seed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from catalog.release import Builtin, Mechanism, Migration, Release
from support.histories import History

EVO, REPL = Mechanism.EVOLUTION, Mechanism.REPLACEMENT

#: (version, kind, schema, name, mechanism), in Materialize's order.
MATERIALIZE_MIGRATIONS: tuple[tuple[str, str, str, str, Mechanism], ...] = (
    ("0.149.0", "source", "mz_internal", "mz_sink_statistics_raw", REPL),
    ("0.149.0", "source", "mz_internal", "mz_source_statistics_raw", REPL),
    ("0.159.0", "source", "mz_internal", "mz_cluster_replica_metrics_history", EVO),
    ("0.160.0", "table", "mz_catalog", "mz_sinks", REPL),
    ("26.18.0-dev.0", "materialized-view", "mz_catalog", "mz_databases", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_catalog", "mz_schemas", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_catalog", "mz_role_members", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_internal", "mz_network_policies", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_internal", "mz_network_policy_rules", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_internal", "mz_cluster_workload_classes", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_internal", "mz_internal_cluster_replicas", REPL),
    ("26.19.0-dev.0", "materialized-view", "mz_internal", "mz_pending_cluster_replicas", REPL),
    ("26.20.0-dev.0", "materialized-view", "mz_catalog", "mz_materialized_views", REPL),
    ("26.22.0-dev.0", "materialized-view", "mz_catalog", "mz_connections", REPL),
    ("26.22.0-dev.0", "materialized-view", "mz_catalog", "mz_secrets", REPL),
    ("26.27.0-dev.0", "materialized-view", "mz_catalog", "mz_sources", REPL),
    ("26.29.0-dev.0", "materialized-view", "mz_catalog", "mz_indexes", REPL),
    ("26.29.0-dev.0", "materialized-view", "mz_catalog", "mz_roles", REPL),
    ("26.29.0-dev.0", "materialized-view", "mz_catalog", "mz_role_parameters", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_catalog", "mz_indexes", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_catalog", "mz_clusters", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_catalog", "mz_cluster_replicas", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_internal", "mz_cluster_schedules", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_catalog", "mz_default_privileges", REPL),
    ("26.30.0-dev.0", "materialized-view", "mz_catalog", "mz_system_privileges", REPL),
    ("26.31.0-dev.0", "materialized-view", "mz_catalog", "mz_cluster_replicas", REPL),
    ("26.32.0-dev.0", "materialized-view", "mz_internal", "mz_comments", REPL),
    ("26.32.0-dev.0", "materialized-view", "mz_catalog", "mz_indexes", REPL),
    ("26.33.0-dev.0", "materialized-view", "mz_catalog", "mz_audit_events", REPL),
    ("26.34.0-dev.0", "materialized-view", "mz_catalog", "mz_indexes", REPL),
    ("26.34.0-dev.0", "materialized-view", "mz_internal", "mz_postgres_sources", REPL),
    ("26.34.0-dev.0", "materialized-view", "mz_catalog", "mz_kafka_sources", REPL),
    ("26.36.0-dev.0", "table", "mz_internal", "mz_type_pg_metadata", EVO),
)

#: Materialize's smallest supported version: every history starts there.
SMALLEST = "0.147.0"

NAME = pa.field("name", pa.string(), nullable=False)  # the rows' identity (a stable token)


def _schema(fields: list[pa.Field]) -> pa.Schema:
    return pa.schema([NAME, *fields])


def materialize_history(rows_seed: int = 0) -> History:
    """One release per version of Materialize's list, each made from the one before."""
    rng = random.Random(rows_seed)
    names = sorted({(schema, name) for _, _, schema, name, _ in MATERIALIZE_MIGRATIONS})
    kinds: dict[tuple[str, str], str] = {}
    for _, kind, schema, name, _ in MATERIALIZE_MIGRATIONS:  # the first kind named: a table
        kinds.setdefault((schema, name), "table" if kind == "materialized-view" else kind)
    ids = {key: f"s{i + 1}" for i, key in enumerate(names)}
    fields: dict[tuple[str, str], list[pa.Field]] = {
        key: [pa.field("value", pa.int64())] for key in names
    }
    builtins = {key: Builtin(key[0], key[1], kinds[key], ids[key], _schema(fields[key]))
                for key in names}  # fmt: skip
    releases = [Release(SMALLEST, list(builtins.values()))]
    migrations: list[Migration] = []
    versions = list(dict.fromkeys(v for v, *_ in MATERIALIZE_MIGRATIONS))
    for version in versions:
        for v, kind, schema, name, mechanism in MATERIALIZE_MIGRATIONS:
            if v != version:
                continue
            key = (schema, name)
            if mechanism is EVO:  # a trailing nullable column, as typsend
                fields[key] = [*fields[key], pa.field(f"added_{len(fields[key])}", pa.string())]
            else:  # a change no evolution can make: a column's type
                first = fields[key][0]
                changed = pa.string() if pa.types.is_integer(first.type) else pa.int64()
                fields[key] = [pa.field(first.name, changed), *fields[key][1:]]
            former = None
            if kind != kinds[key]:
                former = kinds[key]
                # Materialize's rule: the steps naming the former description are removed.
                migrations = [m for m in migrations if m.name != f"{schema}.{name}"]
                kinds[key] = kind
            builtins[key] = Builtin(schema, name, kind, ids[key], _schema(fields[key]))
            migrations.append(Migration(v, schema, name, kind, mechanism, former_kind=former))
        releases.append(
            Release(version, list(builtins.values()), list(migrations), previous=releases[-1])
        )
    return History(rows_seed, tuple(releases), _rows_of(rng, releases))


# -- the randomized multi-version test ---------------------------------------------------------

NUM_VERSIONS = 10
NUM_BUILTINS = 5
MAX_PROCESSES_PER_VERSION = 3
MAX_MIGRATIONS_PER_VERSION = 2


@attrs.frozen
class Bump:
    """A REWRITE transform: ``value`` (an int) moved by ``by``, every other column kept; the
    schema it takes and gives is ``schema``."""

    schema: pa.Schema
    by: int

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not batch.schema.remove_metadata().equals(self.schema.remove_metadata()):
            raise TypeError(f"written against {self.schema}, given {batch.schema}")
        columns = [
            pc.add(batch.column(f.name), self.by) if f.name == "value" else batch.column(f.name)
            for f in self.schema
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


@attrs.frozen
class Ported:
    """One seed of the randomized test: its history and the processes each version starts."""

    seed: int
    history: History
    processes: dict[str, int]  # version -> how many processes (0: jumped over)


def ported_history(seed: int) -> Ported:
    """The history and process counts of ``test_builtin_schema_migration`` for ``seed``."""
    rng = random.Random(seed)
    builtins: dict[str, Builtin] = {}
    fields: dict[str, list[pa.Field]] = {}
    for i in range(NUM_BUILTINS):
        kind, name = ("table", f"table{i}") if rng.random() < 0.5 else ("source", f"source{i}")
        fields[name] = [pa.field("value", pa.int64())]
        builtins[name] = Builtin("schema", name, kind, f"s{i + 1}", _schema(fields[name]))
    releases = [Release("0.1.0", list(builtins.values()))]
    migrations: list[Migration] = []
    processes = {"0.1.0": rng.randint(1, MAX_PROCESSES_PER_VERSION)}
    for minor in range(2, NUM_VERSIONS + 2):
        version = f"0.{minor}.0"
        chosen = rng.sample(sorted(builtins), rng.randint(0, MAX_MIGRATIONS_PER_VERSION))
        for name in chosen:
            mechanism = rng.choice(list(Mechanism))
            old = _schema(fields[name])
            fields[name] = [*fields[name], pa.field(f"c{minor}", pa.string())]
            transform = (
                _AddThenBump(old, Bump(_schema(fields[name]), minor))
                if mechanism is Mechanism.REWRITE
                else None
            )
            kind = builtins[name].kind
            builtins[name] = Builtin("schema", name, kind, builtins[name].global_id,
                                     _schema(fields[name]))  # fmt: skip
            migrations.append(
                Migration(version, "schema", name, kind, mechanism, transform=transform)
            )
        releases.append(
            Release(version, list(builtins.values()), list(migrations), previous=releases[-1])
        )
        processes[version] = rng.randint(0, MAX_PROCESSES_PER_VERSION)
    history = History(seed, tuple(releases), _rows_of(rng, releases))
    return Ported(seed, history, processes)


@attrs.frozen
class _AddThenBump:
    """A rewrite that adds its release's new column (null) and bumps ``value``."""

    source: pa.Schema
    bump: Bump

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not batch.schema.remove_metadata().equals(self.source.remove_metadata()):
            raise TypeError(f"written against {self.source}, given {batch.schema}")
        columns = [
            batch.column(f.name) if f.name in batch.schema.names else pa.nulls(len(batch), f.type)
            for f in self.bump.schema
        ]
        return self.bump(pa.RecordBatch.from_arrays(columns, schema=self.bump.schema))


def _rows_of(rng: random.Random, releases: list[Release]) -> dict[str, dict[str, list[Any]]]:
    """Rows each release appends to each of its builtins (one or two, named uniquely)."""

    def value(field: pa.Field) -> Any:
        return rng.randint(-99, 99) if pa.types.is_integer(field.type) else f"t{rng.randint(0, 9)}"

    return {
        str(r.version): {
            b.name: [
                {"name": f"{r.version}-{b.object_name}-{k}",
                 **{f.name: value(f) for f in b.schema if f.name != "name"}}
                for k in range(rng.randint(1, 2))
            ]
            for b in r.builtins
        }
        for r in releases
    }  # fmt: skip


def write_release_files(directory: Path, seed: int) -> dict[str, Path]:
    """One release file per version of :func:`ported_history` (``seed``), by version: each
    imports this module, so a sidecar loads exactly the history the test holds."""
    directory.mkdir(parents=True, exist_ok=True)
    tests = Path(__file__).resolve().parents[1]
    files = {}
    for index, release in enumerate(ported_history(seed).history.releases):
        path = directory / f"v{str(release.version).replace('.', '_')}.py"
        path.write_text(
            f'"""Release {release.version} of the ported history of seed {seed}."""\n'
            "import sys\n\n"
            f"sys.path.insert(0, {str(tests)!r})\n"
            "from support.ported import ported_history  # noqa: E402\n\n"
            f"RELEASE = ported_history({seed}).history.releases[{index}]\n"
        )
        files[str(release.version)] = path
    return files
