"""Reads by name (`spark.table`, `readStream.table`), by path, and through table functions.

While protection is in force, a `read.named_table` of an unprotected table is forwarded
with its name fully qualified (`pin_name`), and one of a session temp view as
``system.session.<view>`` where the server reads that form. A `read.named_table` of a protected table becomes, in the same `Relation` (same `common`,
so the plan id that DataFrame column references like ``df["col"]`` carry still names it):

    filter { input { filter { input { read { named_table { unparsed_identifier: "`cat`.`db`.`t`", <options> }
                                             is_streaming: <as sent> } }
                              condition { expression_string { expression: "<the caller's row filter>" } } } }
             condition { expression_string { expression: "SPARK_PARTITION_ID() >= 0" } } }

The outer filter is the optimizer barrier of the SQL form (sql/wrap.barrier_select): Spark
neither merges the caller's filters into the row filter nor pushes them below it, so no
caller predicate runs on a row the row filter did not keep. Leakproof caller conditions are
copied into the row filter (placement.py) so that pruning stays.

Checked against Spark 4.1 and 4.3: plan-id column references, self-joins, `isin`/scalar/exists
subqueries through `with_relations`, three-part column qualifiers (``db.t.col``), streaming
reads and filters with lookup subqueries all keep working. A `sql` relation
``SELECT * FROM (SELECT ... WHERE <filter>) AS t`` works too but loses the read options,
streaming, and qualifiers longer than the table name, so it is used only for persistent
views, which the SQL rewriter expands.

The row filter is taken from the SQL rewriter's own rewrite of ``SELECT * FROM <name>``, so
plans and SQL text get the same filter, and the proxy recognises its own output when a
client sends the rewritten plan again: a `filter` over a bare three-part `named_table` read
whose condition is exactly this caller's filter, under exactly the barrier filter, is left
alone (it cannot stack).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import sqlglot
from pyspark.sql.connect.proto import expressions_pb2, relations_pb2
from sqlglot import exp

from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.plan import placement
from rowgate.rewrite.plan.classify import HARMLESS_READ_OPTIONS, PATH_OPTIONS, TIME_TRAVEL_OPTIONS, json_paths
from rowgate.rewrite.plan.expressions import plain_function_name, string_literal
from rowgate.rewrite.plan.walker import Frame, Walk
from rowgate.rewrite.sql import PathRead, RewriteResult
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.names import Resolved, display, parse_multipart, resolve, temp_view_text
from rowgate.rewrite.sql.reads import SAFE_TABLE_FUNCTIONS
from rowgate.rewrite.sql.scope import Scope
from rowgate.rewrite.sql.wrap import BARRIER, marker_table, policy_select, render


def read(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    kind = rel.read.WhichOneof("read_type")
    if kind == "named_table":
        return named_table(walk, rel, frame)
    if kind == "data_source":
        data_source(walk, rel.read.data_source)
    return frame


def named_table(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    table = rel.read.named_table
    report_path_options(walk, table.options, "")
    resolved = resolve_name(walk, table.unparsed_identifier, "the table name of a read")
    if resolved is None:
        return frame
    if resolved.kind != "catalog":
        walk.found.add(temp_views_read=(resolved.view,))
        if resolved.kind == "temp_view" and walk.guarded and qualify_temp_views(walk):
            pin_text(walk, table, temp_view_text(resolved.parts[-1]))  # that temp view or nothing
        return frame
    assert resolved.name is not None
    if not walk.guarded:
        walk.found.add(tables_read=(resolved.name,))
        return frame
    select = select_star(resolved.parts)
    probe = placement.placed_probe(walk, rel, resolved.name, select, walk.probe(select))
    if not probe.filtered and not probe.views_expanded:
        if probe.paths_read or len(resolved.parts) > 1 or walk.ctx.lookup(resolved.name) is not None:
            walk.found.add(tables_read=(resolved.name,))
            walk.found.merge(probe, reads_only=True)  # `<format>.`<path>`` names are path reads
            if not probe.paths_read:
                pin_name(walk, table, resolved.name)
        elif qualify_temp_views(walk) and not walk.ctx.is_admin:
            # As in SQL (sql/reads.py): a one-part name nothing rowgate knows explains is a
            # temp view Spark made itself (a memory sink's query name) or nothing; forwarded
            # as a temp view, refused unless Spark lists it (pipeline/enforce/rules/unknown_relations.py).
            walk.found.add(unknown_relations=(resolved.parts[0],))
            pin_text(walk, table, temp_view_text(resolved.parts[0]))
        else:
            walk.found.add(tables_read=(resolved.name,))
            walk.found.merge(probe, reads_only=True)
        return frame
    walk.found.add(tables_read=(resolved.name,))
    if walk.strict:
        walk.check_tree(rel.read, frame.child("read"))  # the read is not walked after the replacement
    if probe.views_expanded:
        expand_view(walk, rel, resolved.name, probe)
    else:
        filter_read(walk, rel, resolved.name, probe)
    return None


def changes(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    """`spark.read.changes(t)` (Spark 4.3): the change feed of a table is its history.

    Hidden rows are in that history (inserted, updated, deleted), and a row filter over the
    feed cannot tell which versions of a row the caller was allowed to see, so the decision
    is the one time travel gets, in SQL and in plans: on a protected table the caller needs
    the FILTER USING (TRUE) grant, admins included (their reads are filtered like anyone's).
    With it, or on an unprotected table, the read is forwarded with its name pinned; a
    persistent view that reaches protected tables is refused (Spark has no change feed of
    a view, and the proxy would not know whose history it shows).
    """
    node = rel.relation_changes
    report_path_options(walk, node.options, "")
    resolved = resolve_name(walk, node.unparsed_identifier, "the table name of a change feed read")
    if resolved is None:
        return frame
    if resolved.kind != "catalog":
        walk.found.add(temp_views_read=(resolved.view,))
        return frame
    name = resolved.name
    assert name is not None
    walk.found.add(tables_read=(name,))
    if not walk.guarded:
        return frame
    policies = walk.ctx.policies_for(name)
    if policies and not decision.has_full_access(walk.ctx.caller, policies):
        raise refuse.denied(
            "change_feed_needs_full_access",
            f"the change feed (read.changes) of protected table {name} is time travel and requires a FILTER USING (TRUE) grant",
        )
    if not policies and reaches_protected(walk, name):
        raise refuse.invalid(
            "change_feed_of_view", f"the change feed of view {name}, which reads protected tables, is not supported"
        )
    if len(resolved.parts) > 1 or walk.ctx.lookup(name) is not None:
        if node.unparsed_identifier != name.sql():
            node.unparsed_identifier = name.sql()
            walk.found.changed = True
    return frame


def pin_name(walk: Walk, table: relations_pb2.Read.NamedTable, name: TableName) -> None:
    """Names pinned (issue #12): the resolved name, fully qualified, so a concurrent
    `USE`/`SET CATALOG` of the session cannot make Spark read another table."""
    pin_text(walk, table, name.sql())


def pin_text(walk: Walk, table: relations_pb2.Read.NamedTable, pinned: str) -> None:
    if table.unparsed_identifier != pinned:
        table.unparsed_identifier = pinned
        walk.found.changed = True


def qualify_temp_views(walk: Walk) -> bool:
    """Whether temp views go out as `system.session.<view>` (the server reads that form)."""
    return bool(getattr(walk.ctx, "qualify_temp_views", True))


def filter_read(walk: Walk, rel: relations_pb2.Relation, name: TableName, probe: RewriteResult) -> None:
    """Replace a protected read by the filtering form (module docstring), keeping `common`."""
    check_options(walk, name, rel.read.named_table.options)
    inner = relations_pb2.Relation()
    inner.read.CopyFrom(rel.read)
    inner.read.named_table.unparsed_identifier = name.sql()
    policy = relations_pb2.Relation()
    policy.filter.input.CopyFrom(inner)
    policy.filter.condition.expression_string.expression = filter_text(probe.sql)
    rel.filter.input.CopyFrom(policy)  # replaces the `read` member of the rel_type oneof
    rel.filter.condition.expression_string.expression = BARRIER
    walk.found.merge(probe, reads_only=True)
    walk.found.changed = True


def expand_view(walk: Walk, rel: relations_pb2.Relation, name: TableName, probe: RewriteResult) -> None:
    """A persistent view that reaches protected data becomes the SQL rewriter's expansion."""
    if rel.read.is_streaming:
        raise refuse.invalid(
            "streaming_read_of_view", f"a streaming read of view {name}, which reads protected tables, is not supported"
        )
    if rel.read.named_table.options:
        raise refuse.invalid(
            "read_options_on_view", f"read options on view {name}, which reads protected tables, are not supported"
        )
    rel.sql.query = probe.sql  # replaces the `read` member; `common` stays
    walk.found.merge(probe, reads_only=True)
    walk.found.changed = True


def filtered(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    """A `filter` relation: the proxy's own filtered read is recognised, not filtered again.

    Only the exact shape `filter_read` produces counts, with the filter this caller gets
    now; anything else is walked like any filter (its read is then filtered inside).
    """
    if not walk.guarded:
        return frame
    placement.note(walk, rel)  # the DataFrame's leakproof conditions, for the read below
    if not _expression_string(rel.filter.condition) or rel.filter.condition.expression_string.expression != BARRIER:
        return frame
    policy = rel.filter.input
    if policy.WhichOneof("rel_type") != "filter" or policy.HasField("common"):
        return frame
    node = policy.filter
    inner = node.input
    if (
        inner.WhichOneof("rel_type") != "read"
        or inner.HasField("common")
        or inner.read.WhichOneof("read_type") != "named_table"
        or not _expression_string(node.condition)
    ):
        return frame
    parts = parse_multipart(inner.read.named_table.unparsed_identifier)
    if parts is None or len(parts) != 3:
        return frame
    resolved = resolve(parts, top_scope(walk), walk.ctx.temp_view_exists, ctes=False)
    if resolved.kind != "catalog" or resolved.name is None:
        return frame
    probe = walk.probe(select_star(parts))
    if not probe.filtered or probe.views_expanded:
        return frame
    if node.condition.expression_string.expression != filter_text(probe.sql):
        return frame
    if walk.strict:
        walk.check_tree(rel, frame)
    check_options(walk, resolved.name, inner.read.named_table.options)
    report_path_options(walk, inner.read.named_table.options, "")
    walk.found.merge(probe, reads_only=True)
    return None


def _expression_string(condition: expressions_pb2.Expression) -> bool:
    return condition.WhichOneof("expr_type") == "expression_string" and not condition.HasField("common")


def check_options(walk: Walk, name: TableName, options: Mapping[str, str]) -> None:
    """Read options on a protected table: time travel needs full access, unknown ones are refused."""
    if not options:
        return
    if decision.has_full_access(walk.ctx.caller, walk.ctx.policies_for(name)):
        return
    for key in sorted(options):
        folded = key.lower()
        if folded in TIME_TRAVEL_OPTIONS:
            raise refuse.denied(
                "time_travel_needs_full_access",
                f"time travel (read option {key}) on protected table {name} requires a FILTER USING (TRUE) grant",
            )
        if folded not in PATH_OPTIONS and folded not in HARMLESS_READ_OPTIONS:
            raise refuse.invalid(
                "unsupported_read_option", f"the read option {key} on protected table {name} is not supported by the proxy"
            )


def data_source(walk: Walk, source: relations_pb2.Read.DataSource) -> None:
    """Reports the paths; a "path" that names a protected table is refused.

    Some formats load tables by name (`spark.read.format("iceberg").load("db.t")`), which
    would read a protected table around `spark.table`.
    """
    fmt = source.format.lower() if source.HasField("format") else ""
    walk.found.add(data_sources=(fmt,))
    for path in source.paths:
        walk.found.add(paths_read=(PathRead(fmt, path),))
    report_path_options(walk, source.options, fmt)
    if not walk.guarded:
        return
    for path in [*source.paths, *_option_paths(source.options)]:
        name = table_like(walk, path)
        if name is not None and reaches_protected(walk, name):
            raise refuse.invalid(
                "unsupported_data_source",
                f"reading protected table {name} through the {fmt or 'default'} data source is not supported; use spark.table()",
            )


def report_path_options(walk: Walk, options: Mapping[str, str], fmt: str) -> None:
    """`path`/`paths` options point a read at files, on a data source or a table read alike."""
    for path in _option_paths(options):
        walk.found.add(paths_read=(PathRead(fmt, path),))


def _option_paths(options: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for key in sorted(options):
        folded = key.lower()
        if folded == "path":
            out.append(options[key])
        elif folded == "paths":
            out.extend(json_paths(options[key]))
    return out


def table_function(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    """Known generators are fine; others are reported and refused over protected names.

    Like the SQL rewriter: a string argument that names a protected relation (e.g.
    `table_changes('orders', 0)`) is refused. An argument that is not a literal cannot be
    checked, so it is refused too while protection is in force.
    """
    call = rel.unresolved_table_valued_function
    name = plain_function_name(call.function_name)
    if name in SAFE_TABLE_FUNCTIONS:
        return frame
    walk.found.add(table_functions=(name,))
    if not walk.guarded:
        return frame
    for arg in call.arguments:
        if arg.WhichOneof("expr_type") == "named_argument_expression":
            arg = arg.named_argument_expression.value
        if arg.WhichOneof("expr_type") != "literal":
            walk.unanalysable(f"the table function {name}() with an argument that is not a literal")
            continue
        value = string_literal(arg)
        parts = parse_multipart(value) if value is not None else None
        if parts is None:
            continue
        resolved = resolve(parts, top_scope(walk), walk.ctx.temp_view_exists, ctes=False)
        if resolved.kind == "catalog" and resolved.name is not None and reaches_protected(walk, resolved.name):
            raise refuse.invalid(
                "table_function_over_protected",
                f"the table function {name}() over protected relation {resolved.name} is not supported",
            )
    return frame


def cached_relation(walk: Walk, msg: relations_pb2.CachedRemoteRelation, frame: Frame) -> Frame | None:
    walk.found.add(cached_relations_used=(msg.relation_id,))
    return frame


# -- helpers shared with commands.py ------------------------------------------------------


def top_scope(walk: Walk) -> Scope:
    return Scope.top(walk.ctx.current_catalog, walk.ctx.current_schema, qualify_temp_views(walk))


def resolve_name(walk: Walk, text: str, what: str) -> Resolved | None:
    """A DataFrame API name (Spark's multipart identifier) resolved for this session."""
    parts = parse_multipart(text)
    if parts is None:
        walk.unanalysable(f"{what} {text!r}")
        return None
    resolved = resolve(parts, top_scope(walk), walk.ctx.temp_view_exists, ctes=False)
    if resolved.kind == "unresolved":
        walk.unanalysable(f"{what} {display(parts)} ({resolved.reason})")
        return None
    return resolved


def table_like(walk: Walk, text: str) -> TableName | None:
    """The catalog table a data source "path" names, if it reads as a table name at all."""
    if "/" in text or ":" in text or "\\" in text:
        return None
    parts = parse_multipart(text)
    if parts is None:
        return None
    resolved = resolve(parts, top_scope(walk), walk.ctx.temp_view_exists, ctes=False)
    return resolved.name if resolved.kind == "catalog" else None


def reaches_protected(walk: Walk, name: TableName) -> bool:
    probe = walk.probe(select_star((name.catalog, name.schema, name.table)))
    return probe.filtered or bool(probe.views_expanded)


def select_star(parts: tuple[str, ...]) -> str:
    return "SELECT * FROM " + ".".join("`" + p.replace("`", "``") + "`" for p in parts)


@lru_cache(maxsize=1024)
def filter_text(probe_sql: str) -> str:
    """The row filter inside the SQL rewriter's ``SELECT * FROM (SELECT * FROM (SELECT * FROM t
    WHERE f) WHERE <barrier>) AS t``."""
    tree = sqlglot.parse_one(probe_sql, read="spark")
    for sub in tree.find_all(exp.Subquery):
        if marker_table(sub) is not None:
            return render(policy_select(sub.this).args["where"].this)
    raise refuse.invalid("row_filter_unplaced", "internal error: the row filter of a protected read could not be placed")
