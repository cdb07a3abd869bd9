"""Schemas and builtin-list helpers shared by the example release history.

Every schema is defined once, here, and named after the builtin and the release that introduced
it (``MZ_TABLES_V0_11``); release files only say which builtin moves to which schema and which
instruction migrates it. Releases are cumulative: each release file starts from the previous
release's builtins and MIGRATIONS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import pyarrow as pa

from catalog.release import Builtin
from catalog.schema import renamed

UTC_MS = pa.timestamp("ms", tz="UTC")


def col(name: str, dtype: pa.DataType, nullable: bool = True) -> pa.Field:
    """A column; nullable unless said otherwise, as evolution requires for added columns."""
    return pa.field(name, dtype, nullable=nullable)


def req(name: str, dtype: pa.DataType) -> pa.Field:
    """A non-nullable column."""
    return pa.field(name, dtype, nullable=False)


def extend(schema: pa.Schema, *fields: pa.Field) -> pa.Schema:
    """``schema`` with ``fields`` appended (the only place evolution may add fields)."""
    return pa.schema([*schema, *fields])


def without(schema: pa.Schema, *names: str) -> pa.Schema:
    """``schema`` with top-level ``names`` deleted."""
    return pa.schema([f for f in schema if f.name not in names])


def replaced(schema: pa.Schema, *fields: pa.Field) -> pa.Schema:
    """``schema`` with the same-named top-level fields swapped for ``fields``."""
    by_name = {f.name: f for f in fields}
    return pa.schema([by_name.get(f.name, f) for f in schema])


# --- builtin lists ---------------------------------------------------------------------------


def updated(builtins: Iterable[Builtin], schemas: Mapping[str, pa.Schema]) -> list[Builtin]:
    """``builtins`` with the named ones (``schema.object``) moved to new schemas."""
    result = list(builtins)
    unknown = set(schemas) - {b.name for b in result}
    if unknown:
        raise KeyError(f"no builtins named {sorted(unknown)}")
    return [attrs.evolve(b, schema=schemas[b.name]) if b.name in schemas else b for b in result]


def removed(builtins: Iterable[Builtin], *names: str) -> list[Builtin]:
    """``builtins`` without the named ones."""
    return [b for b in builtins if b.name not in names]


# --- shared shapes ---------------------------------------------------------------------------

PRIVILEGES = pa.list_(
    pa.struct([req("grantee", pa.string()), req("grantor", pa.string()), req("acl", pa.string())])
)
OPTIONS = pa.map_(pa.string(), pa.string())


# --- mz_catalog ------------------------------------------------------------------------------

MZ_DATABASES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
        col("privileges", PRIVILEGES),
    ]
)
MZ_DATABASES_V1_0 = extend(MZ_DATABASES_V0_10, col("comment", pa.string()))

MZ_SCHEMAS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        col("database_id", pa.string()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
        col("privileges", PRIVILEGES),
    ]
)

MZ_TABLES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
        col("privileges", PRIVILEGES),
        col("create_sql", pa.string()),
    ]
)
MZ_TABLES_V0_11 = extend(MZ_TABLES_V0_10, col("source_id", pa.string()))
MZ_TABLES_V0_14 = extend(MZ_TABLES_V0_11, col("redacted_create_sql", pa.string()))

MZ_VIEWS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("definition", pa.string()),
        req("owner_id", pa.string()),
    ]
)

MZ_MATERIALIZED_VIEWS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("cluster_id", pa.string()),
        req("definition", pa.string()),
        req("owner_id", pa.string()),
    ]
)

MZ_SOURCES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("type", pa.string()),
        col("connection_id", pa.string()),
        col("size", pa.string()),
        col("envelope_type", pa.string()),
        col("cluster_id", pa.string()),
        req("owner_id", pa.string()),
    ]
)
# Sizes moved to clusters: the column is deleted and its name stays reserved forever.
MZ_SOURCES_V0_13 = without(MZ_SOURCES_V0_10, "size")

MZ_SINKS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("type", pa.string()),
        col("connection_id", pa.string()),
        col("size", pa.string()),
        col("envelope_type", pa.string()),
        col("format", pa.string()),
        col("cluster_id", pa.string()),
        req("owner_id", pa.string()),
    ]
)
MZ_SINKS_V0_13 = without(MZ_SINKS_V0_10, "size")

INDEX_KEY_V0_10 = pa.struct([req("position", pa.int32()), col("on_expression", pa.string())])
INDEX_KEY_V0_12 = pa.struct([*INDEX_KEY_V0_10, col("nulls_last", pa.bool_())])
MZ_INDEXES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("name", pa.string()),
        req("on_id", pa.string()),
        req("cluster_id", pa.string()),
        req("owner_id", pa.string()),
        col("key", pa.list_(pa.field("item", INDEX_KEY_V0_10, nullable=False))),
    ]
)
# A field added inside the elements of a list of structs.
MZ_INDEXES_V0_12 = replaced(
    MZ_INDEXES_V0_10, col("key", pa.list_(pa.field("item", INDEX_KEY_V0_12, nullable=False)))
)

MZ_COLUMNS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("name", pa.string()),
        req("position", pa.uint64()),
        req("nullable", pa.bool_()),
        req("type", pa.string()),
        col("default", pa.string()),
        req("type_oid", pa.uint32()),
        req("type_mod", pa.int32()),
    ]
)

MZ_ROLES_V0_10 = pa.schema(
    [
        req("id", pa.int64()),
        req("oid", pa.uint32()),
        req("name", pa.string()),
        req("inherit", pa.bool_()),
        col("vars", OPTIONS),
    ]
)
# Role ids become strings ('u7'): a type change, so the data is rewritten, not evolved.
MZ_ROLES_V0_11 = replaced(MZ_ROLES_V0_10, req("id", pa.string()))
MZ_ROLES_V0_15 = extend(
    MZ_ROLES_V0_11,
    col("attributes", pa.struct([col("login", pa.bool_()), col("superuser", pa.bool_())])),
)

MZ_ROLE_MEMBERS_V0_10 = pa.schema(
    [req("role_id", pa.string()), req("member", pa.string()), req("grantor", pa.string())]
)

MZ_CLUSTERS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
        col("privileges", PRIVILEGES),
        req("managed", pa.bool_()),
        col("size", pa.string()),
        col("replication_factor", pa.uint32()),
    ]
)
MZ_CLUSTERS_V0_14_1 = extend(MZ_CLUSTERS_V0_10, col("disk", pa.bool_()))
# 1.1.0: the replication factor outgrew uint32 and is renamed (widened to int64 on the way),
# and size becomes replica_size: renames through field ids, nothing rewritten.
MZ_CLUSTERS_V1_1 = pa.schema(
    [
        renamed(col("replica_size", pa.string()), "size") if f.name == "size"
        else renamed(col("replica_count", pa.int64()), "replication_factor")
        if f.name == "replication_factor" else f
        for f in MZ_CLUSTERS_V0_14_1
    ]
)  # fmt: skip

REPLICA_CONFIG_V0_10 = pa.struct([req("workers", pa.int32()), col("disk", pa.bool_())])
REPLICA_CONFIG_V0_11 = pa.struct([*REPLICA_CONFIG_V0_10, col("disk_limit", pa.string())])
MZ_CLUSTER_REPLICAS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("name", pa.string()),
        req("cluster_id", pa.string()),
        col("size", pa.string()),
        col("availability_zone", pa.string()),
        req("owner_id", pa.string()),
        col("config", REPLICA_CONFIG_V0_10),
    ]
)
# A field added inside a nested struct.
MZ_CLUSTER_REPLICAS_V0_11 = replaced(MZ_CLUSTER_REPLICAS_V0_10, col("config", REPLICA_CONFIG_V0_11))

CONNECTION_OPTION_V0_10 = pa.struct([col("value", pa.string())])
CONNECTION_OPTION_V0_13 = pa.struct([*CONNECTION_OPTION_V0_10, col("secret_id", pa.string())])
MZ_CONNECTIONS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("type", pa.string()),
        req("owner_id", pa.string()),
        col("options", pa.map_(pa.string(), CONNECTION_OPTION_V0_10)),
    ]
)
# A field added inside the values of a map.
MZ_CONNECTIONS_V0_13 = replaced(
    MZ_CONNECTIONS_V0_10, col("options", pa.map_(pa.string(), CONNECTION_OPTION_V0_13))
)

MZ_SECRETS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
    ]
)

MZ_TYPES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("category", pa.string()),
        req("owner_id", pa.string()),
        col("details", OPTIONS),
    ]
)
MZ_TYPES_V0_14 = extend(MZ_TYPES_V0_10, col("redacted_definition", pa.string()))

MZ_FUNCTIONS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("oid", pa.uint32()),
        req("schema_id", pa.string()),
        req("name", pa.string()),
        req("argument_type_ids", pa.list_(pa.string())),
        col("variadic_argument_type_id", pa.string()),
        col("return_type_id", pa.string()),
        req("returns_set", pa.bool_()),
        req("owner_id", pa.string()),
    ]
)
MZ_FUNCTIONS_V1_0 = extend(MZ_FUNCTIONS_V0_10, col("redacted", pa.bool_()))

NETWORK_RULE = pa.struct(
    [
        req("name", pa.string()),
        req("action", pa.string()),
        req("address", pa.string()),
        req("direction", pa.string()),
    ]
)
MZ_NETWORK_POLICIES_V0_15 = pa.schema(
    [
        req("id", pa.string()),
        req("name", pa.string()),
        req("owner_id", pa.string()),
        col("rules", pa.list_(NETWORK_RULE)),
    ]
)


# --- mz_internal -----------------------------------------------------------------------------

MZ_COMMENTS_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("object_type", pa.string()),
        col("object_sub_id", pa.int32()),
        req("comment", pa.string()),
    ]
)

MZ_OBJECT_DEPENDENCIES_V0_10 = pa.schema(
    [req("object_id", pa.string()), req("referenced_object_id", pa.string())]
)

MZ_CLUSTER_REPLICA_STATUSES_V0_10 = pa.schema(
    [
        req("replica_id", pa.string()),
        req("process_id", pa.uint64()),
        col("status", pa.int32()),
        col("reason", pa.string()),
        req("updated_at", UTC_MS),
    ]
)
# Status codes become names: incompatible, and nobody needs old statuses, so replaced.
MZ_CLUSTER_REPLICA_STATUSES_V0_11 = replaced(
    MZ_CLUSTER_REPLICA_STATUSES_V0_10, req("status", pa.string())
)
MZ_CLUSTER_REPLICA_STATUSES_V1_0 = pa.schema(
    [
        req("replica_id", pa.string()),
        req("process_id", pa.uint64()),
        req("status", pa.string()),
        col("reason", pa.struct([col("code", pa.string()), col("message", pa.string())])),
        req("updated_at", UTC_MS),
    ]
)

STATUS_DETAILS = OPTIONS
MZ_SOURCE_STATUSES_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("name", pa.string()),
        req("type", pa.string()),
        col("last_status_change_at", UTC_MS),
        req("status", pa.string()),
        col("error", pa.string()),
        col("details", STATUS_DETAILS),
    ]
)
MZ_SOURCE_STATUSES_V0_11_1 = extend(
    MZ_SOURCE_STATUSES_V0_10,
    col("error_details", pa.struct([col("hint", pa.string()), col("namespace", pa.string())])),
)

MZ_SINK_STATUSES_V0_10 = MZ_SOURCE_STATUSES_V0_10

MZ_STATEMENT_EXECUTION_HISTORY_V0_10 = pa.schema(
    [
        req("id", pa.string()),
        req("session_id", pa.string()),
        req("cluster_id", pa.string()),
        req("application_name", pa.string()),
        req("sample_rate", pa.float64()),
        req("params", pa.list_(pa.string())),
        req("began_at", UTC_MS),
        col("finished_at", UTC_MS),
        col("finished_status", pa.string()),
        col("error_message", pa.string()),
        col("rows_returned", pa.int64()),
    ]
)
# Statements may now run outside a cluster: relax cluster_id, record transient indexes.
MZ_STATEMENT_EXECUTION_HISTORY_V0_12 = extend(
    replaced(MZ_STATEMENT_EXECUTION_HISTORY_V0_10, col("cluster_id", pa.string())),
    col("transient_index_id", pa.string()),
)

MZ_SESSION_HISTORY_V0_10 = pa.schema(
    [
        req("session_id", pa.string()),
        req("connected_at", pa.int64()),
        req("application_name", pa.string()),
        req("authenticated_user", pa.string()),
    ]
)
# Milliseconds since the epoch become a real timestamp; history must survive, so rewritten.
MZ_SESSION_HISTORY_V0_14 = replaced(MZ_SESSION_HISTORY_V0_10, req("connected_at", UTC_MS))

MZ_STORAGE_USAGE_BY_SHARD_V0_10 = pa.schema(
    [
        req("id", pa.uint64()),
        col("shard_id", pa.string()),
        req("size_bytes", pa.uint64()),
        req("collection_timestamp", UTC_MS),
    ]
)
MZ_STORAGE_USAGE_BY_SHARD_V1_0 = replaced(
    MZ_STORAGE_USAGE_BY_SHARD_V0_10, req("size_bytes", pa.int64())
)

MZ_AWS_PRIVATELINK_CONNECTION_STATUS_HISTORY_V0_10 = pa.schema(
    [req("connection_id", pa.string()), req("status", pa.string()), req("occurred_at", UTC_MS)]
)
MZ_AWS_PRIVATELINK_CONNECTION_STATUS_HISTORY_V1_0 = extend(
    MZ_AWS_PRIVATELINK_CONNECTION_STATUS_HISTORY_V0_10, col("availability_zone", pa.string())
)

MZ_CLUSTER_REPLICA_METRICS_HISTORY_V0_10 = pa.schema(
    [
        req("replica_id", pa.string()),
        req("process_id", pa.uint64()),
        col("cpu_nano_cores", pa.uint64()),
        col("memory_bytes", pa.uint64()),
        col("disk_bytes", pa.uint64()),
        req("occurred_at", UTC_MS),
    ]
)
MZ_CLUSTER_REPLICA_METRICS_HISTORY_V0_15 = extend(
    MZ_CLUSTER_REPLICA_METRICS_HISTORY_V0_10,
    col("heap_bytes", pa.uint64()),
    col("heap_limit", pa.uint64()),
)

MZ_WEBHOOK_SOURCES_V0_10 = pa.schema(
    [req("id", pa.string()), req("name", pa.string()), req("url", pa.string())]
)

MZ_CLUSTER_REPLICA_HISTORY_V0_12 = pa.schema(
    [
        req("replica_id", pa.string()),
        col("size", pa.string()),
        req("cluster_id", pa.string()),
        req("created_at", UTC_MS),
        col("dropped_at", UTC_MS),
    ]
)
MZ_CLUSTER_REPLICA_HISTORY_V0_13 = extend(
    MZ_CLUSTER_REPLICA_HISTORY_V0_12, col("replica_name", pa.string())
)


# --- mz_introspection ------------------------------------------------------------------------

MZ_COMPUTE_EXPORTS_V0_10 = pa.schema(
    [req("export_id", pa.string()), req("dataflow_id", pa.uint64())]
)

MZ_DATAFLOW_OPERATORS_V0_10 = pa.schema([req("id", pa.uint64()), req("name", pa.string())])

MZ_ARRANGEMENT_SIZES_V0_10 = pa.schema(
    [
        req("operator_id", pa.uint64()),
        col("records", pa.int64()),
        col("batches", pa.int64()),
        col("size", pa.int64()),
        col("capacity", pa.int64()),
        col("allocations", pa.int64()),
    ]
)
MZ_ARRANGEMENT_SIZES_V0_12 = pa.schema(
    [
        req("operator_id", pa.uint64()),
        col("records", pa.uint64()),
        col("batches", pa.uint64()),
        col("size", pa.uint64()),
        col("allocations", pa.uint64()),
    ]
)

MZ_SCHEDULING_ELAPSED_V0_10 = pa.schema([req("id", pa.uint64()), req("elapsed_ns", pa.int64())])
MZ_SCHEDULING_ELAPSED_V0_12 = extend(MZ_SCHEDULING_ELAPSED_V0_10, col("worker_id", pa.uint64()))

MZ_COMPUTE_FRONTIERS_V0_10 = pa.schema([req("export_id", pa.string()), req("time", pa.uint64())])
MZ_COMPUTE_FRONTIERS_V0_15 = replaced(MZ_COMPUTE_FRONTIERS_V0_10, req("time", pa.decimal128(20, 0)))

MZ_PEEK_DURATIONS_HISTOGRAM_V0_10 = pa.schema(
    [req("type", pa.string()), req("duration_ns", pa.uint64()), req("count", pa.int64())]
)


# --- the bootstrap builtin list (release 0.10.0) ---------------------------------------------

BOOTSTRAP: tuple[Builtin, ...] = (
    Builtin("mz_catalog", "mz_databases", "table", "s1", MZ_DATABASES_V0_10),
    Builtin("mz_catalog", "mz_schemas", "table", "s2", MZ_SCHEMAS_V0_10),
    Builtin("mz_catalog", "mz_tables", "table", "s3", MZ_TABLES_V0_10),
    Builtin("mz_catalog", "mz_views", "table", "s4", MZ_VIEWS_V0_10),
    Builtin("mz_catalog", "mz_materialized_views", "table", "s5", MZ_MATERIALIZED_VIEWS_V0_10),
    Builtin("mz_catalog", "mz_sources", "table", "s6", MZ_SOURCES_V0_10),
    Builtin("mz_catalog", "mz_sinks", "table", "s7", MZ_SINKS_V0_10),
    Builtin("mz_catalog", "mz_indexes", "table", "s8", MZ_INDEXES_V0_10),
    Builtin("mz_catalog", "mz_columns", "table", "s9", MZ_COLUMNS_V0_10),
    Builtin("mz_catalog", "mz_roles", "table", "s10", MZ_ROLES_V0_10),
    Builtin("mz_catalog", "mz_role_members", "table", "s11", MZ_ROLE_MEMBERS_V0_10),
    Builtin("mz_catalog", "mz_clusters", "table", "s12", MZ_CLUSTERS_V0_10),
    Builtin("mz_catalog", "mz_cluster_replicas", "table", "s13", MZ_CLUSTER_REPLICAS_V0_10),
    Builtin("mz_catalog", "mz_connections", "table", "s14", MZ_CONNECTIONS_V0_10),
    Builtin("mz_catalog", "mz_secrets", "table", "s15", MZ_SECRETS_V0_10),
    Builtin("mz_catalog", "mz_types", "table", "s16", MZ_TYPES_V0_10),
    Builtin("mz_catalog", "mz_functions", "table", "s17", MZ_FUNCTIONS_V0_10),
    Builtin("mz_internal", "mz_comments", "table", "s20", MZ_COMMENTS_V0_10),
    Builtin("mz_internal", "mz_object_dependencies", "table", "s21", MZ_OBJECT_DEPENDENCIES_V0_10),
    Builtin(
        "mz_internal",
        "mz_cluster_replica_statuses",
        "source",
        "s22",
        MZ_CLUSTER_REPLICA_STATUSES_V0_10,
    ),
    Builtin("mz_internal", "mz_source_statuses", "source", "s23", MZ_SOURCE_STATUSES_V0_10),
    Builtin("mz_internal", "mz_sink_statuses", "source", "s24", MZ_SINK_STATUSES_V0_10),
    Builtin(
        "mz_internal",
        "mz_statement_execution_history",
        "source",
        "s25",
        MZ_STATEMENT_EXECUTION_HISTORY_V0_10,
        retain_data=True,
    ),
    Builtin(
        "mz_internal",
        "mz_session_history",
        "source",
        "s26",
        MZ_SESSION_HISTORY_V0_10,
        retain_data=True,
    ),
    Builtin(
        "mz_internal",
        "mz_storage_usage_by_shard",
        "table",
        "s27",
        MZ_STORAGE_USAGE_BY_SHARD_V0_10,
        retain_data=True,
    ),
    Builtin(
        "mz_internal",
        "mz_aws_privatelink_connection_status_history",
        "source",
        "s28",
        MZ_AWS_PRIVATELINK_CONNECTION_STATUS_HISTORY_V0_10,
        retain_data=True,
    ),
    Builtin(
        "mz_internal",
        "mz_cluster_replica_metrics_history",
        "source",
        "s29",
        MZ_CLUSTER_REPLICA_METRICS_HISTORY_V0_10,
    ),
    Builtin("mz_internal", "mz_webhook_sources", "table", "s30", MZ_WEBHOOK_SOURCES_V0_10),
    Builtin("mz_introspection", "mz_compute_exports", "log", "s40", MZ_COMPUTE_EXPORTS_V0_10),
    Builtin("mz_introspection", "mz_dataflow_operators", "log", "s41", MZ_DATAFLOW_OPERATORS_V0_10),
    Builtin("mz_introspection", "mz_arrangement_sizes", "log", "s42", MZ_ARRANGEMENT_SIZES_V0_10),
    Builtin("mz_introspection", "mz_scheduling_elapsed", "log", "s43", MZ_SCHEDULING_ELAPSED_V0_10),
    Builtin("mz_introspection", "mz_compute_frontiers", "log", "s44", MZ_COMPUTE_FRONTIERS_V0_10),
    Builtin(
        "mz_introspection",
        "mz_peek_durations_histogram",
        "log",
        "s45",
        MZ_PEEK_DURATIONS_HISTOGRAM_V0_10,
    ),
)
