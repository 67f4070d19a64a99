"""Protected reads become derived tables that filter first, under an optimizer barrier.

A reference to a protected table T is replaced by

    (SELECT * FROM (SELECT * FROM `cat`.`db`.`t` WHERE <filter>) WHERE spark_partition_id() >= 0)
        AS <the caller's alias, or T's name>

so that the caller's predicates, joins, grouping and limits only ever see allowed rows.
The filter comes from `rowgate.policy.decision.row_filter`; this module only places it. Table
names inside the filter (lookup tables) are qualified against T's own catalog and database,
so a caller's CTE or temp view of the same name cannot stand in for them.

The outer `WHERE spark_partition_id() >= 0` is the barrier (`BARRIER`, see `barrier_select`):
without it Spark merges the caller's WHERE into the policy's filter, and its constraint
inference may put a derived copy of a caller predicate first (`region = secret AND
CAST(region AS INT) > 0` yields `CAST(secret AS INT) > 0`, evaluated on every scanned row:
the ANSI cast error prints a hidden value). Caller predicates that cannot fail or observe a
row (leakproof.py) are copied inside, next to the policy's filter, so pruning stays.

The same exact shape is also how an already rewritten text is recognised (the server echoes
the rewritten SQL and the client sends it again): a derived table counts as filtered only
when its text equals, character for character, what this module would produce now for this
caller. A look-alike with any other filter is wrapped again.

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT o.id FROM orders AS o WHERE o.id > 1", read="spark")
>>> table = tree.find(exp.Table)
>>> name = TableName("spark_catalog", "default", "orders")
>>> inner = inner_select(name, sqlglot.parse_one("region = 'EU'", read="spark"))
>>> _ = table.replace(derived_table(table, inner))
>>> render(tree)
"SELECT o.id FROM (SELECT * FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE TRUE AND (region = 'EU')) WHERE SPARK_PARTITION_ID() >= 0) AS o WHERE o.id > 1"
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator

from rowgate.policy.model import TableName
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.names import Unresolvable, quoted_table, resolve, written_parts
from rowgate.rewrite.sql.scope import Scope, relation_references

# Table arguments a protected reference may carry. The rest are refused (fail closed).
_INNER_ARGS = frozenset({"this", "db", "catalog", "version", "sample"})
_OUTER_ARGS = frozenset({"alias", "pivots", "joins", "laterals"})
_MARKER_SELECT_ARGS = frozenset({"expressions", "from_", "where"})
_BARRIER_SELECT_ARGS = frozenset({"expressions", "from_", "where", "limit"})


class NestedCteSpark(Spark):
    """Spark SQL as Spark 3.2+ reads it: a CTE may be defined inside a subquery.

    sqlglot's Spark inherits Hive's rule of hoisting every CTE to the top of the statement,
    which changes what a name means (a CTE defined in a subquery then shadows tables of the
    same name everywhere) and loses a CTE inside an expression string, where only the one
    projection is kept.
    """

    class Generator(SparkGenerator):
        EXPRESSIONS_WITHOUT_NESTED_CTES: ClassVar[set[type[exp.Expr]]] = set()
        # Spark reads `TABLESAMPLE (...) REPEATABLE (n)`; sqlglot's Spark writes `SEED (n)`,
        # which Spark refuses as a syntax error.
        TABLESAMPLE_SEED_KEYWORD = "REPEATABLE"

        def describe_sql(self, expression: exp.Describe) -> str:
            """sqlglot drops the kind of `DESCRIBE FUNCTION f` / `DESCRIBE DATABASE d`, which
            would make the proxy's rendering describe a table named `f`."""
            text = super().describe_sql(expression)
            kind = (expression.args.get("kind") or "").upper()
            if kind and kind not in ("TABLE", "VIEW"):
                if not text.startswith("DESCRIBE "):
                    raise refuse.invalid(
                        "describe_render_unstable", "internal error: a DESCRIBE statement does not render as expected"
                    )
                text = f"DESCRIBE {kind} " + text[len("DESCRIBE ") :]
            return text


def render(node: exp.Expr) -> str:
    """The Spark SQL text the proxy forwards for `node` (comments dropped)."""
    return node.sql(dialect=NestedCteSpark, comments=False, copy=False)


def check_modifiers(table: exp.Table, shown: str) -> None:
    """Refuse table modifiers a protected reference may not carry."""
    for key, value in table.args.items():
        if value in (None, False, []) or key in _INNER_ARGS or key in _OUTER_ARGS:
            continue
        raise refuse.invalid("unsupported_table_modifier", f"unsupported modifier ({key}) on protected table {shown}")


