"""Rows a simulation appends: collections whose rows can be generated and traced by a token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from catalog.release import Builtin, Release


def _stable_token_column(name: str, history: Sequence[Release]) -> str | None:
    """A non-null string column every release that has the collection keeps as is."""
    schemas = [b.schema for r in history if (b := r.builtin(name)) is not None]
    if not schemas:
        return None
    for field in schemas[0]:
        if field.nullable or not pa.types.is_string(field.type):
            continue
        if all(
            field.name in s.names and s.field(field.name).equals(field, check_metadata=False)
            for s in schemas
        ):
            return field.name
    return None


def _generatable(dtype: pa.DataType) -> bool:
    if pa.types.is_struct(dtype):
        return all(_generatable(f.type) for f in dtype if not f.nullable)
    return (
        pa.types.is_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_decimal(dtype)
        or pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_map(dtype)
    )


def appendable_collections(history: Sequence[Release]) -> dict[str, str]:
    """Collections the walk appends to, with their token column (the rows' identity)."""
    names = {b.name for r in history for b in r.builtins}
    out = {}
    for name in sorted(names):
        token = _stable_token_column(name, history)
        schemas = [b.schema for r in history if (b := r.builtin(name)) is not None]
        if token and all(_generatable(f.type) for s in schemas for f in s if not f.nullable):
            out[name] = token
    return out


def _value(dtype: pa.DataType, number: int) -> Any:
    if pa.types.is_struct(dtype):
        return {f.name: _value(f.type, number) for f in dtype if not f.nullable}
    if pa.types.is_string(dtype):
        return f"v{number}"
    if pa.types.is_boolean(dtype):
        return number % 2 == 0
    if pa.types.is_floating(dtype):
        return number / 2
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return []
    return number  # integers, timestamps (epoch units), decimals


def make_rows(
    builtin: Builtin,
    token_column: str,
    tokens: Sequence[str],
    required: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """One row per token: required columns filled (also those named in ``required``: what a
    release a pending upgrade came from requires), the token in its column, the rest null."""
    rows = []
    for number, token in enumerate(tokens, start=1):
        row = {
            f.name: _value(f.type, number)
            for f in builtin.schema
            if not f.nullable or f.name in required
        }
        row[token_column] = token
        rows.append(row)
    return rows


def discarded_by_rollback(
    history: Sequence[Release], previous: str, version: str
) -> tuple[str, ...]:
    """The collections a rollback from ``version`` to ``previous`` must discard the writes of:
    those replaced or rewritten in between whose releases declare no inverse, and those added
    in between (``previous`` has no place for their rows)."""
    from catalog.release import Mechanism, Version, plan_path
    from orchestrator.migrate.rollback import inverse_chain

    release = next(r for r in history if str(r.version) == version)
    merged = plan_path(history, previous, version)
    lost = {
        m.name
        for m in merged.migrations
        if m.mechanism in (Mechanism.REPLACEMENT, Mechanism.REWRITE)
        and inverse_chain(release, m.name, Version.parse(previous)) is None
    }
    return tuple(sorted(lost | {b.name for b in merged.new_builtins}))
