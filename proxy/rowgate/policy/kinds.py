"""Every kind of request the proxy knows, as data: what it reads, writes, which locations it
names, and whether a non-admin may use it while any table is protected.

This is the allow list of issue 12, property 5, in the manner of Kyuubi's command specs: a
kind missing here is refused for non-admins (by the plan walker and by the rule
proxy/rowgate/pipeline/enforce/rules/allowed_kinds.py), so adding a kind is adding a line of data,
and tests/unit/pipeline/test_kinds.py fails when Spark's protocol or the SQL rewriter grows a
kind nobody classified.

Kinds are named like the rewriters' `constructs`: ``relation:<Relation.rel_type member>``,
``command:<Command.command_type member>``, ``expression:<Expression.expr_type member>``,
``catalog:<Catalog.cat_type member>`` and ``sql:<RewriteResult.statement_kind>``.

For protobuf kinds `reads`, `writes` and `locations` are field paths from the `Relation`,
`Command`, `Expression` or `Catalog` message (``write_operation.options[path]`` is the
`path` key of a map, compared case-insensitively); the test checks that each exists. The
walker reports the value of every `locations` field as a location the request names
(proxy/rowgate/rewrite/plan/classify.py), so a new location-bearing field is one entry here.
For SQL kinds they name the clauses, for readers.

It lives in policy/ because "who may do what" is a policy decision; the plan walker and the
rules read it from below.

>>> SPECS["command:write_operation"].locations
('write_operation.path', 'write_operation.options[path]', 'write_operation.options[paths]')
>>> SPECS["relation:extension"].non_admins
False
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindSpec:
    """What one kind does. `non_admins`: allowed for non-admins while a table is protected.

    `admins`: allowed for admins while a table is protected. Admins' reads are filtered like
    anyone's, so an admin-only kind must still be one the plan walker sees through (every
    relation inside it is walked and filtered, e.g. an ML fit's dataset); a kind whose
    content nobody can analyse (an opaque `Any` payload, SQL text run outside the proxy's
    rewrite, a command run outside Spark's analyzer) is refused for everyone then.
    """

    kind: str
    non_admins: bool
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()
    why: str = ""  # for refused kinds: the reason given to the caller
    admins: bool = True


def _specs(prefix: str, entries: dict[str, dict]) -> dict[str, KindSpec]:
    out = {}
    for name, spec in entries.items():
        values = dict(spec)
        allowed = values.pop("ok", True)
        out[f"{prefix}:{name}"] = KindSpec(f"{prefix}:{name}", allowed, **values)
    return out


def _op(*inputs: str) -> dict:
    """An operator over its input relations (the walker filters reads inside them)."""
    return {"reads": inputs}


def _unary(kind: str) -> tuple[str, dict]:
    return kind, _op(f"{kind}.input")


_OPAQUE = "it is opaque to the proxy, which cannot tell what it reads"
_ANY = "its content is an opaque protobuf Any for a server plugin; the proxy cannot tell what it reads"
_PIPELINE = (
    "a declarative pipeline runs SQL text and flows Spark keeps defined on the server, which the proxy "
    "neither rewrites nor sees when the run starts"
)

RELATIONS = _specs(
    "relation",
    {
        "read": {
            "reads": ("read.named_table.unparsed_identifier", "read.data_source.paths"),
            "locations": (
                "read.data_source.paths",
                "read.data_source.options[path]",
                "read.data_source.options[paths]",
                "read.named_table.options[path]",
                "read.named_table.options[paths]",
            ),
        },
        "sql": {"reads": ("sql.query",)},
        "catalog": {},  # see CATALOG below
        "unresolved_table_valued_function": {"reads": ("unresolved_table_valued_function.function_name",)},
        "local_relation": {},
        "cached_local_relation": {},
        "chunked_cached_local_relation": {},
        "cached_remote_relation": {"reads": ("cached_remote_relation.relation_id",)},  # the caller's own, checked
        "range": {},
        "common_inline_user_defined_table_function": {},  # shipped code: rules/shipped_code.py
        "common_inline_user_defined_data_source": {},
        "map_partitions": _op("map_partitions.input"),
        "group_map": _op("group_map.input", "group_map.initial_input"),
        "co_group_map": _op("co_group_map.input", "co_group_map.other"),
        "apply_in_pandas_with_state": _op("apply_in_pandas_with_state.input"),
        "join": _op("join.left", "join.right"),
        "as_of_join": _op("as_of_join.left", "as_of_join.right"),
        "lateral_join": _op("lateral_join.left", "lateral_join.right"),
        "set_op": _op("set_op.left_input", "set_op.right_input"),
        # Spark 4.3: both inputs are walked like a join's, so a protected read on either
        # side is filtered before the rows are ranked (nearestByJoin) or paired by position (zip).
        "nearest_by_join": _op("nearest_by_join.left", "nearest_by_join.right"),
        "zip": _op("zip.left", "zip.right"),
        # Spark 4.3 `spark.read.changes(t)`: the change feed is the table's history, so on a
        # protected table it follows the time-travel rule (rewrite/plan/reads.py: `changes`).
        "relation_changes": {"reads": ("relation_changes.unparsed_identifier",)},
        "with_relations": _op("with_relations.root", "with_relations.references"),
        **dict(
            _unary(kind)
            for kind in (
                "project",
                "filter",
                "sort",
                "limit",
                "aggregate",
                "sample",
                "offset",
                "deduplicate",
                "subquery_alias",
                "repartition",
                "to_df",
                "with_columns_renamed",
                "show_string",
                "drop",
                "tail",
                "with_columns",
                "hint",
                "unpivot",
                "to_schema",
                "repartition_by_expression",
                "collect_metrics",
                "parse",
                "with_watermark",
                "html_string",
                "transpose",
                "fill_na",
                "drop_na",
                "replace",
                "summary",
                "crosstab",
                "describe",
                "cov",
                "corr",
                "approx_quantile",
                "freq_items",
                "sample_by",
            )
        ),  # fmt: skip
        "unknown": {},  # an empty marker type Spark itself rejects
        # Admins: every relation in it (transform input, summary dataset) is walked and filtered.
        "ml_relation": {"ok": False, "reads": ("ml_relation.model_summary_dataset",), "why": _OPAQUE},
        "extension": {"ok": False, "admins": False, "why": _ANY},
    },
)

COMMANDS = _specs(
    "command",
    {
        "sql_command": {"reads": ("sql_command.input", "sql_command.sql")},
        "create_dataframe_view": {"reads": ("create_dataframe_view.input",), "writes": ("create_dataframe_view.name",)},
        "write_operation": {
            "reads": ("write_operation.input",),
            "writes": ("write_operation.table.table_name", "write_operation.path"),
            "locations": ("write_operation.path", "write_operation.options[path]", "write_operation.options[paths]"),
        },
        "write_operation_v2": {
            "reads": ("write_operation_v2.input",),
            "writes": ("write_operation_v2.table_name",),
            "locations": ("write_operation_v2.options[path]", "write_operation_v2.table_properties[location]"),
        },
        "write_stream_operation_start": {
            "reads": ("write_stream_operation_start.input",),
            "writes": ("write_stream_operation_start.table_name", "write_stream_operation_start.path"),
            "locations": (
                "write_stream_operation_start.path",
                "write_stream_operation_start.options[path]",
                "write_stream_operation_start.options[checkpointLocation]",
            ),
        },
        "merge_into_table_command": {
            "reads": ("merge_into_table_command.source_table_plan",),
            "writes": ("merge_into_table_command.target_table_name",),
        },
        "checkpoint_command": {"reads": ("checkpoint_command.relation",)},
        "register_function": {},  # shipped code: rules/shipped_code.py
        "register_table_function": {},
        "register_data_source": {},
        "remove_cached_remote_relation_command": {},
        "streaming_query_command": {},
        "streaming_query_manager_command": {},
        "streaming_query_listener_bus_command": {},
        "get_resources_command": {},
        "create_resource_profile_command": {},
        # Admins: a fit's or evaluation's dataset and a method's input are relations, walked and filtered.
        "ml_command": {"ok": False, "why": _OPAQUE},
        "pipeline_command": {"ok": False, "admins": False, "why": _PIPELINE},
        "execute_external_command": {"ok": False, "admins": False, "why": "it runs a command outside Spark's analyzer"},
        "extension": {"ok": False, "admins": False, "why": _ANY},
    },
)

EXPRESSIONS = _specs(
    "expression",
    {
        "expression_string": {"reads": ("expression_string.expression",)},
        "unresolved_function": {},
        "call_function": {},
        "literal": {},
        "unresolved_attribute": {},
        "unresolved_star": {},
        "alias": {},
        "cast": {},
        "unresolved_regex": {},
        "sort_order": {},
        "lambda_function": {},
        "window": {},
        "unresolved_extract_value": {},
        "update_fields": {},
        "unresolved_named_lambda_variable": {},
        "common_inline_user_defined_function": {},  # shipped code: rules/shipped_code.py
        "named_argument_expression": {},
        "merge_action": {},
        "typed_aggregate_expression": {},
        "subquery_expression": {"reads": ("subquery_expression.plan_id",)},  # a with_relations reference
        "direct_shuffle_partition_id": {},
        "extension": {"ok": False, "admins": False, "why": _ANY},
    },
)

# Catalog API calls (`Relation.catalog`); none returns table rows. Those Spark 4.3 added are
# judged as their SQL twin (rewrite/plan/catalog_statements.py): dropTable/dropView/
# dropDatabase/truncateTable as DROP/TRUNCATE (protected lifecycle, full-access writes),
# analyzeTable, listPartitions, getTableProperties and getCreateTableString of a protected
# table as statistics of it (partition values, row counts and properties describe hidden rows).
CATALOG = _specs(
    "catalog",
    {
        "current_database": {},
        "set_current_database": {},
        "current_catalog": {},
        "set_current_catalog": {},
        "list_databases": {},
        "list_tables": {},
        "list_functions": {},
        "list_columns": {},
        "list_catalogs": {},
        "get_database": {},
        "get_table": {},
        "get_function": {},
        "database_exists": {},
        "table_exists": {},
        "function_exists": {},
        "is_cached": {},
        "create_external_table": {
            "writes": ("create_external_table.table_name",),
            "locations": ("create_external_table.path", "create_external_table.options[path]"),
        },
        "create_table": {
            "writes": ("create_table.table_name",),
            "locations": ("create_table.path", "create_table.options[path]"),
        },
        "drop_temp_view": {},
        "drop_global_temp_view": {},
        "recover_partitions": {"writes": ("recover_partitions.table_name",)},
        "cache_table": {"reads": ("cache_table.table_name",)},
        "uncache_table": {},
        "clear_cache": {},
        "refresh_table": {},
        "refresh_by_path": {"locations": ("refresh_by_path.path",)},
        "list_views": {},
        "create_database": {"locations": ("create_database.properties[location]",)},
        "drop_database": {"writes": ("drop_database.db_name",)},
        "drop_table": {"writes": ("drop_table.table_name",)},
        "drop_view": {"writes": ("drop_view.view_name",)},
        "truncate_table": {"writes": ("truncate_table.table_name",)},
        "analyze_table": {"reads": ("analyze_table.table_name",)},
        "list_partitions": {"reads": ("list_partitions.table_name",)},
        "get_table_properties": {"reads": ("get_table_properties.table_name",)},
        "get_create_table_string": {"reads": ("get_create_table_string.table_name",)},
    },
)

_ADMIN_ONLY = "it is reserved to admins while row access policies are in force"

# SQL statements, by the kind the SQL rewriter reports (`RewriteResult.statement_kind`).
# Reads are always filtered by the rewriter, writes to protected tables need the full-access
# grant there; what is judged here is the kind itself.
SQL = _specs(
    "sql",
    {
        "query": {"reads": ("FROM", "JOIN", "subqueries", "<format>.`<path>`"), "locations": ("<format>.`<path>`",)},
        "insert": {
            "reads": ("the query",),
            "writes": ("INTO/OVERWRITE table",),
            "locations": ("INSERT OVERWRITE DIRECTORY", "INTO <format>.`<path>`"),
        },
        "update": {"reads": ("WHERE", "SET"), "writes": ("the target",)},
        "delete": {"reads": ("WHERE",), "writes": ("the target",)},
        "merge": {"reads": ("USING",), "writes": ("INTO",)},
        "truncate": {"writes": ("the table",)},
        "load": {"writes": ("INTO TABLE",), "locations": ("INPATH",)},
        "create_table": {
            "reads": ("AS <query>", "LIKE", "CLONE"),
            "writes": ("the new table",),
            "locations": ("LOCATION", "OPTIONS (path)"),
        },
        "create_view": {"reads": ("AS <query> (stored, expanded per reader)",), "locations": ("OPTIONS (path)",)},
        "create_function": {"ok": False, "why": "a function can stand in for one a row filter calls"},
        "drop": {"writes": ("the dropped object",)},
        "alter": {
            "writes": ("the altered table or view",),
            "locations": ("SET LOCATION", "ADD PARTITION ... LOCATION", "PARTITION ... SET LOCATION"),
        },
        "cache": {"reads": ("CACHE TABLE t AS <query>",)},
        "uncache": {},
        "describe": {"reads": ("DESCRIBE <query>",)},
        "analyze": {"reads": ("statistics of the table (full-access grant needed)",)},
        "refresh": {"locations": ("REFRESH '<path>'",)},
        "ddl": {"locations": ("CREATE DATABASE ... LOCATION",)},  # COMMENT ON, CREATE DATABASE/SCHEMA
        "use": {},
        "set": {},  # which keys: rules/guarded_settings.py
        "reset": {},
        "set_variable": {"reads": ("the assigned query",)},
        "declare": {"reads": ("DEFAULT <expression>",)},
        "explain": {"reads": ("the explained statement",)},
        "show": {},  # only forms that list names; others are refused by the rewriter
        "empty": {},
        "row_access_policy": {"ok": False, "why": "the proxy's own policy DDL is never forwarded to Spark"},
        "add_resource": {"ok": False, "why": _ADMIN_ONLY},
        "list_resources": {},  # LIST FILE/JAR/ARCHIVE: names of what the session added
        "command": {"ok": False, "why": _OPAQUE},
        "unparsed": {"ok": False, "why": "the proxy cannot parse it"},
        "multiple": {"ok": False, "why": "several statements in one text cannot be analysed"},
        "unknown": {"ok": False, "why": _OPAQUE},
    },
)

SPECS: dict[str, KindSpec] = {**RELATIONS, **COMMANDS, **EXPRESSIONS, **CATALOG, **SQL}


def spec_of(kind: str) -> KindSpec | None:
    """The spec of a kind (``relation:read``, ``sql:insert``, ...); None when unclassified."""
    return SPECS.get(kind)


def refused_for_admins(kind: str) -> str | None:
    """Why even an admin may not use `kind` while a table is protected; None when allowed."""
    spec = SPECS.get(kind)
    if spec is None:
        return "it is not on the proxy's list of known kinds"
    return None if spec.admins else spec.why


def refusal_of(kind: str) -> str | None:
    """Why a non-admin may not use `kind` while a table is protected; None when allowed."""
    spec = SPECS.get(kind)
    if spec is None:
        return "it is not on the proxy's list of known kinds"
    if spec.non_admins:
        return None
    return spec.why or _ADMIN_ONLY
