"""What changed between two schemas (added, deleted, renamed, relaxed fields)."""

from __future__ import annotations

import attrs
import pyarrow as pa

from catalog.schema.evolution import check_backward_compatible
from catalog.schema.history import FieldPartnerVisitor, is_tombstone, partner_index
from catalog.schema.walk import (
    KEY,
    as_data_type,
    child_fields,
    join_path,
    root_field,
    visit_with_partner,
)


@attrs.define
class _Diff(FieldPartnerVisitor[None, None]):
    """Collects the dotted paths added, dropped, relaxed and otherwise changed from old to new."""

    added_paths: list[str] = attrs.Factory(list)
    dropped: list[str] = attrs.Factory(list)
    relaxed: list[str] = attrs.Factory(list)
    changed: list[str] = attrs.Factory(list)
    renamed: list[str] = attrs.Factory(list)

    def kind_changed(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        self.changed.append(path)

    def added(self, field: pa.Field, path: str) -> None:
        self.added_paths.append(path)

    def struct(
        self, dtype: pa.StructType, partner: pa.Field, path: str, fields: list[None]
    ) -> None:
        old = child_fields(partner.type)
        kept = set()
        for field in child_fields(dtype):
            index = partner_index(old, field)
            if index is None:
                continue
            kept.add(index)
            if old[index].name != field.name:
                self.renamed.append(f"{join_path(path, old[index].name)} -> {field.name}")
        self.dropped.extend(
            join_path(path, f.name)
            for i, f in enumerate(old)
            if not is_tombstone(f) and i not in kept
        )

    def field(self, field: pa.Field, partner: pa.Field, path: str, type_result: None) -> None:
        if field.nullable and not partner.nullable:
            self.relaxed.append(path)
        elif partner.nullable and not field.nullable:
            self.changed.append(path)

    def list_(self, dtype: pa.DataType, partner: pa.Field, path: str, element: None) -> None:
        if dtype.id != partner.type.id:  # a list widened to a large list (or the reverse)
            self.changed.append(path)

    def map_(self, dtype: pa.MapType, partner: pa.Field, path: str, key: None, value: None) -> None:
        if dtype.keys_sorted != partner.type.keys_sorted:
            self.changed.append(join_path(path, KEY))

    def primitive(self, dtype: pa.DataType, partner: pa.Field, path: str) -> None:
        if dtype != partner.type:
            self.changed.append(path)


def schema_diff(old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema) -> dict[str, list[str]]:
    """Dotted paths ``added``, ``dropped``, ``relaxed`` (non-null -> nullable) from old to new,
    and ``renamed`` (``old.path -> new name``).

    Also ``changed``: paths whose type changed (a lossless widening, or a change no evolution
    allows) or whose nullability was tightened (:func:`check_backward_compatible` says which
    are allowed). Only the outermost path of an
    added or dropped subtree is listed.
    """
    diff = _Diff()
    visit_with_partner(as_data_type(new), root_field(as_data_type(old)), diff)
    return {
        "added": diff.added_paths,
        "dropped": diff.dropped,
        "relaxed": diff.relaxed,
        "changed": list(dict.fromkeys(diff.changed)),  # a path may both tighten and retype
        "renamed": diff.renamed,
    }


def renamed_paths(schema: pa.Schema, latest: pa.Schema) -> tuple[str, ...]:
    """The fields ``schema`` names otherwise than ``latest`` (``old.path -> new name``): what a
    batch stored under ``schema`` is read under new names at."""
    return tuple(schema_diff(schema, latest)["renamed"])


def migration_preserves_order(
    from_type: pa.DataType | pa.Schema, to_type: pa.DataType | pa.Schema
) -> bool:
    """True when migrating sorted data from ``from_type`` to ``to_type`` keeps it sorted.

    Appending null fields and relaxing nullability keep the order; deleting any field may not
    (the sort order over the remaining fields can change), so compaction must re-sort then.
    Raises :class:`SchemaIncompatibleError` when the migration is not allowed at all.
    """
    check_backward_compatible(from_type, to_type)
    return not schema_diff(from_type, to_type)["dropped"]
