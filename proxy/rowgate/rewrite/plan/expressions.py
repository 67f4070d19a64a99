"""Expressions: SQL text inside DataFrame plans, and the caller identity functions.

`df.filter("...")`, `selectExpr(...)` and `expr(...)` send Spark SQL expression text that
Spark parses on the server; it may hold subqueries that read tables (`id IN (SELECT ...)`,
`EXISTS (...)`, scalar subqueries). The text is rewritten by the SQL rewriter as
``SELECT <text>`` and the one projection is taken back, so subqueries are filtered exactly
like in SQL statements.

While protection is in force every expression text is parsed; it is forwarded as sent
with only the proxy's edits spliced in (issue #22, rewrite/sql/splice.py), or as the
proxy's own rendering when Spark's lexer and sqlglot's may differ on it (a `--` comment
continued over a backslash-newline can hide a subquery from sqlglot); a text sqlglot
cannot read as exactly one expression is refused. With nothing protected,
texts without a word that could start a subquery or call an identity function are left
alone without parsing, and unparseable ones are left to Spark. Spark also substitutes
``${var}`` in expression text, so that is refused like in SQL.

`current_user()`/`session_user()`/`user()` as DataFrame functions become the caller's
email, like in SQL (Spark would answer with the proxy's own identity).
"""

from __future__ import annotations

import sqlglot
from pyspark.sql.connect.proto import expressions_pb2
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from rowgate.rewrite.plan.walker import Frame, Walk
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.identity import IDENTITY_FUNCTION_NAMES
from rowgate.rewrite.sql.wrap import render

# Substrings without which an expression text can neither read a relation nor name the caller.
_NEEDS_SQL = ("select", "from", "table", "user")
_BUILTIN_PREFIXES = ("system.builtin.", "builtin.")


def expression_string(walk: Walk, expr: expressions_pb2.Expression, frame: Frame) -> Frame | None:
    holder = expr.expression_string
    # A projection (`selectExpr`, `select(F.expr(...))`) keeps the name Spark gives the
    # client's text when rowgate binds an identity function in it (issue #22): it is aliased.
    projected = frame.field == "expressions" and frame.parent is not None and frame.parent.field == "project"
    new = rewrite_text(walk, holder.expression, projected=projected)
    if new is not None:
        holder.expression = new
        walk.found.changed = True
    return frame


def rewrite_text(walk: Walk, text: str, *, projected: bool = False) -> str | None:
    """The rewritten expression text, or None when it stays as sent. `projected`: the text
    is a projection, where an alias naming it after the client's text is valid."""
    if walk.guarded and "${" in text:
        raise refuse.invalid(
            "sql_variable_substitution",
            "${...} variable substitution in an expression string is not allowed while row access policies are in force",
        )
    if walk.guarded:
        if not _is_one_expression(text):
            raise refuse.invalid(
                "unanalysable_expression",
                f"cannot analyse the expression string {_short(text)!r} while row access policies are in force "
                "(it is not one expression the proxy can read, and only the proxy's own rendering is forwarded)",
            )
    else:
        lowered = text.lower()
        if not any(word in lowered for word in _NEEDS_SQL) or not _is_one_expression(text):
            return None
    res = rewrite_sql("SELECT " + text, walk.ctx, name_identity_columns=projected)
    walk.found.merge(res, reads_only=True)
    if not res.changed:
        return None
    out = _projection(res.sql)
    return out if out != text else None


def function(walk: Walk, expr: expressions_pb2.Expression, frame: Frame) -> Frame | None:
    """`F.current_user()` and friends (unresolved_function or call_function) -> the caller's email."""
    kind = expr.WhichOneof("expr_type")
    if kind is None:
        return frame
    call = getattr(expr, kind)
    if kind == "unresolved_function" and call.is_user_defined_function:
        return frame
    name = plain_function_name(call.function_name)
    projected = frame.field == "expressions" and frame.parent is not None and frame.parent.field == "project"
    if call.arguments or name.upper() not in IDENTITY_FUNCTION_NAMES:
        if projected and _has_identity(expr):
            _name_projection(expr)
        return frame
    if projected:
        # A projection keeps the column name Spark gives the function (issue #22), not the email.
        expr.alias.expr.literal.string = walk.ctx.caller.email  # replaces the oneof member
        expr.alias.name.append(name + "()")
    else:
        expr.literal.string = walk.ctx.caller.email  # replaces the oneof member; `common` stays
    walk.found.identity_bound = True
    walk.found.changed = True
    return None


