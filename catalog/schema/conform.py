"""Does this data match this schema? The one check for appended batches and transform output.

Columns must be the schema's, in its order, of equal types (list element names aside, which
Arrow's type equality ignores), with no nulls under a non-nullable field. :func:`conform`
answers with the columns relabelled as exactly the schema's types, or the first
:class:`Mismatch`; each caller raises its own error from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa

__all__ = ["Mismatch", "conform"]


@attrs.frozen
class Mismatch:
    """The first way the data differ from the schema: ``kind`` is ``columns``, ``type`` or
    ``null``."""

    kind: str
    text: str
    details: dict[str, Any]


def conform(
    names: Sequence[str], columns: Sequence[Any], schema: pa.Schema
) -> list[Any] | Mismatch:
    """``columns`` (arrays or chunked arrays named ``names``) as exactly ``schema``'s types,
    or the first mismatch."""
    if list(names) != schema.names:
        return Mismatch(
            "columns",
            f"columns {list(names)}, the schema has {schema.names}",
            {"columns": list(names), "expected": schema.names},
        )
    out: list[Any] = []
    for field, column in zip(schema, columns, strict=True):
        if column.type != field.type:
            return Mismatch(
                "type",
                f"column {field.name} as {column.type}, the schema has {field.type}",
                {"column": field.name, "type": str(column.type), "expected": str(field.type)},
            )
        if not field.nullable and column.null_count:
            return Mismatch(
                "null",
                f"{column.null_count} nulls in non-nullable column {field.name}",
                {"column": field.name, "nulls": column.null_count},
            )
        # Equal types may still differ in list element names: take the schema's.
        out.append(column if str(column.type) == str(field.type) else column.cast(field.type))
    return out
