"""Writing a snapshot to a directory of Parquet files (``read --output DIR``), on either engine.

The directory (a local path or a blob-store URI) must be new or empty; the files are named
``part-<uuid>.parquet`` and hold the snapshot in its exact Arrow types (the arrow engine writes
them in this process, Spark's executors each write their partitions), so reading the directory
back with pyarrow gives the same table whichever engine wrote it. A ``_SUCCESS`` file lists
the parts and the row count once every part is written: a directory without it is incomplete.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import attrs
import pyarrow as pa

from catalog.blob import BlobStore
from catalog.errors import BadInputError

SUCCESS = "_SUCCESS"


#: A part file holds at most this many rows (a Spark task holds one part's rows at a time).
PART_ROWS = 1_000_000

# A streamed snapshot reaches its reader in chunks of about this many rows.
STREAM_ROWS = 65_536


@attrs.frozen
class SnapshotWritten:
    """What ``read --output`` wrote: the directory, its part files and the rows in them."""

    output: str
    parts: tuple[str, ...]
    rows: int

    def to_json(self) -> dict[str, object]:
        return {"output": self.output, "parts": len(self.parts), "rows": self.rows}


def open_output(output: str) -> BlobStore:
    """The store of a new or empty output directory; BadInputError (exit 2) otherwise."""
    store = BlobStore.from_uri(output)
    existing = store.list("")
    if existing:
        raise BadInputError(
            f"output directory {output} is not empty ({len(existing)} entries, e.g. "
            f"{existing[0]}): name a new directory",
            output=output,
        )
    return store


def part_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def write_part(store: BlobStore, table: pa.Table) -> str:
    """Write one part file; its name."""
    name = part_name()
    store.put_batch(name, table)
    return name


def finish(store: BlobStore, output: str, parts: Sequence[str], rows: int) -> SnapshotWritten:
    """Mark the directory complete (``_SUCCESS`` with the parts and rows)."""
    written = SnapshotWritten(output, tuple(sorted(parts)), rows)
    manifest = {"parts": list(written.parts), "rows": rows}
    store.put_bytes(SUCCESS, json.dumps(manifest).encode())
    return written
