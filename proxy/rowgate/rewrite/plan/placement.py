"""A DataFrame's leakproof filter conditions below a policy's barrier (plan side of leakproof.py).

`spark.table("ev").filter(col("day") == "2024-01-01")` is a `filter` relation over a `read`.
The read of a protected table becomes the proxy's filtered read (reads.filter_read): the row
filter under a non-deterministic barrier filter (sql/wrap.barrier_select), and Spark pushes
no filter through that barrier: the caller's `day = ...` would run above it and every
partition would be read. The SQL rewriter already copies leakproof caller predicates next to
the row filter, below the barrier (sql/leakproof.py); this module gives it the DataFrame's
conditions to place, as SQL text:

- `note` (for each caller `filter`, before its input is walked) translates the conditions of
  the filters directly over a `read` (a chain `filter(filter(read))` counts: they all see the
  read's rows) into sqlglot expressions, conjunct by conjunct; a conjunct that is not a
  comparison, IN, LIKE, IS [NOT] NULL, AND/OR/NOT of plain columns and literals of a few
  types is left out, and so is a column that names something other than the read's rows
  (a plan id of another relation, a metadata or nested column);
- `placed_probe` (when that read turns out to be protected) keeps the
  conjuncts that `leakproof.is_leakproof` accepts for the table's column types and asks the
  SQL rewriter for ``SELECT * FROM t WHERE <those>``: its filtered read is the proxy's filter
  with them next to the row filter (and the second opinion expects exactly that, through
  `leakproof_placed`).

The caller's own filter stays where it was, above, unchanged: a placed conjunct only repeats
part of it below. Nothing that can fail or observe a row is placed, since the classifier
judges the SQL text Spark will run, which is what this module renders, not the client's bytes.
Literal types whose SQL spelling could differ from the DataFrame's value (float, double,
decimal, timestamps) are not translated, so a placed conjunct never drops a row the caller's
filter keeps.
"""

from __future__ import annotations

import datetime

import sqlglot
from pyspark.sql.connect.proto import expressions_pb2, relations_pb2
from sqlglot import exp
from sqlglot.errors import SqlglotError

from rowgate.policy.model import TableName
from rowgate.refusal import Refusal
from rowgate.rewrite.plan.walker import Walk
from rowgate.rewrite.sql import RewriteResult
from rowgate.rewrite.sql.leakproof import conjuncts, is_leakproof
from rowgate.rewrite.sql.names import parse_multipart
from rowgate.rewrite.sql.wrap import render

_COMPARISONS: dict[str, type[exp.Expression]] = {
    "==": exp.EQ,
    "!=": exp.NEQ,
    "<>": exp.NEQ,
    "<": exp.LT,
    "<=": exp.LTE,
    ">": exp.GT,
    ">=": exp.GTE,
    "<=>": exp.NullSafeEQ,
}
_INTEGRAL = ("byte", "short", "integer", "long")
_EPOCH = datetime.date(1970, 1, 1)


def note(walk: Walk, rel: relations_pb2.Relation) -> None:
    """Remember the conjuncts of the filter chain `rel` starts, for the read at its bottom.

    The outermost filter of a chain is walked first and sees every condition; the inner
    ones find the read already noted.
    """
    if not walk.guarded:
        return
    conditions: list[expressions_pb2.Expression] = []
    plan_ids: set[int] = set()
    node = rel
    while node.WhichOneof("rel_type") == "filter":
        conditions.append(node.filter.condition)
        if node.HasField("common") and node.common.HasField("plan_id"):
            plan_ids.add(node.common.plan_id)
        node = node.filter.input
    if node.WhichOneof("rel_type") != "read" or node.read.WhichOneof("read_type") != "named_table":
        return
    if id(node) in walk.placements:
        return
    if node.HasField("common") and node.common.HasField("plan_id"):
        plan_ids.add(node.common.plan_id)
    parts = [p for condition in conditions for p in _conjuncts(condition, plan_ids)]
    if parts:
        walk.placements[id(node)] = (node, parts)


def placed_probe(walk: Walk, rel: relations_pb2.Relation, name: TableName, select: str, plain: RewriteResult) -> RewriteResult:
    """The SQL rewriter's answer for the protected read `rel` of `name`: `plain` (the answer
    for `select`, ``SELECT * FROM <name>``), or the one with the noted leakproof conjuncts
    placed next to the row filter, below the barrier."""
    entry = walk.placements.pop(id(rel), None)
    if entry is None or entry[0] is not rel or not plain.filtered or plain.views_expanded:
        return plain
    info = walk.ctx.lookup(name)
    if info is None or len(info.columns) != len(info.column_types):
        return plain
    types = {c.casefold(): t for c, t in zip(info.columns, info.column_types)}

    def column_type(column: exp.Column) -> str | None:
        if any(column.args.get(k) is not None for k in ("table", "db", "catalog")):
            return None
        return types.get(column.name.casefold())

    moved = [p for p in entry[1] if is_leakproof(p, column_type)]
    if not moved:
        return plain
    try:
        placed = walk.probe(select + " WHERE " + " AND ".join(f"({render(p)})" for p in moved))
    except Refusal:
        return plain
    return placed if placed.leakproof_placed and placed.filtered else plain


