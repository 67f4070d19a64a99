"""Persistent views whose text reaches a protected table are expanded by the proxy.

Spark expands a view itself, reading the base tables of its text without any filter, so a
view that (transitively) reads a protected table is replaced by its own text, rewritten
recursively:

    (<view text, rewritten; names qualified in the view's catalog and database>) AS <alias>

The view text is resolved like Spark resolves it: in the catalog and database the view was
created in, without the session's temp views and without the outer query's CTEs. Every
relation name inside is fully qualified before the text is inlined, so the inlined text
means the same in the caller's session. Views that reach no protected table (and use no
caller identity function) are left as they are.

This module is the expand-views pass's own pieces: the view's text parsed and checked
(`view_query`), its namespace (`view_scope`), the nesting limit (`enter_view`) and the
placement of the rewritten text (`place_view`); the recursive rewrite of the text is the
reads walk (reads.py), run again on it.

>>> enter_view((), TableName("spark_catalog", "default", "v"))
(TableName(catalog='spark_catalog', schema='default', table='v'),)
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError

from rowgate.catalog.model import RelationInfo
from rowgate.policy.model import TableName
from rowgate.refusal import Refusal
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.canonical import parse_like_spark
from rowgate.rewrite.sql.scope import Scope
from rowgate.rewrite.sql.shape import check_shape, normalize
from rowgate.rewrite.sql.wrap import derived_table, unqualify_columns

MAX_VIEW_DEPTH = 8


@lru_cache(maxsize=2048)
def _parsed_view_text(text: str) -> exp.Expr | None:
    try:
        statements = parse_like_spark(text)
    except (SqlglotError, RecursionError):
        return None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query) or statements[0].find(exp.Command):
        return None
    return statements[0]


def view_query(info: RelationInfo) -> exp.Query:
    """A fresh copy of the view's parsed text; refuses when it cannot be analysed."""
    if not info.view_sql:
        raise refuse.invalid("view_without_text", f"view {info.name} has no text the proxy can analyse")
    if "${" in info.view_sql:
        raise refuse.invalid(
            "view_variable_substitution", f"view {info.name} contains a ${{...}} variable and cannot be analysed"
        )
    parsed = _parsed_view_text(info.view_sql)
    if parsed is None:
        raise refuse.invalid("unanalysable_view", f"view {info.name} cannot be analysed by the proxy")
    parsed = parsed.copy()
    normalize(parsed)
    try:
        check_shape(parsed)
    except Refusal as e:
        raise refuse.invalid(e.rule, f"view {info.name}: {e}") from None  # the shape check that refused
    return parsed  # type: ignore[return-value]


def view_scope(info: RelationInfo) -> Scope:
    return Scope.view_body(info.view_catalog or info.name.catalog, info.view_schema or info.name.schema)


def enter_view(stack: tuple[TableName, ...], name: TableName) -> tuple[TableName, ...]:
    """The view stack one level deeper; refuses cycles and nesting deeper than 8."""
    if name in stack:
        chain = " -> ".join(str(n) for n in (*stack[stack.index(name) :], name))
        raise refuse.invalid("view_cycle", f"view cycle: {chain}")
    if len(stack) >= MAX_VIEW_DEPTH:
        raise refuse.invalid(
            "view_nesting_too_deep",
            f"view nesting deeper than {MAX_VIEW_DEPTH} levels (reading {name} through {' -> '.join(str(n) for n in stack)})",
        )
    return (*stack, name)


def view_columns(info: RelationInfo, body: exp.Query) -> tuple[str, ...]:
    """Column names to alias the expanded text with, when they differ from its output names.

    `CREATE VIEW v (a, b) AS SELECT x, y ...` exposes `a, b`. Only applied when the text's
    output has a known width equal to the view's column count.
    """
    if not info.columns:
        return ()
    selects = body.selects
    if any(isinstance(s, exp.Star) or (isinstance(s, exp.Column) and isinstance(s.this, exp.Star)) for s in selects):
        return ()
    if len(selects) != len(info.columns):
        return ()
    names = [s.alias_or_name for s in selects]
    if [n.casefold() for n in names] == [c.casefold() for c in info.columns]:
        return ()
    return tuple(info.columns)


def place_view(node: exp.Table, info: RelationInfo, body: exp.Query, parts: tuple[str, ...], root: exp.Expr) -> None:
    """Put the view's rewritten text `body` where the reference `node` stood in `root`.

    The derived table keeps the reference's alias (or the view's own name as one), and the
    view's column names when the text's output names differ; column qualifiers written with
    the view's full name are shortened to that alias.

    >>> import sqlglot
    >>> from rowgate.catalog.model import RelationKind
    >>> root = sqlglot.parse_one("SELECT v.a FROM v", read="spark")
    >>> info = RelationInfo(TableName("spark_catalog", "default", "v"), RelationKind.VIEW, columns=("a",))
    >>> place_view(root.find(exp.Table), info, sqlglot.parse_one("SELECT x FROM t", read="spark"), ("v",), root)
    >>> root.sql("spark")
    'SELECT v.a FROM (SELECT x FROM t) AS v(`a`)'
    """
    alias = node.args.get("alias")
    columns = () if alias is not None else view_columns(info, body)
    default_alias = None if isinstance(node.this, exp.Identifier) else parts[-1]
    node.replace(derived_table(node, body, columns=columns, default_alias=default_alias))
    if alias is None:
        unqualify_columns(root, parts)