def unambiguous(row_filter: exp.Expr) -> exp.Expr:
    """`TRUE AND (<filter>)`: Spark reads `FROM t WHERE (flag)` as the table alias `WHERE`
    with the column list `(flag)`, which returns every row unfiltered. A WHERE clause that
    does not start with a parenthesis cannot be read that way.

    >>> unambiguous(exp.column("flag")).sql("spark")
    'TRUE AND (flag)'
    """
    return exp.And(this=exp.true(), expression=exp.Paren(this=row_filter.copy()))


def needs_barrier(row_filter: exp.Expr) -> bool:
    """A filter with a subquery (a lookup policy): Spark makes it a join."""
    return any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in row_filter.walk())


def barrier_condition() -> exp.Expr:
    """`spark_partition_id() >= 0`: always true, and non-deterministic to Spark's optimizer."""
    return exp.GTE(this=exp.Anonymous(this="spark_partition_id"), expression=exp.Literal.number(0))


BARRIER = "SPARK_PARTITION_ID() >= 0"  # barrier_condition() as `render` writes it


def barrier_select(policy: exp.Select, *, limit: exp.Expr | None = None) -> exp.Select:
    """``SELECT * FROM (<policy>) WHERE spark_partition_id() >= 0 [LIMIT n]``: no caller
    predicate runs on a row before the policy's filter has decided it.

    Spark merges a caller's WHERE into the policy's filter (CombineFilters), pushes it into
    joins and scans, and adds inferred copies of it (InferFiltersFromConstraints, e.g.
    `CAST(secret AS INT) > 0` from `region = secret AND CAST(region AS INT) > 0`), in any
    order; a lookup policy's subquery becomes a semi join below which the caller's part is
    pushed. A caller predicate that can fail (`1/0`, `raise_error`, an ANSI cast) then fails
    on hidden rows, which tells the caller they exist and may print their values (bypass
    catalogue D18, issue 21). Spark never merges a filter into a non-deterministic one nor
    pushes a filter through it, and its inferred constraints stay with the filter they came
    from, so with this filter in between every caller predicate stays above, while the
    policy's filter below is still pushed into the scan (PostgreSQL's security barrier).
    What the caller may still have run on every row are the leakproof predicates copied
    inside (leakproof.place_below), which keep partition pruning.

    A `TABLESAMPLE (n ROWS)` (a LIMIT) goes above the barrier: it draws from filtered rows;
    a percent or bucket sample goes above it too (`split_sample`, `sampled`).
    """
    source = exp.Subquery(this=policy)
    select = exp.Select(expressions=[exp.Star()])
    select.set("from_", exp.From(this=source))
    select.set("where", exp.Where(this=barrier_condition()))
    if limit is not None:
        select.set("limit", limit.copy())
    return select


def policy_select(select: exp.Select) -> exp.Select:
    """The filtering SELECT under the barrier of `inner_select` output."""
    inner = select.args["from_"].this.this
    assert isinstance(inner, exp.Select)
    return inner


def inner_select(
    name: TableName,
    row_filter: exp.Expr,
    *,
    version: exp.Expr | None = None,
    sample: exp.Expr | None = None,
    limit: exp.Expr | None = None,
) -> exp.Select:
    """``SELECT * FROM (SELECT * FROM <fq name> [time travel] WHERE <filter>) WHERE <barrier>
    [LIMIT]``, inside ``SELECT * FROM (...) WHERE <sample>`` when `sample` (a condition from
    `split_sample`) is given (nodes copied)."""
    table = quoted_table(name)
    if version is not None:
        table.set("version", version.copy())
    select = exp.Select(expressions=[exp.Star()])
    select.set("from_", exp.From(this=table))
    select.set("where", exp.Where(this=unambiguous(row_filter)))
    barrier = barrier_select(select, limit=limit)
    return sampled(barrier, sample) if sample is not None else barrier


def sampled(barrier: exp.Select, condition: exp.Expr) -> exp.Select:
    """``SELECT * FROM (<barrier>) WHERE RAND(<seed>) < <fraction>``: the sample of the rows
    the barrier lets through."""
    select = exp.Select(expressions=[exp.Star()])
    select.set("from_", exp.From(this=exp.Subquery(this=barrier)))
    select.set("where", exp.Where(this=condition.copy()))
    return select


