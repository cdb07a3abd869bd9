"""A two-release history with one deliberate mistake (see v0_11_0.py): the start of it."""

import pyarrow as pa

from catalog.release import Builtin, Release

TABLES = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("oid", pa.uint32(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
    ]
)
ROLES = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string(), nullable=False)]
)

RELEASE = Release(
    version="0.10.0",
    builtins=[
        Builtin("mz_catalog", "mz_tables", "table", "s3", TABLES),
        Builtin("mz_catalog", "mz_roles", "table", "s10", ROLES),
    ],
)