def _name_projection(expr: expressions_pb2.Expression) -> None:
    """A projection holding an identity function (`F.upper(F.current_user())`) keeps the
    name Spark gives it (`upper(current_user())`, issue #22): it is aliased so before the
    identity function inside becomes a literal. Left alone where the name is unsure."""
    name = dataframe_name(expr)
    if name is None:
        return
    inner = expressions_pb2.Expression()
    inner.CopyFrom(expr)
    expr.alias.expr.CopyFrom(inner)  # replaces the oneof member
    expr.alias.name.append(name)


def _has_identity(expr: expressions_pb2.Expression) -> bool:
    kind = expr.WhichOneof("expr_type")
    if kind in ("unresolved_function", "call_function"):
        call = getattr(expr, kind)
        if not call.arguments and plain_function_name(call.function_name).upper() in IDENTITY_FUNCTION_NAMES:
            return not (kind == "unresolved_function" and call.is_user_defined_function)
        return any(_has_identity(a) for a in call.arguments)
    return False


_DATAFRAME_OPERATORS = {
    "==": "=",
    "<=>": "<=>",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "%": "%",
    "and": "AND",
    "or": "OR",
}


def dataframe_name(expr: expressions_pb2.Expression) -> str | None:
    """The column name Spark gives a DataFrame expression made of function calls, column
    references and literals (its pretty SQL), or None for any other form.

    >>> e = expressions_pb2.Expression()
    >>> up = e.unresolved_function
    >>> up.function_name = "upper"
    >>> cu = up.arguments.add().unresolved_function
    >>> cu.function_name = "current_user"
    >>> dataframe_name(e)
    'upper(current_user())'
    """
    kind = expr.WhichOneof("expr_type")
    if kind in ("unresolved_function", "call_function"):
        call = getattr(expr, kind)
        if kind == "unresolved_function" and (call.is_user_defined_function or call.is_distinct):
            return None
        args = [dataframe_name(a) for a in call.arguments]
        if any(a is None for a in args):
            return None
        name = plain_function_name(call.function_name)
        if name in _DATAFRAME_OPERATORS and len(args) == 2:
            return f"({args[0]} {_DATAFRAME_OPERATORS[name]} {args[1]})"
        if name == "not" and len(args) == 1:
            return f"(NOT {args[0]})"
        if not name.replace("_", "a").isalnum() or name in ("if", "cast", "trim", "extract", "count", "negative"):
            return None
        return f"{name}({', '.join(args)})"  # type: ignore[arg-type]
    if kind == "literal":
        literal = expr.literal
        which = literal.WhichOneof("literal_type")
        if which == "string":
            return literal.string
        if which in ("integer", "long", "short", "byte"):
            return str(getattr(literal, which))
        if which == "boolean":
            return "true" if literal.boolean else "false"
        if which == "null":
            return "NULL"
        return None
    if kind == "unresolved_attribute":
        name = expr.unresolved_attribute.unparsed_identifier
        return name if name.replace("_", "a").isalnum() else None
    return None


def plain_function_name(name: str) -> str:
    """A function name without Spark 4's `system.builtin.` qualifier, lower-cased."""
    folded = name.strip().lower()
    for prefix in _BUILTIN_PREFIXES:
        if folded.startswith(prefix):
            return folded[len(prefix) :]
    return folded


def string_literal(expr: expressions_pb2.Expression) -> str | None:
    if expr.WhichOneof("expr_type") != "literal" or expr.literal.WhichOneof("literal_type") != "string":
        return None
    return expr.literal.string


def _is_one_expression(text: str) -> bool:
    """Whether sqlglot reads `text` as exactly one expression (as Spark's parseExpression must)."""
    try:
        trees = sqlglot.parse("SELECT " + text, read="spark", error_level=ErrorLevel.RAISE)
    except (
        SqlglotError,
        RecursionError,
        AttributeError,
        TypeError,
        ValueError,
        IndexError,
        KeyError,
    ):  # sqlglot failing is no reading
        return False
    if len(trees) != 1 or not isinstance(trees[0], exp.Select):
        return False
    select = trees[0]
    if any(value not in (None, False, []) for key, value in select.args.items() if key != "expressions"):
        return False  # e.g. "1 FROM orders": not an expression for Spark, a query for sqlglot
    return len(select.expressions) == 1


def _projection(sql: str) -> str:
    """The expression of the rewritten ``SELECT <text>``: as spliced (the client's text with
    the proxy's edits, issue #22) when it still reads as one expression, else rendered."""
    rest = sql.removeprefix("SELECT ")
    if rest != sql and _is_one_expression(rest):
        return rest
    tree = sqlglot.parse_one(sql, read="spark")
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1:
        raise refuse.invalid("expression_render_unstable", "internal error: a rewritten expression string is not one expression")
    return render(tree.expressions[0])


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