def split_sample(
    sample: exp.Expr | None, *, new_seed: Callable[[], int] | None = None
) -> tuple[exp.Expr | None, exp.Expr | None]:
    """Where a TABLESAMPLE goes so that it samples filtered rows only: (condition, limit).

    `TABLESAMPLE (n ROWS)` is a LIMIT in Spark, so it becomes `LIMIT n` after the barrier.
    A percent or bucket sample becomes `RAND(seed) < fraction` above the barrier: Spark's
    Sample keeps a row when the partition's generator (seeded `seed + partition index`)
    draws below the fraction, which is what `rand(seed)` draws per row, so the result is
    Spark's own sample of the filtered rows. Below the filter (where Spark would put it) the
    draws would be spent on hidden rows too, and which allowed rows survive would tell where
    hidden rows lie: with `REPEATABLE (n)` at once, and without it too, since Spark draws an
    unseeded sample's seed from only 1000 values. A caller's seed is kept (above the barrier
    any seed is safe); an unseeded sample gets `new_seed()` (random), which the rewrite memo
    (memo.py) remembers with the text: the same unseeded text keeps its sample while it is
    remembered, where Spark would draw a new one.

    >>> import sqlglot
    >>> s = sqlglot.parse_one("SELECT * FROM t TABLESAMPLE (10 PERCENT) REPEATABLE (7)", read="spark")
    >>> [x.sql("spark") if x is not None else None for x in split_sample(s.find(exp.TableSample))]
    ['RAND(7) < 10 / 100', None]
    """
    if sample is None:
        return None, None
    args = {k: v for k, v in sample.args.items() if v is not None}
    if set(args) == {"size"}:
        return None, exp.Limit(expression=args["size"].copy())
    seed = args.pop("seed", None)
    if set(args) == {"percent"}:
        numerator, denominator = args["percent"], exp.Literal.number(100)
        top = Decimal(100)
    elif set(args) == {"bucket_numerator", "bucket_denominator"}:
        numerator, denominator = args["bucket_numerator"], args["bucket_denominator"]
        top = _number(denominator)
    else:
        raise refuse.invalid(
            "unsupported_tablesample", f"unsupported TABLESAMPLE on a protected table: {sample.sql(dialect='spark')}"
        )
    value = _number(numerator)
    if top <= 0 or not 0 <= value <= top:
        raise refuse.invalid("tablesample_out_of_range", f"TABLESAMPLE fraction out of range: {sample.sql(dialect='spark')}")
    if seed is None:
        seed = exp.Literal.number((new_seed or _random_seed)())
    elif not (isinstance(seed, exp.Literal) and not seed.is_string and seed.name.lstrip("-").isdigit()):
        raise refuse.invalid("tablesample_seed_not_integer", "TABLESAMPLE ... REPEATABLE takes an integer")
    condition = exp.LT(
        this=exp.Rand(this=seed.copy()),
        expression=exp.Div(this=numerator.copy(), expression=denominator.copy()),
    )
    return condition, None


def _number(node: exp.Expr) -> Decimal:
    if not isinstance(node, exp.Literal) or node.is_string:
        raise refuse.invalid("tablesample_not_a_number", f"TABLESAMPLE takes a number, not {node.sql(dialect='spark')}")
    try:
        return Decimal(node.name)
    except InvalidOperation:
        raise refuse.invalid("tablesample_not_a_number", f"TABLESAMPLE takes a number, not {node.name}") from None


def _random_seed() -> int:
    return secrets.randbelow(2**31)


def sample_condition(select: exp.Expr) -> exp.Expr | None:
    """The condition of a `sampled` SELECT (any integer seed, numeric fraction), else None."""
    if not _star_select(select, _MARKER_SELECT_ARGS):
        return None
    condition = select.args["where"].this
    if not (
        isinstance(condition, exp.LT)
        and isinstance(condition.this, exp.Rand)
        and isinstance(condition.this.this, exp.Literal)
        and not condition.this.this.is_string
        and isinstance(condition.expression, exp.Div)
        and all(
            isinstance(x, exp.Literal) and not x.is_string for x in (condition.expression.this, condition.expression.expression)
        )
    ):
        return None
    source = select.args["from_"].this
    if not isinstance(source, exp.Subquery) or any(v not in (None, False, []) for k, v in source.args.items() if k != "this"):
        return None
    return condition


def canonical(select: exp.Select) -> tuple[exp.Select, str]:
    """`select` as sqlglot reads its own rendering back, and that rendering.

    Comparing renderings of re-parsed trees makes recognition of our own output exact.
    """
    text = render(select)
    for _ in range(3):
        reparsed = sqlglot.parse_one(text, read="spark")
        again = render(reparsed)
        if again == text:
            return reparsed, text  # type: ignore[return-value]
        text = again
    raise refuse.invalid("row_filter_render_unstable", "internal error: the row filter does not render stably")


