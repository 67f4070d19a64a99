"""The plan rewriter's output runs on a real Spark Connect server and returns the filtered rows.

Plans are built by pyspark, rewritten by `rewrite_plan` for a fake context that mirrors
the server's catalog, and sent to Spark with the session's own client (raw ExecutePlan
requests): no proxy in between. What is checked is the replacement form itself: a
protected read stays addressable by its plan id (``df["col"]``, self-joins, subquery
references), the policy's lookup subquery works, streaming stays streaming, and a plan
rewritten twice (the client re-sends plans) returns the same rows.

One server for the module, tiny tables, short tests (the machine is shared).
"""

from __future__ import annotations

import pytest

from rowgate.embedded.spark import EmbeddedSparkConnect
from rowgate.identity.caller import Caller
from rowgate.rewrite.plan import rewrite_plan
from tests.unit.rewrite.fakes import FakeContext

pytestmark = pytest.mark.spark

ORDERS = [(1, "EU", "ann", 10), (2, "US", "bob", 20), (3, "EU", "bob", 30), (4, "APAC", "ann", 40)]
GRANTS = [("EU", "ann@example.com"), ("APAC", "bob@example.com")]
ANN = Caller("user:ann@example.com")
ANN_IDS = {1, 3}  # the EU rows


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    server = EmbeddedSparkConnect(data_dir=tmp_path_factory.mktemp("plan_walker"), driver_memory="512m")
    server.start()
    session = SparkSession.builder.remote(server.url).create()
    try:
        session.sql("CREATE TABLE orders (id INT, region STRING, owner STRING, amount INT) USING parquet")
        session.sql("CREATE TABLE grants (region STRING, member STRING) USING parquet")
        session.sql("CREATE TABLE lineitem (order_id INT, qty INT) USING parquet")
        session.sql("INSERT INTO orders VALUES " + ", ".join(f"({i}, '{r}', '{o}', {a})" for i, r, o, a in ORDERS))
        session.sql("INSERT INTO grants VALUES " + ", ".join(f"('{r}', '{m}')" for r, m in GRANTS))
        session.sql("INSERT INTO lineitem VALUES (1, 5), (2, 6), (3, 7), (4, 8)")
        session.sql("CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 15")
        yield session
    finally:
        session.stop()
        server.stop()


@pytest.fixture
def ctx():
    """What the proxy would know about the server above, for ann."""
    context = FakeContext(caller=ANN)
    context.table("orders", "id", "region", "owner", "amount")
    context.table("grants", "region", "member")
    context.table("lineitem", "order_id", "qty")
    context.view("big_orders", "SELECT id, amount FROM orders WHERE amount > 15", columns=("id", "amount"))
    context.protect(
        "orders", "by_region", ("allAuthenticatedUsers",), "region IN (SELECT region FROM grants WHERE member = SESSION_USER())"
    )
    return context


def run(spark, rel) -> list[tuple]:
    from pyspark.sql.connect.proto import base_pb2

    table, _, _ = spark.client.to_table(base_pb2.Plan(root=rel), {})
    return sorted(tuple(row.values()) for row in table.to_pylist())


def rewritten(df, ctx):
    rel = df._plan.plan(df._session.client)
    result = rewrite_plan(rel, ctx)
    assert result.filtered
    again = rewrite_plan(rel, ctx)  # what the client sends the next time must not stack
    assert not again.changed and again.filtered
    return rel


def ids(rows) -> set[int]:
    return {row[0] for row in rows}


def test_plain_read(spark, ctx):
    df = spark.table("orders")
    assert len(run(spark, df._plan.plan(spark.client))) == 4  # the policy is what filters
    assert ids(run(spark, rewritten(df, ctx))) == ANN_IDS


def test_plan_id_column_references(spark, ctx):
    df = spark.table("orders")
    rows = run(spark, rewritten(df.filter(df["amount"] > 5).select(df["id"], df["region"]), ctx))
    assert rows == [(1, "EU"), (3, "EU")]


def test_self_joins(spark, ctx):
    from pyspark.sql import functions as F

    df = spark.table("orders")
    aliased = df.alias("a").join(df.alias("b"), F.col("a.id") == F.col("b.id")).select("a.id", "b.owner")
    assert run(spark, rewritten(aliased, ctx)) == [(1, "ann"), (3, "bob")]
    by_plan_id = df.join(df.select(df["id"].alias("i2")), df["id"] == F.col("i2")).select(df["id"])
    assert run(spark, rewritten(by_plan_id, ctx)) == [(1,), (3,)]


def test_three_part_column_qualifier(spark, ctx):
    df = spark.table("orders")
    assert run(spark, rewritten(df.select("default.orders.id"), ctx)) == [(1,), (3,)]


def test_subquery_dataframes(spark, ctx):
    from pyspark.sql import functions as F

    items = spark.table("lineitem")
    orders = spark.table("orders")
    isin = items.where(F.col("order_id").isin(orders.select("id"))).select("order_id")
    assert run(spark, rewritten(isin, ctx)) == [(1,), (3,)]
    scalar = spark.range(1).select(orders.select(F.max("amount")).scalar().alias("m"))
    assert run(spark, rewritten(scalar, ctx)) == [(30,)]


def test_expression_strings_with_subqueries(spark, ctx):
    items = spark.table("lineitem")
    df = items.filter("order_id IN (SELECT id FROM orders)").selectExpr("order_id", "(SELECT count(*) FROM orders) AS n")
    assert run(spark, rewritten(df, ctx)) == [(1, 2), (3, 2)]


def test_view_over_protected_table(spark, ctx):
    df = spark.table("big_orders")
    assert run(spark, rewritten(df.select(df["id"]), ctx)) == [(3,)]


def test_sql_command_echo_runs_filtered(spark, ctx):
    """spark.sql(): the rewritten relation comes back from the server and is sent again."""
    from pyspark.sql.connect.proto import commands_pb2

    cmd = commands_pb2.Command()
    cmd.sql_command.input.sql.query = "SELECT id FROM orders WHERE amount > 0"
    assert rewrite_plan(cmd, ctx).filtered
    _, properties, _ = spark.client.execute_command(cmd)
    echo = properties["sql_command_result"]
    second = rewrite_plan(echo, ctx)
    assert not second.changed and second.filtered
    assert ids(run(spark, echo)) == ANN_IDS


def test_streaming_read_stays_streaming(spark, ctx):
    from pyspark.sql.connect.proto import commands_pb2

    rel = rewritten(spark.readStream.table("orders"), ctx)
    assert rel.filter.input.filter.input.read.is_streaming  # barrier filter over the policy filter
    cmd = commands_pb2.Command()
    start = cmd.write_stream_operation_start
    start.input.CopyFrom(rel)
    start.format = "memory"
    start.query_name = "plan_walker_stream"
    start.available_now = True
    start.output_mode = "append"
    assert rewrite_plan(cmd, ctx).filtered
    _, properties, _ = spark.client.execute_command(cmd)
    query = spark.streams.get(properties["write_stream_operation_start_result"].query_id.id)
    query.awaitTermination(120)
    assert ids(spark.sql("SELECT id FROM plan_walker_stream").collect()) == ANN_IDS
