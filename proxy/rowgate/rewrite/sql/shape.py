"""Spark syntax that sqlglot accepts but reads as something else (parser differentials).

sqlglot is lenient: where Spark expects a query it also accepts an expression, and it does
not know some Spark forms. When the two parsers disagree about which relations a text
reads, the proxy could filter one relation while Spark reads another. Known cases:

- `(TABLE t)`, `WITH x AS (TABLE t)`, `SELECT (TABLE t)`: Spark reads `t` whole; sqlglot sees
  a column or table named TABLE aliased `t`;
- `FROM STREAM t`: Spark 4.1 reads `t` as a stream; sqlglot sees a table STREAM aliased `t`;
- `t@v1`, `$x`: sqlglot makes `${v1}`/`${x}` parameters out of them;
- a CTE body or a parenthesised query that is not a query at all;
- `IDENTIFIER(...)` as a write or DDL target: sqlglot reads `INSERT INTO IDENTIFIER(:t)` as a
  table named IDENTIFIER with a column list `(:t)`, and `DROP TABLE IDENTIFIER(:t)` as
  `DROP TABLE IDENTIFIER` (the argument is lost). `normalize` turns the first form back into
  the IDENTIFIER clause; `check_shape` refuses any other unquoted IDENTIFIER name.

`check_shape` refuses all of them (only called while protection is in force). An unquoted
identifier spelled TABLE or STREAM is refused wherever it appears; backticks make it a
plain name again.

>>> import sqlglot
>>> check_shape(sqlglot.parse_one("SELECT `table` FROM t", read="spark"))
>>> check_shape(sqlglot.parse_one("WITH x AS (TABLE orders) SELECT * FROM x", read="spark"))
Traceback (most recent call last):
...
rowgate.refusal.Refusal: a WITH clause whose body is not a query (not analysable by the proxy)
"""

from __future__ import annotations

from sqlglot import exp

from rowgate.rewrite.sql import errors as refuse

KEYWORD_NAMES = frozenset({"TABLE", "STREAM", "IDENTIFIER"})
_CONSTANT_PARTS = (exp.Literal, exp.Placeholder, exp.DPipe, exp.Concat, exp.Paren)


def normalize(tree: exp.Expr) -> None:
    """The `normalize` pass: rewrite, in place, the forms the later passes must see in one shape.

    - `IDENTIFIER(<constant>)` where sqlglot read it as a table with a column list is
      rebuilt as the IDENTIFIER clause;
    - `INSERT INTO t TABLE s` becomes `INSERT INTO t SELECT * FROM s`, the same statement
      for Spark, so that the read of `s` is an ordinary relation the reads pass filters.

    >>> import sqlglot
    >>> t = sqlglot.parse_one("INSERT INTO IDENTIFIER(:t) SELECT 1", read="spark")
    >>> normalize(t); t.sql("spark")
    'INSERT INTO IDENTIFIER(:t) SELECT 1'
    >>> t = sqlglot.parse_one("INSERT INTO t TABLE s", read="spark")
    >>> normalize(t); t.sql("spark")
    'INSERT INTO t SELECT * FROM s'
    """
    inserts = tree.expressions if isinstance(tree, exp.MultitableInserts) else [tree]
    for insert in inserts:
        if isinstance(insert, exp.Insert):
            _select_table_source(insert)
    for schema in list(tree.find_all(exp.Schema)):
        table = schema.this
        if (
            isinstance(table, exp.Table)
            and isinstance(table.this, exp.Identifier)
            and not table.this.quoted
            and table.this.this.upper() == "IDENTIFIER"
            and not table.args.get("db")
            and len(schema.expressions) == 1
            and isinstance(schema.expressions[0], _CONSTANT_PARTS)
        ):
            call = exp.Anonymous(this="IDENTIFIER", expressions=[schema.expressions[0]])
            schema.replace(exp.Table(this=call))


def _select_table_source(insert: exp.Insert) -> None:
    """`INSERT INTO t TABLE s` read as `INSERT INTO t SELECT * FROM s`."""
    source = insert.args.get("source")
    if isinstance(insert.this, exp.Directory) or not isinstance(source, exp.Table) or insert.expression is not None:
        return
    insert.set("source", None)
    insert.set("expression", exp.Select(expressions=[exp.Star()], from_=exp.From(this=source)))


def check_shape(tree: exp.Expr) -> None:
    """Raise a `Refusal` (INVALID_ARGUMENT) on a known parser differential."""
    for node in tree.walk():
        if isinstance(node, exp.Identifier):
            if not node.quoted and isinstance(node.this, str) and node.this.upper() in KEYWORD_NAMES:
                raise refuse.invalid(
                    "parser_differential",
                    f"unsupported syntax near {node.this.upper()} (Spark and the proxy's parser read it differently)",
                )
        elif isinstance(node, exp.Parameter):
            raise refuse.invalid(
                "sql_variable_or_suffix",
                "a $-variable or @-suffix (like ${x}, $x or t@v1) is not allowed while row access policies are in force",
            )
        elif isinstance(node, exp.CTE):
            if not isinstance(node.this, exp.Query):
                raise refuse.invalid(
                    "cte_body_not_query", "a WITH clause whose body is not a query (not analysable by the proxy)"
                )
        elif isinstance(node, exp.Subquery):
            if not isinstance(node.this, (exp.Query, exp.Table)):
                raise refuse.invalid(
                    "subquery_not_query", "a parenthesised relation that is not a query (not analysable by the proxy)"
                )
