"""Rows of the example history's collections (``scenarios/releases``), for tests and
benchmarks that fill a collection the example upgrade migrates."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from catalog.release import load_release

#: The example history's release files.
RELEASES = Path(__file__).resolve().parents[2] / "scenarios" / "releases"
#: The collection 0.11.0 rewrites (its ids turn from numbers into strings ``u<id>``).
ROLES = "mz_catalog.mz_roles"


def release_file(version: str) -> Path:
    """The example history's file of ``version``: ``0.10.0`` -> ``v0_10_0.py``."""
    return RELEASES / f"v{version.replace('.', '_')}.py"


def roles(start: int, count: int) -> pa.Table:
    """``count`` rows of 0.10.0's ``mz_roles`` with ids from ``start``, as Arrow."""
    schema = load_release(release_file("0.10.0")).builtin(ROLES).schema  # type: ignore[union-attr]
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "oid": pa.array(range(start, start + count), pa.uint32()),
            "name": pc.cast(ids, pa.string()),
            "inherit": pa.array([True] * count),
            "vars": pa.nulls(count, schema.field("vars").type),
        },
        schema=schema,
    )
