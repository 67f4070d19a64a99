"""Without policies the proxy must be invisible: every call gives what Spark itself gives.

Each test runs the same pyspark program against the Spark Connect server directly and
through the proxy and compares the outcomes (rows, schemas, errors).
"""

from __future__ import annotations

import threading

import grpc
import pandas as pd
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.connect.proto import base_pb2

from tests.conftest import unique
from tests.deadlines import scaled, wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def plain_proxy(proxy_factory):
    """A proxy with no policies: here it must be indistinguishable from Spark itself."""
    return proxy_factory("--identity", "header")


@pytest.fixture
def proxied(plain_proxy, sessions):
    return sessions(plain_proxy.url)


def both(direct, proxied, program):
    return program(direct), program(proxied)


def test_sql_ddl_dml_and_queries(direct, proxied):
    table = unique("sales")
    proxied.sql(f"CREATE TABLE {table} (id INT, region STRING, amount DOUBLE) USING parquet")
    proxied.sql(f"INSERT INTO {table} VALUES (1, 'eu', 10.5), (2, 'us', 20.0), (3, 'eu', 7.25)")
    query = f"SELECT region, count(*) AS n, sum(amount) AS total FROM {table} GROUP BY region ORDER BY region"
    d, p = both(direct, proxied, lambda s: s.sql(query).collect())
    assert d == p
    assert [tuple(r) for r in p] == [("eu", 2, 17.75), ("us", 1, 20.0)]
    proxied.sql(f"DROP TABLE {table}")
    assert not direct.catalog.tableExists(table)


def test_dataframe_joins_aggregations_windows(direct, proxied):
    def program(spark):
        people = spark.createDataFrame([(1, "ann", 10), (2, "bob", 20), (3, "cy", 10)], ["id", "name", "dept"])
        depts = spark.createDataFrame([(10, "eng"), (20, "ops")], ["dept", "dname"])
        joined = people.join(depts, "dept")
        ranked = joined.withColumn("rank", F.row_number().over(Window.partitionBy("dname").orderBy(F.desc("id"))))
        agg = joined.groupBy("dname").agg(F.count("*").alias("n"), F.max("id").alias("max_id"))
        return sorted(map(tuple, ranked.collect())), sorted(map(tuple, agg.collect())), ranked.schema

    d, p = both(direct, proxied, program)
    assert d == p
    assert len(p[0]) == 3


