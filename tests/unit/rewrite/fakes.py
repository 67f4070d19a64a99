"""A dict-based `RewriteContext` for the SQL rewriter's tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlglot
from sqlglot import exp

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.identity.caller import Caller
from rowgate.policy.model import RowAccessPolicy, TableName

ALICE = Caller("user:alice@example.com", frozenset({"sales@example.com"}))
BOB = Caller("user:bob@example.com")
EVE = Caller("user:eve@example.com")
ADMIN = Caller("user:root@example.com")

_T0 = datetime(2024, 1, 1, tzinfo=UTC)


def tn(text: str) -> TableName:
    """'a.b.c' -> TableName; 'b.c' / 'c' default to spark_catalog.default."""
    parts = text.split(".")
    while len(parts) < 3:
        parts.insert(0, "default" if len(parts) == 1 else "spark_catalog")
    return TableName(*parts)


def policy(table: str, name: str, grantees: tuple[str, ...], filter_sql: str) -> RowAccessPolicy:
    return RowAccessPolicy(tn(table), name, grantees, filter_sql, _T0, _T0)


@dataclass
class FakeContext:
    caller: Caller = ALICE
    is_admin: bool = False
    current_catalog: str = "spark_catalog"
    current_schema: str = "default"
    tables: dict[TableName, RelationInfo] = field(default_factory=dict)
    policies: dict[TableName, tuple[RowAccessPolicy, ...]] = field(default_factory=dict)
    temp_views: set[str] = field(default_factory=set)
    global_temp_views: set[str] = field(default_factory=set)
    protected_probe: bool = True  # expose has_protected_tables()
    lookups: list[TableName] = field(default_factory=list)

    # -- building --------------------------------------------------------------------
    def table(self, name: str, *columns: str, location: str | None = None) -> FakeContext:
        t = tn(name)
        self.tables[t] = RelationInfo(t, RelationKind.TABLE, tuple(columns), location=location)
        return self

    def view(
        self, name: str, sql: str, *, columns: tuple[str, ...] = (), catalog: str | None = None, schema: str | None = None
    ) -> FakeContext:
        t = tn(name)
        self.tables[t] = RelationInfo(
            t, RelationKind.VIEW, columns, view_sql=sql, view_catalog=catalog or t.catalog, view_schema=schema or t.schema
        )
        return self

    def protect(self, table: str, name: str, grantees: tuple[str, ...], filter_sql: str) -> FakeContext:
        t = tn(table)
        self.policies[t] = self.policies.get(t, ()) + (policy(table, name, grantees, filter_sql),)
        return self

    def temp(self, *names: str) -> FakeContext:
        self.temp_views.update(n.lower() for n in names)
        return self

    def as_caller(self, caller: Caller, *, admin: bool = False) -> FakeContext:
        self.caller = caller
        self.is_admin = admin
        return self

    # -- RewriteContext ----------------------------------------------------------------
    def temp_view_exists(self, name: str) -> bool:
        return name.lower() in self.temp_views

    def lookup(self, name: TableName) -> RelationInfo | None:
        self.lookups.append(name)
        return self.tables.get(name)

    def policies_for(self, name: TableName) -> tuple[RowAccessPolicy, ...]:
        return self.policies.get(name, ())

    def __getattr__(self, item):
        # has_protected_tables only exists when protected_probe is on (like a real snapshot).
        if item == "has_protected_tables" and self.__dict__.get("protected_probe", True):
            return lambda: bool(self.__dict__["policies"])
        raise AttributeError(item)


def shop() -> FakeContext:
    """A small warehouse: orders protected by region, lineitem unprotected, a lookup table."""
    ctx = FakeContext()
    ctx.table("orders", "id", "region", "owner", "amount")
    ctx.table("lineitem", "order_id", "qty")
    ctx.table("customers", "id", "name")
    ctx.table("acl.region_grants", "region", "member")
    ctx.table("sales.orders", "id", "region")  # same table name, other database, unprotected
    ctx.protect("orders", "eu_sales", ("group:sales@example.com",), "region = 'EU'")
    ctx.protect("orders", "own_rows", ("allAuthenticatedUsers",), "owner = SESSION_USER()")
    return ctx


def reparse(sql: str) -> exp.Expression:
    """The rewritten text must always be valid Spark SQL for sqlglot (after the token-level
    forms of rowgate/rewrite/sql/forms.py, e.g. `DESCRIBE t col`)."""
    from sqlglot.dialects.dialect import Dialect

    from rowgate.rewrite.sql.forms import special_form

    spark = Dialect.get_or_raise("spark")
    tokens = spark.tokenize(sql)
    form = special_form(tokens)
    if form is not None:
        tokens = form.tokens
    trees = [t for t in spark.parser(error_level=sqlglot.ErrorLevel.RAISE).parse(tokens, sql) if t is not None]
    assert len(trees) == 1, sql
    return trees[0]


# -- assertions shared by the tests ------------------------------------------------------

ORDERS_FQ = "`spark_catalog`.`default`.`orders`"
# What alice (group sales@) gets for orders in `shop()`.
BARRIER = "WHERE SPARK_PARTITION_ID() >= 0"  # the optimizer barrier above every row filter (wrap.barrier_select)
ALICE_ORDERS = (
    f"(SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE AND ((region = 'EU') OR (owner = 'alice@example.com'))) {BARRIER})"
)
# What bob (no group) gets.
BOB_ORDERS = f"(SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE AND ((owner = 'bob@example.com'))) {BARRIER})"


def rw(sql: str, ctx: FakeContext, **kwargs):
    """rewrite_sql plus the invariants every test relies on.

    - the output parses back with sqlglot's Spark dialect;
    - rewriting the output again (the server echoes it, the client sends it back) changes
      nothing and still reports the same filtering.
    """
    from rowgate.rewrite.sql import rewrite_sql

    result = rewrite_sql(sql, ctx, **kwargs)
    if result.analysed and result.statement_kind not in (
        "set",
        "reset",
        "row_access_policy",
        "show",
        "command",
        "cache",
        "add_resource",
        "empty",
    ):
        reparse(result.sql)
    if result.changed:
        again = rewrite_sql(result.sql, ctx, **kwargs)
        assert again.sql == result.sql, (result.sql, again.sql)
        assert again.filtered == result.filtered
        assert again.policies_applied == result.policies_applied
    else:
        assert result.sql == sql
    return result


def _is_wrapper(select: exp.Expression) -> bool:
    source = select.args.get("from_") if isinstance(select, exp.Select) else None
    return (
        isinstance(select, exp.Select)
        and select.args.get("where") is not None
        and len(select.expressions) == 1
        and isinstance(select.expressions[0], exp.Star)
        and isinstance(select.parent, exp.Subquery)
        and source is not None
        and isinstance(source.this, exp.Table)
        and bool(source.this.catalog)
        and _under_barrier(select.parent)
    )


def _under_barrier(sub: exp.Expression) -> bool:
    """`sub` is the FROM of `SELECT * FROM (sub) WHERE spark_partition_id() >= 0` (wrap.barrier_select)."""
    source = sub.parent
    outer = source.parent if isinstance(source, exp.From) else None
    where = outer.args.get("where") if isinstance(outer, exp.Select) else None
    return where is not None and where.this.sql("spark") == "SPARK_PARTITION_ID() >= 0"


def unfiltered(sql: str, table: str = "orders") -> list[exp.Table]:
    """References named `table` in `sql` that are not the inner table of a filtering wrapper.

    A wrapper is `(SELECT * FROM <cat.db.t> WHERE ...)` under the barrier; anything else named like the table (a
    bare reference, a CTE reference) is returned, so tests can count what is left unfiltered.
    Tables inside a wrapper's filter (a policy's lookup tables) are not counted.
    """
    tree = reparse(sql)
    out = []
    for node in tree.find_all(exp.Table):
        if node.name.lower() != table.lower():
            continue
        source = node.parent
        if isinstance(source, exp.From) and _is_wrapper(source.parent):
            continue
        ancestor, inside_filter = node.parent, False
        while ancestor is not None:
            if isinstance(ancestor, exp.Where) and _is_wrapper(ancestor.parent):
                inside_filter = True
                break
            ancestor = ancestor.parent
        if not inside_filter:
            out.append(node)
    return out
