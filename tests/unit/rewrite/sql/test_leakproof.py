"""Which caller predicates may run below a policy's barrier (rewrite/sql/leakproof.py),
and where the rewriter puts them."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.leakproof import is_leakproof, placeable
from tests.unit.rewrite.fakes import FakeContext, tn

TYPES = {
    "day": "date",
    "region": "string",
    "name": "varchar(20)",
    "n": "int",
    "big": "bigint",
    "small": "smallint",
    "x": "double",
    "amount": "decimal(10,2)",
    "ts": "timestamp",
    "flag": "boolean",
    "tags": "array<string>",
}


def kind(column: exp.Column) -> str | None:
    if column.args.get("db") is not None or (column.table and column.table.lower() != "t"):
        return None
    return TYPES.get(column.name.lower())


def ok(text: str) -> bool:
    return is_leakproof(sqlglot.parse_one(text, read="spark"), kind)


@pytest.mark.parametrize(
    "text",
    [
        "region = 'eu'",
        "'eu' = region",
        "region <> 'eu'",
        "region != 'eu'",
        "region < 'm'",
        "region >= 'a'",
        "region <=> 'eu'",
        "t.region = 'eu'",
        "name = 'bob'",
        "n = 5",
        "n > -3",
        "5 <= n",
        "big = 12345678901",
        "small = 2",
        "x = 1.5",
        "x < 1e3",
        "x = 2",
        "flag = TRUE",
        "flag <> FALSE",
        "day = '2024-02-29'",
        "day = DATE '2024-01-01'",
        "day BETWEEN '2024-01-01' AND '2024-01-31'",
        "n BETWEEN 1 AND 10",
        "n NOT BETWEEN 1 AND 10",
        "region IN ('eu', 'us')",
        "n IN (1, 2, 3)",
        "n NOT IN (1, 2)",
        "day IN ('2024-01-01', DATE '2024-01-02')",
        "region IS NULL",
        "amount IS NOT NULL",
        "ts IS NULL",
        "tags IS NULL",
        "region LIKE 'e%'",
        "region NOT LIKE '_u'",
        "region = NULL",
        "n = NULL",
        "region = 'eu' AND (n = 1 OR n = 2)",
        "NOT (region = 'eu' OR day = '2024-01-01')",
        "((n = 1))",
    ],
)
def test_leakproof_forms(text):
    assert ok(text), text


@pytest.mark.parametrize(
    "text",
    [
        # arithmetic raises under ANSI (division by zero, overflow)
        "1 / (n - 5) > 0",
        "n / 0 = 1",
        "n + 1 = 2",
        "n * 1000000 > 1",
        "n % 0 = 1",
        "-n = 3",
        # casts and implicit casts of the column
        "CAST(region AS INT) = 1",
        "TRY_CAST(region AS INT) = 1",
        "region = 5",
        "region = 1.5",
        "5 = region",
        "region IN ('a', 1)",
        "n IN (1, '2')",
        "n = '5'",
        "n = 1.5",
        "big = 99999999999999999999",
        "flag = 'true'",
        "day = '2024-13-01'",
        "day = '2024-02-30'",
        "day = 'yesterday'",
        "day = 20240101",
        "ts = '2024-01-01'",
        "ts = TIMESTAMP '2024-01-01 00:00:00'",
        "amount = 1",
        "amount = 1.5",
        "amount = '1'",
        "x = 'a'",
        "region BETWEEN 1 AND 2",
        "n BETWEEN 1 AND '3'",
        "day = DATE '2024-13-01'",
        "day = -'2024-01-01'",
        # functions: UDFs, raising functions, non-deterministic ones, everything else
        "raise_error('x') IS NULL",
        "assert_true(n > 0) IS NULL",
        "my_udf(n) = 1",
        "rand() > 0.5",
        "upper(region) = 'EU'",
        "CASE WHEN n = 5 THEN raise_error('x') ELSE TRUE END",
        "IF(n = 5, 1/0, 1) = 1",
        "coalesce(n, 1) = 1",
        "length(region) = 2",
        "element_at(tags, 5) = 'a'",
        "tags[5] = 'a'",
        "spark_partition_id() = 0",
        "uuid() = 'a'",
        "current_date() = day",
        # subqueries and columns of other relations
        "n = (SELECT 1)",
        "n IN (SELECT n FROM u)",
        "EXISTS (SELECT 1)",
        "u.n = 1",
        "db.t.n = 1",
        "n = u.n",
        "n = big",
        "region = name",
        "missing = 1",
        # LIKE forms that can raise or are not plain
        "region LIKE 'a\\\\'",
        "region LIKE 'a!%' ESCAPE '!'",
        "region LIKE name",
        "n LIKE '1%'",
        "region RLIKE '('",
        "region ILIKE 'e%'",
        "region LIKE ANY ('a%', 'b%')",
        # mixed: one bad part spoils AND, OR and NOT alike
        "region = 'eu' AND 1/n > 0",
        "region = 'eu' OR 1/n > 0",
        "NOT (1/n > 0)",
        # bare columns and literals
        "flag",
        "TRUE",
        "n",
    ],
)
def test_not_leakproof(text):
    assert not ok(text), text


def place(sql: str, columns=("day", "region", "n"), types=("date", "string", "int")) -> list[str]:
    tree = sqlglot.parse_one(sql, read="spark")
    table = next(t for t in tree.find_all(exp.Table) if t.name == "t")
    return [c.sql("spark") for c in placeable(table, columns, types)]


def test_placement_scope():
    assert place("SELECT * FROM t WHERE day = '2024-01-01' AND 1/n > 0 AND region = 'eu'") == [
        "day = '2024-01-01'",
        "region = 'eu'",
    ]
    assert place("SELECT * FROM t AS o WHERE o.n = 1 AND t.n = 2") == ["n = 1"]
    # joins: qualified columns only, and only joins that keep t's rows
    assert place("SELECT * FROM t JOIN u ON t.n = u.n WHERE t.n = 1 AND n = 2") == ["n = 1"]
    assert place("SELECT * FROM t LEFT JOIN u ON t.n = u.n WHERE t.n = 1") == ["n = 1"]
    assert place("SELECT * FROM u LEFT JOIN t ON t.n = u.n WHERE t.n IS NULL") == []
    assert place("SELECT * FROM t RIGHT JOIN u ON t.n = u.n WHERE t.n IS NULL") == []
    assert place("SELECT * FROM t FULL JOIN u ON t.n = u.n WHERE t.n = 1") == []
    assert place("SELECT * FROM t JOIN u USING (n) WHERE t.n = 1") == []
    assert place("SELECT * FROM t NATURAL JOIN u WHERE t.n = 1") == []
    # renamed columns and pivots change what a name means
    assert place("SELECT * FROM t AS x(n, day, region) WHERE x.n = 1") == []
    assert place("SELECT * FROM t PIVOT (sum(n) FOR region IN ('eu')) WHERE day = '2024-01-01'") == []
    # a subquery's own FROM: its WHERE is the one that counts
    assert place("SELECT * FROM u WHERE EXISTS (SELECT 1 FROM t WHERE t.n = u.n AND t.n = 1)") == ["n = 1"]
    # unknown columns (maybe an outer reference) or unknown types stay above
    assert place("SELECT * FROM t WHERE other = 1") == []
    assert place("SELECT * FROM t WHERE n = 1", types=()) == []
    assert place("SELECT * FROM t") == []


def lookup_ctx() -> FakeContext:
    ctx = FakeContext()
    t = tn("ev")
    ctx.tables[t] = RelationInfo(
        t, RelationKind.TABLE, ("id", "day", "region", "s"), column_types=("int", "date", "string", "string")
    )
    ctx.table("acl", "who", "region")
    ctx.protect("ev", "lookup", ("user:alice@example.com",), "region IN (SELECT region FROM acl WHERE who = SESSION_USER())")
    return ctx


def test_rewriter_places_leakproof_predicates_below_the_barrier():
    ctx = lookup_ctx()
    r = rewrite_sql("SELECT id FROM ev WHERE day = '2024-01-01' AND 1/(id - 3) > 0 AND s LIKE 'a%'", ctx)
    inner = r.sql.split(") AS ev WHERE", 1)[0]
    assert "TRUE AND (day = '2024-01-01' AND s LIKE 'a%') AND ((region IN (SELECT" in inner
    assert inner.endswith(") WHERE SPARK_PARTITION_ID() >= 0")
    assert "1/(id - 3)" not in inner and "1/(id - 3)" in r.sql
    assert r.leakproof_placed == ((tn("ev"), "day = '2024-01-01' AND s LIKE 'a%'"),)
    # the second opinion's reference probe yields the same inner filter
    probe = rewrite_sql("SELECT * FROM " + tn("ev").sql() + " WHERE " + r.leakproof_placed[0][1], ctx)
    assert inner.split("FROM ", 1)[1] in probe.sql


def test_rewriter_keeps_everything_above_when_nothing_is_leakproof_and_places_under_plain_policies_too():
    ctx = lookup_ctx()
    r = rewrite_sql("SELECT id FROM ev WHERE 1/(id - 3) > 0 AND CAST(s AS INT) = 1", ctx)
    assert r.leakproof_placed == () and "TRUE AND ((region IN (SELECT" in r.sql
    plain = FakeContext()
    t = tn("ev")
    plain.tables[t] = RelationInfo(t, RelationKind.TABLE, ("id", "day"), column_types=("int", "date"))
    plain.protect("ev", "eu", ("user:alice@example.com",), "id > 0")
    r = rewrite_sql("SELECT id FROM ev WHERE day = '2024-01-01' AND 1/(id - 3) > 0", plain)
    # every policy has the barrier (issue 21): a plain one's read gets the leakproof part below it
    assert r.leakproof_placed == ((t, "day = '2024-01-01'"),)
    assert "WHERE TRUE AND (day = '2024-01-01') AND ((id > 0))) WHERE SPARK_PARTITION_ID() >= 0) AS ev WHERE" in r.sql


def test_tablesample_keeps_its_order():
    r = rewrite_sql("SELECT id FROM ev TABLESAMPLE (5 ROWS) WHERE day = '2024-01-01'", lookup_ctx())
    assert r.leakproof_placed == ()


def test_the_second_opinion_accepts_any_of_the_expected_blocks_and_nothing_else():
    from rowgate.rewrite.plan import analyzed_tree as tree

    table = tn("ev")
    lines = [
        "Project [id#1]",
        "+- Filter ((true AND (day#2 = 2024-01-01)) AND if ((SPARK_PARTITION_ID() >= 0)) region#3 IN (list#4 []) else false)",
        "   +- SubqueryAlias spark_catalog.default.ev",
        "      +- Relation spark_catalog.default.ev[id#1,day#2,region#3] parquet",
    ]
    nodes = tree.parse_tree(lines)
    placed = tree.filter_block(nodes[1])
    plain = ("Filter (true AND if ((SPARK_PARTITION_ID() >= 0)) region#3 IN (list#4 []) else false)",)
    assert tree.unfiltered_reads(nodes, {table: frozenset({plain, placed})}) == []
    assert tree.unfiltered_reads(nodes, {table: placed}) == []
    assert [r.table for r in tree.unfiltered_reads(nodes, {table: frozenset({plain})})] == [table]
    assert [r.table for r in tree.unfiltered_reads(nodes, {table: plain})] == [table]
