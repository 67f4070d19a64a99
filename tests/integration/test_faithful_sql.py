"""One policy must not change anyone's SQL (issue #22).

With one row access policy in force on a table these programs never read, each statement
runs directly against Spark and through the proxy; column names and values must be the
same. Before issue #22 the proxy forwarded sqlglot's rendering of every statement, which
renamed functions (`approx_percentile` -> `percentile_approx`), re-typed literals (`127Y`)
and rewrote syntax sqlglot reads differently (pipe syntax, TIME literals, VARIANT paths).
A protected read inside such a statement is still filtered, and the text around it kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

CALLER = "user:cal@example.com"

# Statements over no table: what Spark answers directly must be what it answers through the proxy.
FAITHFUL = [
    "SELECT approx_percentile(x, 0.5) FROM VALUES (1), (2), (3) AS v(x)",
    "SELECT array_size(array(1, 2, 3))",
    "SELECT struct(a, b) FROM VALUES (1, 2) AS v(a, b)",
    "SELECT nvl(a, b) FROM VALUES (CAST(NULL AS INT), 2) AS v(a, b)",
    "SELECT variant_get(parse_json('{\"a\": 1}'), '$.a', 'int')",
    "SELECT schema_of_variant(parse_json('{\"a\": [1, 2]}'))",
    "SELECT parse_json('{\"a\": 1}'):a",
    "SELECT CAST(TIME '00:01:52' AS INT)",
    "SELECT 3 AS x, 4 AS y |> AGGREGATE GROUP BY 1, 2",
    "select 127Y, -128Y",
    "SELECT X'1010'",
    "SELECT 4 >>> 1, -16 >>> 2",
    "SELECT collate('aaa', 'utf8_binary')",
    "SELECT if(1 < 2, 'a', 'b'), ifnull(NULL, 1), nvl2(NULL, 1, 2), len('abc')",
    "SELECT date_add(DATE '2024-01-30', 2), to_date('2024-02-01') -- a trailing comment",
    "select  sum(x) /* keep */ , count(*) from values (1), (2) as t(x)",
]


@dataclass
class Setup:
    db: str
    direct: object
    caller: object


@pytest.fixture(scope="module")
def setup(proxy_factory, spark_server, module_sessions) -> Setup:
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    db = unique("faithful")
    direct = module_sessions(spark_server.url)
    for sql in (
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.t (id INT, s STRING) USING parquet",
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b'), (101, 'SECRET')",
        f"CREATE TABLE {db}.unrelated (id INT) USING parquet",
    ):
        direct.sql(sql)
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    admin.sql(f"CREATE ROW ACCESS POLICY mine ON {db}.unrelated GRANT TO ('{CALLER}') FILTER USING (id < 100)").collect()
    admin.sql(f"CREATE ROW ACCESS POLICY mine ON {db}.t GRANT TO ('{CALLER}') FILTER USING (id < 100)").collect()
    yield Setup(db, direct, module_sessions(remote_url(proxy.url, user=CALLER)))
    direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def outcome(spark, sql: str):
    try:
        df = spark.sql(sql)
        return "rows", tuple(df.columns), [repr(tuple(r)) for r in df.collect()]  # VariantVal has no ==
    except Exception as e:  # the same error either way, when Spark gets the same text
        return "error", grpc_status(e), str(e).splitlines()[0][:200]


@pytest.mark.parametrize("sql", FAITHFUL)
def test_same_columns_and_values_directly_and_through_the_proxy(setup, sql):
    direct = outcome(setup.direct, sql)
    assert direct[0] == "rows", direct
    assert outcome(setup.caller, sql) == direct


def test_identity_functions_keep_spark_column_names(setup):
    direct = setup.direct.sql("SELECT current_user(), session_user(), user()")
    proxied = setup.caller.sql("SELECT current_user(), session_user(), user()")
    assert proxied.columns == direct.columns
    assert tuple(proxied.first()) == ("cal@example.com",) * 3


def test_dataframe_current_user_keeps_its_column_name(setup):
    from pyspark.sql import functions as F

    direct = setup.direct.range(1).select(F.current_user())
    proxied = setup.caller.range(1).select(F.current_user())
    assert proxied.columns == direct.columns
    assert proxied.first()[0] == "cal@example.com"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT upper(current_user()), UCASE(current_user)",
        "SELECT nvl(user(), 'x'), current_user() = 'a', session_user, session_user()",
        "SELECT concat(current_user(), '!', 1), CASE WHEN current_user() = 'a' THEN 1 ELSE 2 END, if(true, current_user(), 'x')",
        "SELECT current_user() IN ('a', 'b'), lower(session_user()) LIKE 'c%', (length(current_user()) + 1)",
    ],
)
def test_identity_functions_inside_expressions_keep_spark_column_names(setup, sql):
    """Issue #22 item 2: the projection is named after the client's expression, as Spark names it."""
    assert setup.caller.sql(sql).columns == setup.direct.sql(sql).columns
    assert setup.caller.sql(sql).schema.simpleString() == setup.direct.sql(sql).schema.simpleString()


def test_dataframe_identity_inside_expressions_keeps_column_names(setup):
    from pyspark.sql import functions as F

    def columns():
        return [
            F.upper(F.current_user()),
            F.concat(F.current_user(), F.lit("!")),
            F.current_user() == F.lit("x"),
            F.length(F.session_user()),
        ]

    direct = setup.direct.range(1).select(*columns())
    proxied = setup.caller.range(1).select(*columns())
    assert proxied.columns == direct.columns
    assert tuple(proxied.first()) == ("CAL@EXAMPLE.COM", "cal@example.com!", False, len("cal@example.com"))


def test_a_protected_read_inside_is_still_filtered(setup):
    t = f"{setup.db}.t"
    sql = f"SELECT nvl(s, 'x') AS s2, array_size(array(id)) FROM {t} -- trailing\nORDER BY 1"
    rows = setup.caller.sql(sql).collect()
    assert [tuple(r) for r in rows] == [("a", 1), ("b", 1)]
    assert setup.caller.sql(sql).columns == setup.direct.sql(sql).columns
    piped = f"FROM {t} |> WHERE id > 0 |> AGGREGATE count(*) AS n"
    assert [tuple(r) for r in setup.caller.sql(piped).collect()] == [(2,)]
