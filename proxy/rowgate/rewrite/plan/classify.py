"""Every relation, command, expression and catalog type the proxy knows, and what it does with it.

Kept as data so that a review can read the whole policy in one screen, and so that a type
missing from a table fails closed: a `rel_type`/`command_type`/`expr_type` that is not
listed (a newer client, or a protobuf field this pyspark does not know) is treated like
`extension`, refused for non-admins while any table is protected.

Values:
- `WALK`: carries no data access of its own; its message fields are walked like any other;
- `ADMIN`: refused for non-admins while protection is in force (opaque, or reaches data in
  ways the proxy does not analyse); walked for admins;
- any other string names a handler (`rewrite.HANDLERS`); the walk continues into the
  message's fields unless the handler says otherwise.
"""

from __future__ import annotations

WALK = "walk"
ADMIN = "admin"

RELATIONS: dict[str, str] = {
    "read": "read",
    "sql": "sql",
    "catalog": "catalog",
    "unresolved_table_valued_function": "table_function",
    # Client data or ids the pipeline checks (cached_remote_relation is reported by message type).
    "local_relation": WALK,
    "cached_local_relation": WALK,
    "chunked_cached_local_relation": WALK,
    "cached_remote_relation": WALK,
    "range": WALK,
    # Shipped code: reported by message type (`USER_CODE`), the pipeline decides.
    "common_inline_user_defined_table_function": WALK,
    "common_inline_user_defined_data_source": WALK,
    "map_partitions": WALK,
    "group_map": WALK,
    "co_group_map": WALK,
    "apply_in_pandas_with_state": WALK,
    # Operators over their inputs.
    "project": WALK,
    "filter": "filter",  # also recognises the proxy's own filtered reads (reads.py)
    "join": WALK,
    "set_op": WALK,
    "sort": WALK,
    "limit": WALK,
    "aggregate": WALK,
    "sample": WALK,
    "offset": WALK,
    "deduplicate": WALK,
    "subquery_alias": WALK,
    "repartition": WALK,
    "to_df": WALK,
    "with_columns_renamed": WALK,
    "show_string": WALK,
    "drop": WALK,
    "tail": WALK,
    "with_columns": WALK,
    "hint": WALK,
    "unpivot": WALK,
    "to_schema": WALK,
    "repartition_by_expression": WALK,
    "collect_metrics": WALK,
    "parse": WALK,
    "with_watermark": WALK,
    "html_string": WALK,
    "as_of_join": WALK,
    "with_relations": WALK,
    "transpose": WALK,
    "lateral_join": WALK,
    "fill_na": WALK,
    "drop_na": WALK,
    "replace": WALK,
    "summary": WALK,
    "crosstab": WALK,
    "describe": WALK,
    "cov": WALK,
    "corr": WALK,
    "approx_quantile": WALK,
    "freq_items": WALK,
    "sample_by": WALK,
    "unknown": WALK,  # an empty marker type Spark itself rejects
    "ml_relation": ADMIN,
    "extension": ADMIN,
}

COMMANDS: dict[str, str] = {
    "sql_command": "sql_command",
    "create_dataframe_view": "create_view",
    "write_operation": "write",
    "write_operation_v2": "write_v2",
    "write_stream_operation_start": "write_stream",
    "merge_into_table_command": "merge",
    "checkpoint_command": "checkpoint",
    "register_function": "register",
    "register_table_function": "register",
    "register_data_source": "register",
    "remove_cached_remote_relation_command": WALK,  # the id is reported by message type
    "streaming_query_command": WALK,
    "streaming_query_manager_command": WALK,
    "streaming_query_listener_bus_command": WALK,
    "get_resources_command": WALK,
    "create_resource_profile_command": WALK,
    "ml_command": ADMIN,
    "pipeline_command": ADMIN,
    "execute_external_command": ADMIN,
    "extension": ADMIN,
}

