"""Plans as pyspark's own client builds them (no server: only the plan builder is used)."""

import grpc
import pytest
from pyspark.sql.connect import functions as F
from pyspark.sql.connect import plan as P
from pyspark.sql.types import IntegerType

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import TempView, UserCode, rewrite_plan
from tests.unit.rewrite.fakes import tn
from tests.unit.rewrite.plan.build import ALICE_FILTER, ALICE_ORDERS, ORDERS_ID, filtered_read, read_of, stable


@pytest.fixture
def spark(offline):
    return offline


def rel_of(df):
    return df._plan.plan(df._session._client)


def reads(rel):
    """Every filtered read in `rel`, as (plan_id, identifier, condition)."""
    out, stack = [], [rel]
    while stack:
        node = stack.pop()
        for field, value in node.ListFields():
            if field.message_type is None:
                continue
            items = value if field.is_repeated else [value]
            for item in items:
                if not hasattr(item, "ListFields"):
                    continue
                if item.DESCRIPTOR.name == "Relation" and filtered_read(item) is not None:
                    out.append((item.common.plan_id if item.HasField("common") else None, *filtered_read(item)))
                stack.append(item)
    if rel.DESCRIPTOR.name == "Relation" and filtered_read(rel) is not None:
        out.append((rel.common.plan_id, *filtered_read(rel)))
    return sorted(out, key=str)


def test_table_with_column_references(spark, ctx):
    df = spark.table("orders")
    rel = rel_of(df.filter(df["amount"] > 5).select(df["id"], "region"))
    r = stable(rel, ctx)
    assert r.filtered
    assert reads(rel) == [(df._plan._plan_id, ORDERS_ID, ALICE_FILTER)]


def test_self_join_keeps_both_plan_ids(spark, ctx):
    df = spark.table("orders")
    joined = df.alias("a").join(df.alias("b"), F.col("a.id") == F.col("b.id")).select("a.id", "b.region")
    rel = rel_of(joined)
    stable(rel, ctx)
    assert reads(rel) == [(df._plan._plan_id, ORDERS_ID, ALICE_FILTER)] * 2


def test_isin_subquery_dataframe(spark, ctx):
    items = spark.table("lineitem")
    rel = rel_of(items.where(F.col("order_id").isin(spark.table("orders").select("id"))))
    assert rel.WhichOneof("rel_type") == "with_relations"
    r = stable(rel, ctx)
    assert r.filtered and len(reads(rel)) == 1 and r.tables_read == {tn("orders"), tn("lineitem")}


def test_filter_string_and_select_expr(spark, ctx):
    items = spark.table("lineitem")
    rel = rel_of(items.filter("order_id IN (SELECT id FROM orders)").selectExpr("qty", "(SELECT max(amount) FROM orders) AS m"))
    r = stable(rel, ctx)
    assert r.filtered
    texts = [
        rel.project.expressions[1].expression_string.expression,
        rel.project.input.filter.condition.expression_string.expression,
    ]
    assert all(ALICE_ORDERS[1:-1] in t for t in texts)


def test_current_user_function(spark, ctx):
    rel = rel_of(spark.table("lineitem").select(F.current_user().alias("me"), F.expr("session_user()")))
    r = stable(rel, ctx)
    assert rel.project.expressions[0].alias.expr.literal.string == "alice@example.com"
    # the projection keeps the name Spark gives the client's text (issue #22)
    assert rel.project.expressions[1].expression_string.expression == "'alice@example.com' AS `session_user()`"
    assert r.identity_bound


def test_read_stream_table(spark, ctx):
    rel = rel_of(spark.readStream.table("orders"))
    stable(rel, ctx)
    assert read_of(rel).read.is_streaming


def test_time_travel_read_option(spark, ctx):
    rel = rel_of(spark.read.option("versionAsOf", 0).table("orders"))
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_sql_with_args_and_dataframe(spark, ctx):
    query = P.SQL("SELECT * FROM IDENTIFIER(:t) WHERE id > :n", named_args={"t": F.lit("orders"), "n": F.lit(1)})
    cmd = query.command(spark._client)
    r = stable(cmd, ctx)
    assert r.filtered and ALICE_ORDERS in cmd.sql_command.input.sql.query


def test_create_views(spark, ctx):
    df = spark.table("orders")
    cmd = P.CreateView(df._plan, "mine", False, True).command(spark._client)
    assert stable(cmd, ctx).temp_views_created == (TempView("mine", False, True),)
    cmd = P.CreateView(df._plan, "shared", True, True).command(spark._client)
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)


def test_write_insert_into(spark, ctx):
    writer = spark.table("lineitem").write.mode("append")
    writer._write.table_name = "orders"
    writer._write.table_save_method = "insert_into"
    with pytest.raises(Refusal) as e:
        rewrite_plan(writer._write.command(spark._client), ctx)
    assert "FILTER USING (TRUE)" in e.value.message


def test_python_udf_reported(spark, ctx):
    add_one = F.udf(lambda x: x + 1, IntegerType())
    rel = rel_of(spark.table("lineitem").select(add_one("qty")))
    r = rewrite_plan(rel, ctx)
    assert [u.kind for u in r.user_code] == ["python_udf"] and r.user_code[0].action == "call"
    assert isinstance(r.user_code[0], UserCode)


def test_catalog_api(spark, ctx):
    rel = P.SetCurrentDatabase("sales").plan(spark._client)
    assert rewrite_plan(rel, ctx).catalog_ops[0].op == "set_current_database"


def test_tvf(spark, ctx):
    assert not stable(rel_of(spark.tvf.range(3)), ctx).changed