def test_create_dataframe_from_pandas_travels_as_cached_artifact(direct, proxied):
    rows = 60_000
    pdf = pd.DataFrame({"k": range(rows), "v": [f"value-{i:08d}" for i in range(rows)]})

    def program(spark):
        # Above this threshold pyspark uploads the data as a `cache/<sha256>` artifact
        # (AddArtifacts) and plans a cached_local_relation instead of inlining it.
        spark.conf.set("spark.sql.session.localRelationCacheThreshold", str(256 * 1024))
        df = spark.createDataFrame(pdf)
        return df.count(), df.agg(F.sum("k")).first()[0], df.orderBy(F.desc("k")).first()

    d, p = both(direct, proxied, program)
    assert d == p == (rows, rows * (rows - 1) // 2, p[2])


def test_temp_views(direct, proxied):
    def program(spark):
        view = unique("v")
        spark.range(5).createOrReplaceTempView(view)
        out = spark.sql(f"SELECT sum(id) AS s FROM {view}").first()["s"]
        tables = [t.name for t in spark.catalog.listTables() if t.name == view]
        spark.catalog.dropTempView(view)
        return out, tables == [view]

    d, p = both(direct, proxied, program)
    assert d == p == (10, True)


def test_python_udf(direct, proxied):
    @F.udf("long")
    def plus_one(x):
        return x + 1

    d, p = both(direct, proxied, lambda s: s.range(4).select(plus_one("id").alias("y")).collect())
    assert d == p
    assert [r.y for r in p] == [1, 2, 3, 4]


def _error_of(program):
    with pytest.raises(PySparkException) as info:
        program()
    err = info.value
    return type(err), err.getCondition(), str(err).splitlines()[0]


def test_analysis_error_is_the_same(direct, proxied):
    d = _error_of(lambda: direct.sql("SELECT no_such_column FROM range(1)").collect())
    p = _error_of(lambda: proxied.sql("SELECT no_such_column FROM range(1)").collect())
    assert d == p
    assert d[0].__name__ == "AnalysisException"
    assert d[1] == "UNRESOLVED_COLUMN.WITH_SUGGESTION"


def test_runtime_error_is_the_same(direct, proxied):
    query = "SELECT raise_error('boom from the executor') FROM range(1)"
    d = _error_of(lambda: direct.sql(query).collect())
    p = _error_of(lambda: proxied.sql(query).collect())
    assert d == p
    assert "boom from the executor" in p[2]


def test_interrupt_all_stops_a_long_job(proxied):
    outcome = {}

    def run():
        try:
            proxied.range(0, 10**13, numPartitions=2).selectExpr("sum(id * 7 % 13)").collect()
            outcome["result"] = "finished"
        except Exception as e:
            outcome["error"] = e

    worker = threading.Thread(target=run)
    worker.start()
    interrupted = wait_until(proxied.interruptAll, "a running operation for interruptAll to stop", 15, interval=0.5)
    worker.join(timeout=scaled(60))
    assert not worker.is_alive()
    assert interrupted, "interruptAll found no running operation"
    assert "error" in outcome, outcome
    assert "OPERATION_CANCELED" in str(outcome["error"]) or "cancel" in str(outcome["error"]).lower()


def test_reattach_on_a_result_of_several_megabytes(direct, proxied):
    # The test server cuts every stream after 123 bytes, so this result only arrives
    # through many ReattachExecute calls, each relayed by the proxy.
    def program(spark):
        pdf = spark.range(400_000).selectExpr("id", "sha2(cast(id AS STRING), 256) AS h").toPandas()
        return len(pdf), int(pdf["id"].sum()), pdf["h"].iloc[-1]

    d, p = both(direct, proxied, program)
    assert d == p
    assert p[0] == 400_000


def test_stop_releases_the_session(plain_proxy, sessions):
    proxy = plain_proxy
    spark = sessions(proxy.url)
    spark.range(1).collect()
    session_id = spark.client._session_id
    server_side = spark.client._server_session_id
    assert server_side
    spark.stop()
    # The upstream remembers released sessions: the same (caller, session_id) is refused.
    with grpc.insecure_channel(proxy.target) as channel:
        config = channel.unary_unary(
            "/spark.connect.SparkConnectService/Config",
            request_serializer=base_pb2.ConfigRequest.SerializeToString,
            response_deserializer=base_pb2.ConfigResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as info:
            config(
                base_pb2.ConfigRequest(
                    session_id=session_id,
                    user_context=base_pb2.UserContext(user_id="whoever"),
                    operation=base_pb2.ConfigRequest.Operation(get_all=base_pb2.ConfigRequest.GetAll()),
                ),
                timeout=30,
            )
    assert "SESSION_CLOSED" in info.value.details()


def test_conf_get_set(direct, proxied):
    def program(spark):
        spark.conf.set("spark.sql.shuffle.partitions", "7")
        value = spark.conf.get("spark.sql.shuffle.partitions")
        spark.conf.unset("spark.sql.shuffle.partitions")
        return value, spark.conf.get("spark.sql.session.timeZone") is not None

    d, p = both(direct, proxied, program)
    assert d == p == ("7", True)


def test_schema_and_explain(direct, proxied):
    def program(spark):
        df = spark.range(10).selectExpr("id", "id % 3 AS k").groupBy("k").count()
        return df.schema, "HashAggregate" in df._explain_string(extended=False)

    d, p = both(direct, proxied, program)
    assert d == p
    assert p[1]


def test_compressed_plans_are_opened_and_forwarded(direct, proxied):
    def program(spark):
        # A tiny threshold makes pyspark zstd-compress every plan (Plan.compressed_operation).
        spark.conf.set("spark.connect.session.planCompression.threshold", "64")
        df = spark.range(100)
        for i in range(30):
            df = df.withColumn(f"c{i}", F.col("id") * i + F.lit(i))
        return df.agg(F.sum("c29")).first()[0], df.schema

    d, p = both(direct, proxied, program)
    assert d == p
    assert p[0] == sum(i * 29 + 29 for i in range(100))


def test_deeply_nested_plans_pass_through(direct, proxied):
    # Each chained operator nests the plan one Relation deeper; sixty of them are far past
    # protobuf's default decoding depth of 100.
    def program(spark):
        df = spark.range(10)
        for i in range(60):
            df = df.withColumn(f"c{i % 5}", F.col("id") + i)
        return sorted(map(tuple, df.collect()))

    d, p = both(direct, proxied, program)
    assert d == p and len(p) == 10
