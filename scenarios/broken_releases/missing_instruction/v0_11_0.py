"""Broken on purpose: mz_tables gains ``source_id`` but nobody wrote the migration instruction.

A 0.11.0 process must refuse to start against a 0.10.0 catalog (exit 4, naming the collection)
and write nothing; the 0.10.0 leader keeps serving.
"""

import pyarrow as pa
from v0_10_0 import RELEASE as PREVIOUS
from v0_10_0 import ROLES, TABLES

from catalog.release import Builtin, Release

RELEASE = Release(
    version="0.11.0",
    builtins=[
        Builtin(
            "mz_catalog",
            "mz_tables",
            "table",
            "s3",
            TABLES.append(pa.field("source_id", pa.string())),
        ),
        Builtin("mz_catalog", "mz_roles", "table", "s10", ROLES),
    ],
    migrations=PREVIOUS.migrations,
)
