"""Rule ids of the schema evolution rules and the refusal every check raises."""

from __future__ import annotations

import types

from catalog.errors import SchemaIncompatibleError

RULE_TYPE_CHANGED = "type-changed"


RULE_NULLABILITY_TIGHTENED = "nullability-tightened"


RULE_FIELD_REORDERED = "field-reordered"


RULE_FIELD_ADDED_NOT_NULLABLE = "field-added-not-nullable"


RULE_FIELD_ADDED_NOT_AT_END = "field-added-not-at-end"


RULE_FIELD_READDED = "field-readded"


RULE_MAP_KEY_CHANGED = "map-key-changed"


RULE_FIELD_NAME_DUPLICATED = "field-name-duplicated"


RULE_DATA_MISMATCH = "data-mismatch"


RULE_READER_NEEDS_DELETED_FIELD = "reader-needs-deleted-field"


RULE_READER_NEEDS_NON_NULL = "reader-needs-non-null"


RULE_READER_UNKNOWN_FIELD = "reader-unknown-field"


RULE_READER_TYPE_MISMATCH = "reader-type-mismatch"


RULE_READER_NARROWER_TYPE = "reader-narrower-type"


RULE_TYPE_NARROWED = "type-narrowed"


RULE_RENAME_SOURCE_MISSING = "rename-source-missing"


RULE_RENAME_CONFLICT = "rename-conflict"


RULE_RENAME_DECLARATION_DROPPED = "rename-declaration-dropped"


_OTHER = "or use Mechanism.REPLACEMENT or REWRITE"


_AT_END = "add it as a nullable field at the end under a new name"


_SUGGESTIONS = types.MappingProxyType(
    {
        RULE_TYPE_CHANGED: f"keep the old type or widen it losslessly (docs/design-evolution.md); "
        f"for another one {_AT_END}, {_OTHER}",
        RULE_NULLABILITY_TIGHTENED: f"keep the field nullable, {_OTHER}",
        RULE_FIELD_REORDERED: f"keep the existing order (new fields go at the end), {_OTHER}",
        RULE_FIELD_ADDED_NOT_NULLABLE: f"add it as a nullable field, {_OTHER}",
        RULE_FIELD_ADDED_NOT_AT_END: f"add it after every existing field, {_OTHER}",
        RULE_FIELD_READDED: f"deleted names stay reserved until a rename numbers the shard's "
        f"fields: {_AT_END}, {_OTHER}",
        RULE_MAP_KEY_CHANGED: f"keep the map key; for a new map {_AT_END}, {_OTHER}",
        RULE_FIELD_NAME_DUPLICATED: "give every field of a struct a distinct name",
        RULE_DATA_MISMATCH: "pass the schema the data was written with",
        RULE_READER_NEEDS_DELETED_FIELD: "drop the field from the reader schema, or upgrade the "
        "reader to the shard's current schema",
        RULE_READER_NEEDS_NON_NULL: "declare the reader field nullable, or upgrade the reader",
        RULE_READER_UNKNOWN_FIELD: "drop the field from the reader schema, or register the "
        "schema that adds it first",
        RULE_READER_TYPE_MISMATCH: "read with the shard's current type for this field",
        RULE_READER_NARROWER_TYPE: "read with the shard's current (wider) type for this "
        "field: stored values may not fit the narrower one",
        RULE_TYPE_NARROWED: f"keep the wider type (values may not fit), {_OTHER}",
        RULE_RENAME_SOURCE_MISSING: "name every name the field had in renamed(field, newest, "
        "..., oldest), so releases that skip a rename still find it",
        RULE_RENAME_CONFLICT: "rename a field to a name no other live field has, and give each "
        "field one new name",
        RULE_RENAME_DECLARATION_DROPPED: "keep renamed(field, ...) with every former name in "
        "every later release, as instructions are kept",
    }
)


def refusal(
    rule: str,
    path: str,
    what: str,
    old: str | None,
    new: str | None,
    error: type[SchemaIncompatibleError] = SchemaIncompatibleError,
) -> SchemaIncompatibleError:
    suggestion = _SUGGESTIONS[rule]
    shown = [x for x in (old, new) if x is not None]
    change = f" ({' -> '.join(shown)})" if shown else ""
    message = f"{path or '<root>'}: {what}{change}; rule {rule}; fix: {suggestion}"
    return error(message, rule=rule, path=path, old=old, new=new, suggestion=suggestion)
