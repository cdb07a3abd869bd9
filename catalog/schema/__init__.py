"""Arrow schema evolution: the rules, migration types with tombstones, data migration.

Everything here is one walk over nested Arrow types (struct, list, large_list, map; every other
type is atomic) with visitors, the way pyiceberg's ``visit``/``visit_with_partner`` work:

* :mod:`.walk` -- the walk: :func:`visit` (one type, bottom-up) and :func:`visit_with_partner`
  (a target type together with an older partner, matched by field name);
* :mod:`.rules` -- rule ids and the refusal every check raises;
* :mod:`.history` -- migration types: the live schema plus tombstones of deleted fields;
* :mod:`.evolution` -- backward compatibility and evolution of a history;
* :mod:`.reader` -- reader fencing;
* :mod:`.diff` -- what changed between two schemas;
* :mod:`.data` -- migrating Arrow data to a newer schema;
* :mod:`.fingerprints` -- canonical hashes; :mod:`.codec` -- schema bytes.

A *migration type* is an Arrow schema whose deleted fields stay in place as tombstones (nullable,
field metadata ``catalog.deleted = true``); fields added later are appended after them. It is the
whole history of a shard's schemas in one value: checking a new schema against it is the same as
checking it against every earlier schema, because compatibility is transitive and the tombstones
reserve every name ever used.

Paths are dotted: ``s`` (top-level), ``s.x`` (struct child), ``s.items.x`` (list or large_list
element), ``m.key`` / ``m.value`` (map key and value); the root of a bare DataType is ``""``.
List element and map entry field *names* are not significant (Parquet renames ``item`` to
``element`` on a round trip): the rules and fingerprints ignore them, and migrated data takes the
names of the target type.

This package imports neither kazoo nor pyspark."""

from __future__ import annotations

from catalog.schema.codec import schema_from_bytes, schema_to_bytes
from catalog.schema.data import migrate, migrate_batch
from catalog.schema.diff import migration_preserves_order, schema_diff
from catalog.schema.evolution import (
    check_backward_compatible,
    evolve,
    is_backward_compatible,
    migration_type,
)
from catalog.schema.fingerprints import fingerprint, schema_json
from catalog.schema.history import TOMBSTONE_KEY, is_tombstone, live_schema, partner_child
from catalog.schema.ids import field_id, former_names, renamed
from catalog.schema.reader import check_reader
from catalog.schema.rules import (
    RULE_DATA_MISMATCH,
    RULE_FIELD_ADDED_NOT_AT_END,
    RULE_FIELD_ADDED_NOT_NULLABLE,
    RULE_FIELD_NAME_DUPLICATED,
    RULE_FIELD_READDED,
    RULE_FIELD_REORDERED,
    RULE_MAP_KEY_CHANGED,
    RULE_NULLABILITY_TIGHTENED,
    RULE_READER_NEEDS_DELETED_FIELD,
    RULE_READER_NEEDS_NON_NULL,
    RULE_READER_TYPE_MISMATCH,
    RULE_READER_UNKNOWN_FIELD,
    RULE_TYPE_CHANGED,
)
from catalog.schema.walk import PartnerVisitor, TypeVisitor, visit, visit_with_partner

__all__ = [
    "RULE_DATA_MISMATCH",
    "RULE_FIELD_ADDED_NOT_AT_END",
    "RULE_FIELD_ADDED_NOT_NULLABLE",
    "RULE_FIELD_NAME_DUPLICATED",
    "RULE_FIELD_READDED",
    "RULE_FIELD_REORDERED",
    "RULE_MAP_KEY_CHANGED",
    "RULE_NULLABILITY_TIGHTENED",
    "RULE_READER_NEEDS_DELETED_FIELD",
    "RULE_READER_NEEDS_NON_NULL",
    "RULE_READER_TYPE_MISMATCH",
    "RULE_READER_UNKNOWN_FIELD",
    "RULE_TYPE_CHANGED",
    "TOMBSTONE_KEY",
    "PartnerVisitor",
    "TypeVisitor",
    "check_backward_compatible",
    "check_reader",
    "evolve",
    "field_id",
    "fingerprint",
    "former_names",
    "is_backward_compatible",
    "is_tombstone",
    "live_schema",
    "migrate",
    "migrate_batch",
    "migration_preserves_order",
    "migration_type",
    "partner_child",
    "renamed",
    "schema_diff",
    "schema_from_bytes",
    "schema_json",
    "schema_to_bytes",
    "visit",
    "visit_with_partner",
]
