"""Which of a caller's predicates may run below a policy's barrier: the leakproof ones.

Every protected read puts its policy filter under a non-deterministic barrier
(wrap.barrier_select) so that Spark runs none of the caller's predicates on hidden rows: a
predicate that can fail (`1/0` under ANSI, `raise_error`, a cast of a bad string, a UDF)
would otherwise tell the caller that hidden rows exist, or print their values. The barrier
also stops partition pruning and every pushdown of the caller's predicates into the table's
scan. PostgreSQL's answer (security barrier views and LEAKPROOF functions) is followed here:
a predicate that can neither fail nor otherwise observe a row may run on every row, so it is
copied inside the protected table's derived table, next to the policy's filter and below
the barrier, where Spark prunes partitions and pushes it into the scan. Everything else
stays above the barrier.

Leakproof, with Spark's ANSI mode on (an allow list; anything not listed is not):

- a column of the protected table compared (`=`, `<>`, `!=`, `<`, `<=`, `>`, `>=`, `<=>`)
  with a literal whose type needs no cast of the column that can fail: string columns
  with string literals, integral columns with integer literals, float/double columns with
  numeric literals, boolean columns with TRUE/FALSE, date columns with a DATE literal or a
  string literal that is a valid `YYYY-MM-DD` date; NULL with any column;
- `col [NOT] IN (<literals>)` and `col [NOT] BETWEEN <lit> AND <lit>` under the same rule;
- `col IS [NOT] NULL` for any column;
- `col [NOT] LIKE '<pattern>'` on a string column, the pattern a string literal without a
  backslash (an invalid escape in a pattern raises) and without an ESCAPE clause;
- AND, OR, NOT and parentheses of the above.

Not leakproof, among others: arithmetic (division raises under ANSI), casts, any function
call (UDFs, `raise_error`, `assert_true`, non-deterministic functions), a string column
compared with a number (ANSI casts the column, which raises on bad strings), decimal
columns (widening a decimal(38, s) for a comparison can overflow), timestamps, subqueries,
comparisons of two columns, and columns the caller does not own through this table
(`column_type` answers None for them).

>>> types = {"day": "date", "region": "string", "n": "int", "amount": "decimal(10,2)"}
>>> kind = lambda c: types.get(c.name.lower()) if not c.table or c.table == "t" else None
>>> ok = lambda text: is_leakproof(sqlglot.parse_one(text, read="spark"), kind)
>>> ok("day = '2024-01-01' AND region IN ('eu', 'us') AND n BETWEEN 1 AND 10")
True
>>> ok("region LIKE 'e%' OR n IS NULL OR NOT (t.n >= -3)")
True
>>> ok("1 / (n - 5) > 0"), ok("region = 5"), ok("day = '2024-13-01'"), ok("amount = 1")
(False, False, False, False)
>>> ok("u.n = 1"), ok("n = (SELECT 1)"), ok("CAST(region AS INT) = 1"), ok("rand() > 0.5")
(False, False, False, False)
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from rowgate.rewrite.sql.wrap import policy_select

ColumnType = Callable[[exp.Column], "str | None"]

_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ)
_INTEGRAL = frozenset({"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"})
_FRACTIONAL = frozenset({"float", "real", "double"})
_STRING = re.compile(r"^(string|varchar\(\d+\)|char\(\d+\))$")
_INTEGER_TEXT = re.compile(r"^\d{1,18}$")
_NUMBER_TEXT = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The AND-ed parts of `condition`, parentheses around each part removed.

    >>> [c.sql("spark") for c in conjuncts(sqlglot.parse_one("(a = 1 AND (b = 2)) AND c", read="spark"))]
    ['a = 1', 'b = 2', 'c']
    """
    node = condition
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def is_leakproof(node: exp.Expr, column_type: ColumnType) -> bool:
    """Whether `node` cannot fail nor observe a row beyond its own truth value (see module doc).

    `column_type(column)` gives the Spark type (DESCRIBE's spelling, e.g. ``int``,
    ``string``, ``decimal(10,2)``) of a column of the protected table, or None for a column
    that is not one of its columns as written.
    """
    if isinstance(node, exp.Paren):
        return is_leakproof(node.this, column_type)
    if isinstance(node, (exp.And, exp.Or)):
        return is_leakproof(node.this, column_type) and is_leakproof(node.expression, column_type)
    if isinstance(node, exp.Not):
        return is_leakproof(node.this, column_type)
    if isinstance(node, exp.Is):
        return isinstance(node.expression, exp.Null) and _type(node.this, column_type) is not None
    if isinstance(node, _COMPARISONS):
        left, right = node.this, node.expression
        if _is_column(right) and not _is_column(left):
            left, right = right, left
        kind = _type(left, column_type)
        return kind is not None and _fits(kind, right)
    if isinstance(node, exp.In):
        kind = _type(node.this, column_type)
        values = node.expressions
        simple = not node.args.get("query") and not node.args.get("field") and not node.args.get("unnest")
        return kind is not None and simple and bool(values) and all(_fits(kind, v) for v in values)
    if isinstance(node, exp.Between):
        kind = _type(node.this, column_type)
        return kind is not None and _fits(kind, node.args.get("low")) and _fits(kind, node.args.get("high"))
    if isinstance(node, exp.Like):
        kind = _type(node.this, column_type)
        pattern = node.expression
        return (
            kind is not None
            and _STRING.match(kind) is not None
            and isinstance(pattern, exp.Literal)
            and pattern.is_string
            and "\\" not in pattern.this
        )
    return False


