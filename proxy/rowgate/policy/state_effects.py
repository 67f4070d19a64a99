"""What each kind of request changes of the state Spark resolves and runs plans with, as data.

A remembered verdict of Spark's analysis (proxy/rowgate/pipeline/enforce/second_opinion.py) and a
remembered rewrite hold only while nothing they were computed from has changed: the
session's settings, variables, temp views and temp functions, its current catalog,
database and SQL path (*session* state), and the catalog every session shares: tables,
views, functions, databases, cached relations (*shared* state). Every request that may
change either is relayed inside a change of the state version Spark holds for it
(proxy/rowgate/pipeline/session/epoch.py); this table says which.

Values: `NONE` (reads, or changes only rows of existing tables: what a name means stays),
`SESSION` (the caller's session only) and `ALL` (the session and the shared catalog).
Anything not listed counts as `ALL`: a kind nobody classified moves every version.

Catalog API calls are also split by what Spark does with them *while planning*: it runs a
`catalog` relation when it builds the plan, for ExecutePlan and AnalyzePlan alike. Those in
`CATALOG_READS` only read names and metadata, so analysing a plan that holds them is
harmless and the plan is analysed like any other; the others (`catalog_changes`) change
state when they run, so they are accepted only as the whole plan on their own (there is
nothing of them to analyse: they return no table rows) and never inside an AnalyzePlan.

>>> scope_of("sql:set"), scope_of("sql:query"), scope_of("sql:drop"), scope_of("sql:something_new")
('session', 'none', 'all', 'all')
>>> sorted(catalog_changes())[:3]
['analyze_table', 'cache_table', 'clear_cache']
"""

from __future__ import annotations

from collections.abc import Iterable

NONE = "none"
SESSION = "session"
ALL = "all"

# Catalog calls that only read names and metadata: harmless to run while Spark analyses.
CATALOG_READS = frozenset(
    {
        "current_database",
        "current_catalog",
        "list_databases",
        "list_tables",
        "list_functions",
        "list_columns",
        "list_catalogs",
        "list_views",
        "list_partitions",
        "get_database",
        "get_table",
        "get_function",
        "get_table_properties",
        "get_create_table_string",
        "database_exists",
        "table_exists",
        "function_exists",
        "is_cached",
    }
)

_CATALOG = {
    **{op: NONE for op in CATALOG_READS},
    "set_current_database": SESSION,
    "set_current_catalog": SESSION,
    "drop_temp_view": SESSION,
    "drop_global_temp_view": ALL,  # global temp views are shared by every session
    "create_table": ALL,
    "create_external_table": ALL,
    "create_database": ALL,
    "drop_table": ALL,
    "drop_view": ALL,
    "drop_database": ALL,
    "truncate_table": ALL,  # its SQL twin is a data change, but the catalog call also uncaches
    "analyze_table": ALL,  # statistics steer the optimizer
    "recover_partitions": ALL,
    "cache_table": ALL,  # the cache is shared and changes the optimized plan
    "uncache_table": ALL,
    "clear_cache": ALL,
    "refresh_table": ALL,
    "refresh_by_path": ALL,
}

# SQL statements by the SQL rewriter's `statement_kind`.
_SQL = {
    "query": NONE,
    "show": NONE,
    "describe": NONE,
    "explain": NONE,
    "list_resources": NONE,
    "empty": NONE,
    # Rows change, names keep their meaning.
    "insert": NONE,
    "update": NONE,
    "delete": NONE,
    "merge": NONE,
    "truncate": NONE,
    "load": NONE,
    "use": SESSION,
    "set": SESSION,  # SET key=value and SET PATH
    "reset": SESSION,
    "set_variable": SESSION,
    "declare": SESSION,
    "add_resource": SESSION,  # jars and files of the session's class loader
    # Temp views are the session's, but the kind also covers persistent views and tables.
    "create_view": ALL,
    "create_table": ALL,
    "create_function": ALL,
    "drop": ALL,
    "alter": ALL,
    "cache": ALL,
    "uncache": ALL,
    "refresh": ALL,
    "analyze": ALL,
    "ddl": ALL,
}

_COMMANDS = {
    # Plans of their own inputs; rows only, or nothing the analysis of a later plan reads.
    "sql_command": NONE,  # judged by its statement (`sql:<kind>`)
    "checkpoint_command": NONE,  # a new cached relation id: no existing name changes
    "remove_cached_remote_relation_command": NONE,
    "merge_into_table_command": NONE,
    "streaming_query_command": NONE,
    "streaming_query_manager_command": NONE,
    "streaming_query_listener_bus_command": NONE,
    "get_resources_command": NONE,
    "create_resource_profile_command": NONE,
    # `saveAsTable` may create or replace the table; `insertInto` and path writes are rows
    # (command:write_operation is refined by the save method, see `write_scope`).
    "write_operation": ALL,
    "write_operation_v2": ALL,
    "write_stream_operation_start": ALL,  # `toTable` may create it; a memory sink makes a temp view
    "create_dataframe_view": ALL,  # local or global temp view
    "register_function": SESSION,  # a temporary function can shadow another of that name
    "register_table_function": SESSION,
    "register_data_source": SESSION,
}

# Config RPC operations (`ConfigRequest.Operation.op_type`).
_CONFIG = {
    "set": SESSION,
    "unset": SESSION,
    "get": NONE,
    "get_with_default": NONE,
    "get_option": NONE,
    "get_all": NONE,
    "is_modifiable": NONE,
}