EXPRESSIONS: dict[str, str] = {
    "expression_string": "expression_string",
    "unresolved_function": "function",
    "call_function": "function",
    "literal": WALK,
    "unresolved_attribute": WALK,
    "unresolved_star": WALK,
    "alias": WALK,
    "cast": WALK,
    "unresolved_regex": WALK,
    "sort_order": WALK,
    "lambda_function": WALK,
    "window": WALK,
    "unresolved_extract_value": WALK,
    "update_fields": WALK,
    "unresolved_named_lambda_variable": WALK,
    "common_inline_user_defined_function": WALK,
    "named_argument_expression": WALK,
    "merge_action": WALK,
    "typed_aggregate_expression": WALK,
    "subquery_expression": WALK,  # its plan_id points into with_relations, which is walked
    "direct_shuffle_partition_id": WALK,
    "extension": ADMIN,
}

# Catalog API ops, reported with their string arguments (`CatalogOp`). The category is for
# readers and the pipeline; none of them reads table rows.
CATALOG_OPS: dict[str, str] = {
    "current_database": "session",
    "set_current_database": "session",
    "current_catalog": "session",
    "set_current_catalog": "session",
    "list_databases": "metadata",
    "list_tables": "metadata",
    "list_functions": "metadata",
    "list_columns": "metadata",
    "list_catalogs": "metadata",
    "get_database": "metadata",
    "get_table": "metadata",
    "get_function": "metadata",
    "database_exists": "metadata",
    "table_exists": "metadata",
    "function_exists": "metadata",
    "is_cached": "metadata",
    "create_external_table": "create",
    "create_table": "create",
    "drop_temp_view": "drop",
    "drop_global_temp_view": "drop",
    "recover_partitions": "alter",
    "cache_table": "cache",
    "uncache_table": "cache",
    "clear_cache": "cache",
    "refresh_table": "cache",
    "refresh_by_path": "cache",
}

# Messages that carry shipped code, by protobuf full name -> `UserCode.kind`.
USER_CODE: dict[str, str] = {
    "spark.connect.PythonUDF": "python_udf",
    "spark.connect.JavaUDF": "java_udf",
    "spark.connect.ScalarScalaUDF": "scalar_scala_udf",
    "spark.connect.PythonUDTF": "python_udtf",
    "spark.connect.PythonDataSource": "python_data_source",
}

# Messages that name the code they wrap: full name -> the field holding the name.
CODE_NAMES: dict[str, str] = {
    "spark.connect.CommonInlineUserDefinedFunction": "function_name",
    "spark.connect.CommonInlineUserDefinedTableFunction": "function_name",
    "spark.connect.CommonInlineUserDefinedDataSource": "name",
}

# Subtrees that can hold neither a relation, an expression nor code: not walked (a large
# `isin([...])` literal list or a wide schema would otherwise cost a visit per element).
PRUNE: frozenset[str] = frozenset({"spark.connect.DataType", "spark.connect.Expression.Literal"})

# Read options that select other versions or change feeds of a table: on a protected
# table they need the FILTER USING (TRUE) grant (Delta, Iceberg, Hudi spellings; Spark
# compares option keys case-insensitively).
TIME_TRAVEL_OPTIONS: frozenset[str] = frozenset(
    {
        "versionasof",
        "timestampasof",
        "readchangefeed",
        "readchangedata",
        "startingversion",
        "startingtimestamp",
        "endingversion",
        "endingtimestamp",
        "snapshot-id",
        "as-of-timestamp",
        "branch",
        "tag",
        "start-snapshot-id",
        "end-snapshot-id",
        "start-timestamp",
        "end-timestamp",
        "as.of.instant",
    }
)

# Read options that point a read at files: reported as path reads wherever they appear.
PATH_OPTIONS: frozenset[str] = frozenset({"path", "paths"})

# Read options a protected table read may carry without the full-access grant: they only
# pace or harden a (streaming) file scan of the table's own files. Any other option on a
# protected read is refused, since the proxy cannot tell what it selects.
HARMLESS_READ_OPTIONS: frozenset[str] = frozenset(
    {
        "maxfilespertrigger",
        "maxbytespertrigger",
        "maxfileage",
        "latestfirst",
        "ignorecorruptfiles",
        "ignoremissingfiles",
    }
)