def derived_table(
    reference: exp.Table, inner: exp.Query, *, columns: tuple[str, ...] = (), default_alias: str | None = None
) -> exp.Subquery:
    """A derived table standing where `reference` stood: same alias, pivots, joins, laterals.

    Without an alias the table's own name (its last part, as written) becomes the alias, so
    column qualifiers and hints that name the table keep working; `default_alias` gives it
    when the name is not a plain identifier (`IDENTIFIER(...)`). `columns` gives a view's
    column names when the caller did not alias the columns.
    """
    alias = reference.args.get("alias")
    if alias is None:
        if default_alias is None and isinstance(reference.this, exp.Identifier):
            ident = reference.this.copy()
        else:
            ident = exp.to_identifier(default_alias or reference.name or "t", quoted=True)
        alias = exp.TableAlias(this=ident)
        if columns:
            alias.set("columns", [exp.to_identifier(c, quoted=True) for c in columns])
    sub = exp.Subquery(this=inner, alias=alias)
    for key in ("pivots", "joins", "laterals"):
        value = reference.args.get(key)
        if value:
            sub.set(key, value)
    return sub


def marker_table(sub: exp.Subquery) -> exp.Table | None:
    """The table of a derived table shaped exactly like `inner_select` output, else None."""
    outer = sub.this
    if sample_condition(outer) is not None:
        outer = outer.args["from_"].this.this
    if not _star_select(outer, _BARRIER_SELECT_ARGS) or render(outer.args["where"].this) != BARRIER:
        return None
    source = outer.args["from_"].this
    if not isinstance(source, exp.Subquery) or any(v not in (None, False, []) for k, v in source.args.items() if k != "this"):
        return None
    select = source.this
    if not _star_select(select, _MARKER_SELECT_ARGS):
        return None
    table = select.args["from_"].this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    for key, value in table.args.items():
        if value not in (None, False, []) and key not in _INNER_ARGS:
            return None
    return table


def _star_select(select: exp.Expr, allowed: frozenset[str]) -> bool:
    """`SELECT * FROM <one source> WHERE ...` with no other clause than `allowed`."""
    if not isinstance(select, exp.Select):
        return False
    for key, value in select.args.items():
        if value not in (None, False, []) and key not in allowed:
            return False
    if select.args.get("where") is None:
        return False
    projections = select.expressions
    if (
        len(projections) != 1
        or not isinstance(projections[0], exp.Star)
        or any(v not in (None, False, []) for v in projections[0].args.values())
    ):
        return False
    source = select.args.get("from_")
    return source is not None and not any(v not in (None, False, []) for k, v in source.args.items() if k != "this")


def qualify_filter_tables(row_filter: exp.Expr, home: TableName) -> exp.Expr:
    """Qualify relation names inside a policy filter against the protected table's namespace.

    Works in place on `row_filter` (pass a copy) and returns it.

    >>> f = sqlglot.parse_one("region IN (SELECT region FROM allowed WHERE who = 'a')", read="spark")
    >>> render(qualify_filter_tables(f, TableName("spark_catalog", "sales", "orders")))
    "region IN (SELECT region FROM `spark_catalog`.`sales`.`allowed` WHERE who = 'a')"
    """
    scope = Scope.view_body(home.catalog, home.schema)
    for ref in relation_references(row_filter, scope):
        node = ref.node
        if ref.kind != "relation" or not isinstance(node, exp.Table):
            continue
        try:
            parts = written_parts(node)
        except Unresolvable:
            continue
        resolved = resolve(parts, ref.scope, lambda _name: False)
        if resolved.kind == "catalog" and resolved.name is not None:
            qualified = quoted_table(resolved.name)
            for key in ("this", "db", "catalog"):
                node.set(key, qualified.args[key])
    return row_filter


def unqualify_columns(root: exp.Expr, parts: tuple[str, ...]) -> None:
    """Columns written as ``db.table.col`` for a reference that is now a derived table.

    A derived table only has a one-part alias, so qualifiers that repeat the reference's
    database (and catalog) are cut down to the table part.
    """
    if len(parts) < 2:
        return
    wanted = tuple(p.casefold() for p in parts)
    for column in root.find_all(exp.Column):
        if column.args.get("db") is None:
            continue
        written = tuple(
            p.this.casefold() for p in (column.args.get(k) for k in ("catalog", "db", "table")) if isinstance(p, exp.Identifier)
        )
        if written and len(written) >= 2 and wanted[-len(written) :] == written:
            column.set("db", None)
            column.set("catalog", None)
