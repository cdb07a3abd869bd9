"""Schemas as bytes (Arrow IPC), the form they take in durable state."""

from __future__ import annotations

import pyarrow as pa


def schema_to_bytes(schema: pa.Schema) -> bytes:
    """The Arrow IPC encoding of ``schema``, with every field's metadata (tombstones) kept."""
    return bytes(schema.serialize().to_pybytes())


def schema_from_bytes(data: bytes) -> pa.Schema:
    """The schema :func:`schema_to_bytes` encoded."""
    return pa.ipc.read_schema(pa.py_buffer(data))
