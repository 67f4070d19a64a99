"""DataFrame filter conditions placed below a policy's barrier (rewrite/plan/placement.py).

Plans are built by pyspark's own client (offline); the SQL rewriter decides what is leakproof
(rewrite/sql/leakproof.py) and `leakproof_placed` names what it placed.
"""

import datetime

import pytest
from pyspark.sql.connect import functions as F

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.rewrite.plan import rewrite_plan
from rowgate.rewrite.plan.reads import filter_text
from rowgate.rewrite.sql.wrap import BARRIER
from tests.unit.rewrite.fakes import FakeContext, tn

EV = tn("db.ev")
COLUMNS = ("id", "secret", "n", "region", "day", "x")
TYPES = ("int", "string", "int", "string", "date", "double")
LOOKUP = "region IN (SELECT region FROM db.acl WHERE who = SESSION_USER())"


def context(policy: str = LOOKUP) -> FakeContext:
    ctx = FakeContext()
    ctx.tables[EV] = RelationInfo(EV, RelationKind.TABLE, COLUMNS, column_types=TYPES)
    acl = tn("db.acl")
    ctx.tables[acl] = RelationInfo(acl, RelationKind.TABLE, ("who", "region"), column_types=("string", "string"))
    return ctx.protect("db.ev", "p", ("user:alice@example.com",), policy)


@pytest.fixture
def spark(offline):
    return offline


def placed(df, ctx=None) -> list[str]:
    """(Assertions compare its result held in a variable: pytest's repr of a DataFrame would
    ask the absent server for its configuration.)"""
    rel = df._plan.plan(df._session._client)
    result = rewrite_plan(rel, ctx or context())
    return sorted(text for table, text in result.leakproof_placed if table == EV)


def inner_condition(df, ctx=None) -> str:
    """The condition of the proxy's filtered read at the bottom of the plan."""
    rel = df._plan.plan(df._session._client)
    rewrite_plan(rel, ctx or context())
    node = rel
    while node.WhichOneof("rel_type") == "filter":
        inner = node.filter.input
        if inner.WhichOneof("rel_type") == "read":
            return node.filter.condition.expression_string.expression
        node = inner
    raise AssertionError(rel)


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda c: c("day") == "2024-01-01", "`day` = '2024-01-01'"),
        (lambda c: c("day") == datetime.date(2024, 1, 2), "`day` = CAST('2024-01-02' AS DATE)"),
        (lambda c: c("day") == F.lit("2024-01-03").cast("date"), "`day` = CAST('2024-01-03' AS DATE)"),
        (lambda c: c("region").isin("eu", "us"), "`region` IN ('eu', 'us')"),
        (lambda c: c("region").like("e%"), "`region` LIKE 'e%'"),
        (lambda c: c("n").isNull() | (c("n") >= -3), "(`n` IS NULL) OR (`n` >= -3)"),
        (lambda c: ~(c("n") < 4), "NOT (`n` < 4)"),
        (lambda c: c("n").between(1, 9), "`n` >= 1 AND `n` <= 9"),
        (lambda c: c("region").eqNullSafe("eu"), "`region` IS NOT DISTINCT FROM 'eu'"),
    ],
)
def test_leakproof_dataframe_conditions_are_placed(spark, build, expected):
    df = spark.table("db.ev")
    got = placed(df.filter(build(F.col)))
    assert got == [expected]


def test_placed_next_to_the_row_filter_below_the_barrier_and_the_callers_filter_stays(spark):
    df = spark.table("db.ev").filter(F.col("day") == "2024-01-01")
    text = inner_condition(df)
    plain = filter_text("SELECT * FROM " + rewrite_sql_text())
    assert text.startswith("TRUE AND (`day` = '2024-01-01') AND ((region IN (SELECT"), text
    assert plain != text
    rel = df._plan.plan(df._session._client)
    rewrite_plan(rel, context())
    assert rel.filter.condition.WhichOneof("expr_type") == "unresolved_function"  # the caller's own, unchanged
    barrier = rel.filter.input
    assert barrier.filter.condition.expression_string.expression == BARRIER  # between the caller's and the row filter


def rewrite_sql_text() -> str:
    from rowgate.rewrite.sql import rewrite_sql

    return rewrite_sql("SELECT * FROM db.ev", context()).sql.removeprefix("SELECT * FROM ")


def test_only_the_leakproof_conjuncts_move(spark):
    df = spark.table("db.ev")
    cond = (
        (F.col("day") == "2024-01-01")
        & (F.lit(1) / (F.col("n") - 7) != 0)
        & (F.col("secret").cast("int") > 0)
        & (F.when(F.col("n") == 7, F.raise_error(F.lit("x"))).otherwise(F.lit(True)))
        & (F.call_function("my_udf", F.col("n")) > 0)  # a registered UDF, called by name
        & (F.col("secret") == 5)  # a string column against a number: ANSI casts the column
        & (F.col("x") == 1.5)  # float literals are not translated
        & (F.col("n") == F.col("id"))  # two columns
    )
    got = placed(df.filter(cond))
    assert got == ["`day` = '2024-01-01'"]


def test_a_chain_of_filters_and_expression_strings(spark):
    df = spark.table("db.ev")
    chained = df.filter(F.col("day") == "2024-01-01").filter("region LIKE 'e%' AND 1 / (n - 7) <> 0").where(F.expr("n > 0"))
    got = placed(chained)
    assert got == ["n > 0 AND region LIKE 'e%' AND `day` = '2024-01-01'"]


def test_columns_of_other_relations_are_not_placed(spark):
    ev = spark.table("db.ev")
    other = spark.table("db.acl")
    got = [
        placed(ev.filter(other["region"] == "eu")),
        placed(ev.filter(ev["region"] == "eu")),
        placed(ev.filter("ev.region = 'eu' AND db.ev.n = 1")),  # qualified names are left above
        placed(ev.filter(F.col("s.f") == 1)),  # nested fields
    ]
    assert got == [[], ["`region` = 'eu'"], [], []]


def test_placement_under_a_plain_policy_too(spark):
    """Every policy has the barrier (issue 21), so a plain policy's read gets the leakproof
    conditions below it as well, or Spark would prune no partition."""
    df = spark.table("db.ev").filter(F.col("day") == "2024-01-01")
    got, inner = placed(df, context("region = 'eu'")), inner_condition(df, context("region = 'eu'"))
    assert got == ["`day` = '2024-01-01'"]
    assert inner == "TRUE AND (`day` = '2024-01-01') AND ((region = 'eu'))"


def test_a_filter_not_directly_over_the_read_places_nothing(spark):
    df = spark.table("db.ev").select("id", "day").filter(F.col("day") == "2024-01-01")
    got = placed(df)
    assert got == []


def test_placed_when_pyspark_records_where_the_condition_was_built(spark):
    """With a live session pyspark 4 adds each expression's call site (`common.origin`);
    placement must see through it, or it would never happen for real clients."""
    df = spark.table("db.ev").filter(F.col("day") == "2024-01-01")
    rel = df._plan.plan(df._session._client)
    condition = rel.filter.condition
    for node in (condition, *condition.unresolved_function.arguments):
        node.common.origin.python_origin.fragment = "__eq__"
        node.common.origin.python_origin.call_site = "app.py:1"
    result = rewrite_plan(rel, context())
    got = sorted(text for table, text in result.leakproof_placed if table == EV)
    assert got == ["`day` = '2024-01-01'"]