# AnalyzePlan requests (`AnalyzePlanRequest.analyze`): Spark analyses without running the
# plan; persist/unpersist change the cache every session shares.
_ANALYZE = {
    "schema": NONE,
    "explain": NONE,
    "tree_string": NONE,
    "is_local": NONE,
    "is_streaming": NONE,
    "input_files": NONE,
    "spark_version": NONE,
    "ddl_parse": NONE,
    "same_semantics": NONE,
    "semantic_hash": NONE,
    "get_storage_level": NONE,
    "json_to_ddl": NONE,
    "persist": ALL,
    "unpersist": ALL,
}

SCOPES: dict[str, str] = {
    **{f"catalog:{k}": v for k, v in _CATALOG.items()},
    **{f"sql:{k}": v for k, v in _SQL.items()},
    **{f"command:{k}": v for k, v in _COMMANDS.items()},
    **{f"config:{k}": v for k, v in _CONFIG.items()},
    **{f"analyze:{k}": v for k, v in _ANALYZE.items()},
}

# Root operators of Spark's analysed plan of a statement (what Spark itself says the
# statement is, whatever the proxy's parser read): queries, row changes and listings keep
# every name's meaning; settings, variables, position and path are the session's; any
# other operator (DDL, caches, functions, views) counts as `ALL`.
SPARK_ROOTS = {
    **{
        root: NONE
        for root in (
            # row changes
            "InsertIntoHadoopFsRelationCommand", "InsertIntoHiveTable", "InsertIntoDataSourceCommand",
            "InsertIntoDataSourceDirCommand", "InsertIntoHiveDirCommand", "SaveIntoDataSourceCommand",
            "AppendData", "OverwriteByExpression", "OverwritePartitionsDynamic", "DeleteFromTable",
            "UpdateTable", "MergeIntoTable", "ReplaceData", "WriteDelta", "TruncateTableCommand",
            "TruncateTable", "LoadDataCommand",
            # listings and descriptions
            "DescribeTableCommand", "DescribeRelation", "DescribeColumnCommand", "DescribeColumn",
            "DescribeNamespace", "DescribeFunctionCommand", "DescribeQueryCommand", "ShowTables",
            "ShowTablesCommand", "ShowTablesExtended", "ShowViews", "ShowViewsCommand", "ShowNamespaces",
            "ShowNamespacesCommand", "ShowColumns", "ShowColumnsCommand", "ShowCreateTable",
            "ShowCreateTableCommand", "ShowTableProperties", "ShowTablePropertiesCommand", "ShowFunctions",
            "ShowFunctionsCommand", "ShowPartitions", "ShowPartitionsCommand", "ShowCatalogsCommand",
            "ShowCurrentNamespaceCommand", "ExplainCommand", "ListFilesCommand", "ListJarsCommand",
            "ListArchivesCommand",
        )
    },
    **{
        root: SESSION
        for root in (
            "SetCommand", "ResetCommand", "SetCatalogAndNamespace", "SetNamespaceCommand", "SetCatalogCommand",
            "SetPathCommand", "CreateVariable", "DropVariable", "SetVariable", "AddJarsCommand",
            "AddFilesCommand", "AddArchivesCommand",
        )
    },
}  # fmt: skip

_ORDER = {NONE: 0, SESSION: 1, ALL: 2}


def spark_root_scope(root: str, query_roots: frozenset[str] = frozenset()) -> str:
    """What a statement Spark analysed to `root` changes (`query_roots` read only).

    >>> spark_root_scope("SetPathCommand"), spark_root_scope("CreateViewCommand"), spark_root_scope("Project", frozenset({"Project"}))
    ('session', 'all', 'none')
    """
    if root in query_roots:
        return NONE
    return SPARK_ROOTS.get(root, ALL)


def scope_of(kind: str) -> str:
    """What `kind` changes; a kind not in the table changes everything."""
    return SCOPES.get(kind, ALL)


def widest(scopes: Iterable[str]) -> str:
    """The widest of several scopes (`NONE` for none).

    >>> widest([]), widest(["none", "session"]), widest(["session", "all", "none"])
    ('none', 'session', 'all')
    """
    out = NONE
    for scope in scopes:
        if _ORDER.get(scope, 2) > _ORDER[out]:
            out = scope if scope in _ORDER else ALL
    return out


def catalog_changes() -> frozenset[str]:
    """Catalog calls that change state when Spark runs them (as it does while planning)."""
    return frozenset(op for op, scope in _CATALOG.items() if scope != NONE)


def write_scope(save_method: str | None, v2_mode: str | None) -> str:
    """A DataFrame write: rows only when it appends or inserts into an existing table or a path.

    >>> write_scope("TABLE_SAVE_METHOD_INSERT_INTO", None), write_scope(None, "MODE_CREATE")
    ('none', 'all')
    >>> write_scope(None, None), write_scope(None, "MODE_APPEND")
    ('none', 'none')
    """
    if save_method is not None:
        return NONE if save_method == "TABLE_SAVE_METHOD_INSERT_INTO" else ALL
    if v2_mode is not None:
        return NONE if v2_mode in ("MODE_APPEND", "MODE_OVERWRITE", "MODE_OVERWRITE_PARTITIONS") else ALL
    return NONE  # a write by path: files, not names