def _conjuncts(condition: expressions_pb2.Expression, plan_ids: set[int]) -> list:
    """The translatable AND-ed parts of one filter condition."""
    if not _plain_common(condition):
        return []
    if condition.WhichOneof("expr_type") == "expression_string":
        try:
            tree = sqlglot.parse_one(condition.expression_string.expression, read="spark")
        except (SqlglotError, ValueError):
            return []
        return conjuncts(tree) if isinstance(tree, exp.Expression) else []
    out: list[exp.Expression] = []
    todo = [condition]
    while todo:
        node = todo.pop()
        call = node.unresolved_function if node.WhichOneof("expr_type") == "unresolved_function" else None
        if call is not None and call.function_name.lower() == "and" and len(call.arguments) == 2 and _plain(call):
            todo.extend(reversed(call.arguments))
            continue
        translated = _translate(node, plan_ids)
        if translated is not None:
            out.append(translated)
    return out


def _plain_common(node: expressions_pb2.Expression) -> bool:
    """No `common`, or one that only says where in the client's code the expression was
    built (`origin`: pyspark 4 adds it whenever DataFrame debugging is on, its default with
    a live session); it changes nothing about what the expression computes."""
    return not node.HasField("common") or [f.name for f, _ in node.common.ListFields()] == ["origin"]


def _plain(call: expressions_pb2.Expression.UnresolvedFunction) -> bool:
    return not (call.is_distinct or call.is_user_defined_function or call.is_internal)


def _translate(node: expressions_pb2.Expression, plan_ids: set[int]) -> exp.Expression | None:
    """`node` as SQL, or None when it is not of the few shapes placement can use."""
    if not _plain_common(node):
        return None
    kind = node.WhichOneof("expr_type")
    if kind == "unresolved_attribute":
        return _column(node.unresolved_attribute, plan_ids)
    if kind == "literal":
        return _literal(node.literal)
    if kind == "cast":
        return _date_cast(node.cast)
    if kind != "unresolved_function" or not _plain(node.unresolved_function):
        return None
    call = node.unresolved_function
    name = call.function_name.lower()
    args = [_translate(a, plan_ids) for a in call.arguments]
    if any(a is None for a in args):
        return None
    if name in _COMPARISONS and len(args) == 2:
        return _COMPARISONS[name](this=args[0], expression=args[1])
    if name in ("and", "or") and len(args) == 2:
        return (exp.And if name == "and" else exp.Or)(this=exp.Paren(this=args[0]), expression=exp.Paren(this=args[1]))
    if name == "not" and len(args) == 1:
        return exp.Not(this=exp.Paren(this=args[0]))
    if name in ("isnull", "isnotnull") and len(args) == 1:
        test = exp.Is(this=args[0], expression=exp.Null())
        return test if name == "isnull" else exp.Not(this=test)
    if name == "in" and len(args) >= 2:
        return exp.In(this=args[0], expressions=args[1:])
    if name == "like" and len(args) == 2:
        return exp.Like(this=args[0], expression=args[1])
    return None


def _column(attr: expressions_pb2.Expression.UnresolvedAttribute, plan_ids: set[int]) -> exp.Expression | None:
    """A one-part column name of the read's rows (a plan id, if any, of the read or its filters)."""
    if attr.is_metadata_column or (attr.HasField("plan_id") and attr.plan_id not in plan_ids):
        return None
    parts = parse_multipart(attr.unparsed_identifier)
    if parts is None or len(parts) != 1:
        return None
    return exp.column(exp.to_identifier(parts[0], quoted=True))


def _literal(lit: expressions_pb2.Expression.Literal) -> exp.Expression | None:
    kind = lit.WhichOneof("literal_type")
    if kind == "null":
        return exp.Null()
    if kind == "boolean":
        return exp.true() if lit.boolean else exp.false()
    if kind == "string":
        return exp.Literal.string(lit.string)
    if kind in _INTEGRAL:
        value = getattr(lit, kind)
        number = exp.Literal.number(abs(value))
        return number if value >= 0 else exp.Neg(this=number)
    if kind == "date":
        try:
            day = _EPOCH + datetime.timedelta(days=lit.date)
        except OverflowError:
            return None
        return _as_date(exp.Literal.string(day.isoformat()))
    return None


def _date_cast(cast: expressions_pb2.Expression.Cast) -> exp.Expression | None:
    """`lit("2024-01-01").cast("date")`: a string literal cast to DATE (the classifier checks the text)."""
    to_date = cast.type.HasField("date") if cast.HasField("type") else cast.type_str.strip().lower() == "date"
    if not to_date or cast.expr.WhichOneof("expr_type") != "literal" or cast.expr.literal.WhichOneof("literal_type") != "string":
        return None
    return _as_date(exp.Literal.string(cast.expr.literal.string))


def _as_date(text: exp.Literal) -> exp.Expression:
    return exp.Cast(this=text, to=exp.DataType.build("date"))