def placeable(table: exp.Table, columns: tuple[str, ...], types: tuple[str, ...]) -> list[exp.Expr]:
    """The leakproof conjuncts of the caller's WHERE that may also run inside `table`'s wrapper.

    Copies, with column qualifiers removed (inside the wrapper the table is the only
    relation). Only when `table` is the FROM of a SELECT whose joins keep its rows as they
    are (inner, cross, LEFT [SEMI|ANTI] joins with an ON condition): a WHERE conjunct on the
    null-extended side of an outer join, or on a USING/NATURAL join key, means something
    else below the join. A column counts as the table's when it is qualified by the
    table's alias (its name when it has none) or, without joins, unqualified and one of its
    columns; the column must be known with its type.

    >>> t = sqlglot.parse_one("SELECT * FROM t AS o JOIN u ON o.k = u.k WHERE o.day = '2024-01-01' AND u.x = 1 "
    ...     "AND 1/o.n > 0", read="spark")
    >>> [c.sql("spark") for c in placeable(t.find(exp.Table), ("day", "n", "k"), ("date", "int", "int"))]
    ["day = '2024-01-01'"]
    """
    source = table.parent
    select = source.parent if isinstance(source, exp.From) else None
    if not isinstance(select, exp.Select) or source is not select.args.get("from_") or len(columns) != len(types):
        return []
    where = select.args.get("where")
    if where is None or select.args.get("laterals") or table.args.get("pivots"):
        return []
    alias_node = table.args.get("alias")
    if alias_node is not None and alias_node.args.get("columns"):
        return []  # `t AS x(a, b)` renames columns: a name in WHERE is not the table's column
    joins = select.args.get("joins") or []
    for join in joins:
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        if (
            join.args.get("using")
            or join.args.get("method")
            or side not in ("", "LEFT")
            or kind not in ("", "INNER", "CROSS", "SEMI", "ANTI")
        ):
            return []
    alias = table.alias_or_name.casefold()
    known = {c.casefold(): k for c, k in zip(columns, types)}

    def column_type(column: exp.Column) -> str | None:
        if column.args.get("db") is not None or column.args.get("catalog") is not None:
            return None
        qualifier = column.args.get("table")
        if qualifier is None and joins:
            return None
        if qualifier is not None and (not isinstance(qualifier, exp.Identifier) or qualifier.this.casefold() != alias):
            return None
        return known.get(column.name.casefold())

    out = []
    for part in conjuncts(where.this):
        if is_leakproof(part, column_type):
            copy = part.copy()
            for column in copy.find_all(exp.Column):
                column.set("table", None)
            out.append(copy)
    return out


def place_below(inner: exp.Select, moved: list[exp.Expr]) -> str:
    """Put `moved` next to the policy's filter of `inner` (wrap.inner_select output), below
    its barrier, in place.

    `TRUE AND (<filter>)` becomes `TRUE AND (<moved>) AND (<filter>)`: Spark pushes all of
    it into the scan (it is deterministic) and keeps the barrier above. Returns the
    rendering of `<moved>` (see `probe_sql`).

    >>> inner = sqlglot.parse_one("SELECT * FROM (SELECT * FROM t WHERE TRUE AND (a)) WHERE spark_partition_id() >= 0",
    ...     read="spark")
    >>> place_below(inner, [sqlglot.parse_one("day = 1", read="spark"), sqlglot.parse_one("n < 3", read="spark")])
    'day = 1 AND n < 3'
    >>> inner.sql("spark")
    'SELECT * FROM (SELECT * FROM t WHERE TRUE AND (day = 1 AND n < 3) AND (a)) WHERE SPARK_PARTITION_ID() >= 0'
    """
    where = policy_select(inner).args["where"].this
    conjunction = moved[0].copy()
    for part in moved[1:]:
        conjunction = exp.And(this=conjunction, expression=part.copy())
    where.set("this", exp.And(this=where.this, expression=exp.Paren(this=conjunction)))
    return conjunction.sql(dialect="spark")


def _is_column(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier)


def _type(node: exp.Expr | None, column_type: ColumnType) -> str | None:
    """The column's type when `node` is a plain column of the protected table."""
    if not _is_column(node):
        return None
    kind = column_type(node)  # type: ignore[arg-type]
    return kind.strip().lower() if kind else None


def _fits(kind: str, value: exp.Expr | None) -> bool:
    """Whether comparing a column of type `kind` with `value` needs no cast that can fail."""
    if isinstance(value, exp.Null):
        return True
    negative = isinstance(value, exp.Neg)
    if negative:
        assert value is not None
        value = value.this
    if isinstance(value, exp.Boolean):
        return kind == "boolean" and not negative
    if not isinstance(value, exp.Literal):
        return _date_literal(kind, value) and not negative
    text = value.this
    if value.is_string:
        if negative:
            return False
        if _STRING.match(kind):
            return True
        return kind == "date" and _valid_date(text)
    if kind in _INTEGRAL:
        return _INTEGER_TEXT.match(text) is not None
    if kind in _FRACTIONAL:
        return _NUMBER_TEXT.match(text) is not None
    return False


def _date_literal(kind: str, value: exp.Expr | None) -> bool:
    """`DATE '2024-01-01'` against a date column (sqlglot reads it as a cast of a literal)."""
    if kind != "date" or not isinstance(value, exp.Cast) or not value.to.is_type("date"):
        return False
    inner = value.this
    return isinstance(inner, exp.Literal) and inner.is_string and _valid_date(inner.this)


def _valid_date(text: str) -> bool:
    if not _DATE_TEXT.match(text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return text[:4] != "0000"


__all__ = ["conjuncts", "is_leakproof", "sqlglot"]
