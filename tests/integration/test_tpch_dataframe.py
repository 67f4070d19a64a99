"""TPC-H queries 1, 3, 5, 6 and 10 written with the DataFrame API, through the proxy, per caller.

Row access policies go on lineitem, orders, customer and supplier of the shared `tpch`
database (tests/tpch.py loads the tables DuckDB's dbgen generates once per Spark server;
another module may have loaded them already). The policies live in this module's own proxy
(its own policy store), so other modules that read `tpch` through their proxies are not
affected.

The oracle: for every caller, a database of pre-filtered copies made DIRECTLY on Spark
(`CREATE TABLE ... AS SELECT * FROM tpch.<t> WHERE (<filter 1>) OR (<filter 2>)`, with the
filters of the policies that grant the caller, `WHERE FALSE` when none does). The same
DataFrame program then runs through the proxy against `tpch` and directly against the
copies, and the results must be equal row for row.

The filters use the things the proxy must get right: OR of several policies, group and
domain grantees, `allAuthenticatedUsers`, lookup subqueries (a policy on lineitem reads
`orders`, itself protected, with the policy owner's rights), and tables with no grant for
a caller (zero rows).
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from tests import tpch
from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN

pytestmark = pytest.mark.spark

DB = "tpch"
TABLES = ("lineitem", "orders", "customer", "supplier", "nation", "region")
PROTECTED = ("lineitem", "orders", "customer", "supplier")

# (table, policy, grantees, filter). Unqualified names in a filter resolve in the table's
# own database (tpch), like the proxy places them.
POLICIES = [
    ("lineitem", "li_ann", ["user:ann@example.com"], "l_returnflag <> 'R'"),
    ("lineitem", "li_all", ["allAuthenticatedUsers"], "l_shipmode = 'AIR'"),
    (
        "lineitem",
        "li_europe",
        ["group:europe@example.com"],
        "l_orderkey IN (SELECT o_orderkey FROM orders WHERE o_orderdate < DATE'1995-06-01')",
    ),
    ("orders", "o_ann", ["user:ann@example.com"], "o_orderpriority IN ('1-URGENT', '2-HIGH', '3-MEDIUM')"),
    ("orders", "o_europe", ["group:europe@example.com"], "o_custkey % 2 = 0"),
    ("orders", "o_org", ["domain:example.org"], "o_orderstatus = 'F'"),
    (
        "customer",
        "c_ann",
        ["user:ann@example.com"],
        "c_nationkey IN (SELECT n_nationkey FROM nation WHERE n_regionkey IN (1, 2, 3))",
    ),
    ("customer", "c_shared", ["group:europe@example.com", "domain:example.org"], "c_acctbal > 0"),
    ("supplier", "s_ann", ["user:ann@example.com"], "s_nationkey < 15"),
    ("supplier", "s_europe", ["group:europe@example.com"], "s_suppkey % 3 <> 0"),
]

# Callers (header identity) and, worked out by hand from the grantee rules, the policies
# that grant each of them. carl has no grant on supplier; nobody has a grant for admin.
CALLERS = {
    "ann": {"user": "user:ann@example.com", "groups": None},
    "bob": {"user": "user:bob@example.com", "groups": "europe@example.com"},
    "carl": {"user": "user:carl@example.org", "groups": None},
}
GRANTED = {
    "ann": {"li_ann", "li_all", "o_ann", "c_ann", "s_ann"},
    "bob": {"li_all", "li_europe", "o_europe", "c_shared", "s_europe"},
    "carl": {"li_all", "o_org", "c_shared"},
}


def _date(text: str):
    return F.lit(text).cast("date")


def q1(t):
    li = t("lineitem")
    charge = F.col("l_extendedprice") * (1 - F.col("l_discount"))
    return (
        li.where(F.col("l_shipdate") <= F.date_sub(_date("1998-12-01"), 90))
        .groupBy("l_returnflag", "l_linestatus")
        .agg(
            F.sum("l_quantity").alias("sum_qty"),
            F.sum("l_extendedprice").alias("sum_base_price"),
            F.sum(charge).alias("sum_disc_price"),
            F.sum(charge * (1 + F.col("l_tax"))).alias("sum_charge"),
            F.avg("l_quantity").alias("avg_qty"),
            F.avg("l_extendedprice").alias("avg_price"),
            F.avg("l_discount").alias("avg_disc"),
            F.count(F.lit(1)).alias("count_order"),
        )
        .orderBy("l_returnflag", "l_linestatus")
    )


def q3(t):
    c = t("customer").where(F.col("c_mktsegment") == "BUILDING")
    o = t("orders").where(F.col("o_orderdate") < _date("1995-03-15"))
    li = t("lineitem").where(F.col("l_shipdate") > _date("1995-03-15"))
    joined = c.join(o, c["c_custkey"] == o["o_custkey"]).join(li, li["l_orderkey"] == o["o_orderkey"])
    return (
        joined.groupBy("l_orderkey", "o_orderdate", "o_shippriority")
        .agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))
        .select("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
        .orderBy(F.desc("revenue"), "o_orderdate", "l_orderkey")
        .limit(10)
    )


def q5(t):
    r = t("region").where(F.col("r_name") == "ASIA")
    n, s, c, li = t("nation"), t("supplier"), t("customer"), t("lineitem")
    o = t("orders").where(
        (F.col("o_orderdate") >= _date("1994-01-01")) & (F.col("o_orderdate") < F.add_months(_date("1994-01-01"), 12))
    )
    joined = (
        r.join(n, n["n_regionkey"] == r["r_regionkey"])
        .join(s, s["s_nationkey"] == n["n_nationkey"])
        .join(li, li["l_suppkey"] == s["s_suppkey"])
        .join(o, o["o_orderkey"] == li["l_orderkey"])
        .join(c, (c["c_custkey"] == o["o_custkey"]) & (c["c_nationkey"] == s["s_nationkey"]))
    )
    return (
        joined.groupBy("n_name")
        .agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))
        .orderBy(F.desc("revenue"), "n_name")
    )


def q6(t):
    li = t("lineitem")
    return li.where(
        (F.col("l_shipdate") >= _date("1994-01-01"))
        & (F.col("l_shipdate") < F.add_months(_date("1994-01-01"), 12))
        & F.col("l_discount").between(F.lit(0.05).cast("decimal(15,2)"), F.lit(0.07).cast("decimal(15,2)"))
        & (F.col("l_quantity") < 24)
    ).agg(F.sum(F.col("l_extendedprice") * F.col("l_discount")).alias("revenue"))


def q10(t):
    c, n = t("customer"), t("nation")
    o = t("orders").where(
        (F.col("o_orderdate") >= _date("1993-10-01")) & (F.col("o_orderdate") < F.add_months(_date("1993-10-01"), 3))
    )
    li = t("lineitem").where(F.col("l_returnflag") == "R")
    joined = (
        c.join(o, c["c_custkey"] == o["o_custkey"])
        .join(li, li["l_orderkey"] == o["o_orderkey"])
        .join(n, c["c_nationkey"] == n["n_nationkey"])
    )
    return (
        joined.groupBy("c_custkey", "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment")
        .agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))
        .select("c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment")
        .orderBy(F.desc("revenue"), "c_custkey")
        .limit(20)
    )


QUERIES = {1: q1, 3: q3, 5: q5, 6: q6, 10: q10}


def run(spark, database: str, query) -> list[tuple]:
    return [tuple(r) for r in query(lambda name: spark.table(f"{database}.{name}")).collect()]


def oracle_filter(caller: str, table: str) -> str:
    filters = [f for t, name, _, f in POLICIES if t == table and name in GRANTED[caller]]
    if filters:
        return " OR ".join(f"({f})" for f in filters)
    return "FALSE" if table in PROTECTED else "TRUE"


@pytest.fixture(scope="module")
def tpch_proxy(proxy_factory):
    return proxy_factory("--identity", "header", "--admin", ADMIN)


@pytest.fixture(scope="module")
def world(tpch_proxy, spark_server, module_sessions):
    """Loads TPC-H (once per server), sets the policies, makes one oracle database per caller."""
    direct = module_sessions(spark_server.url)
    tpch.load(direct, DB)
    admin = module_sessions(remote_url(tpch_proxy.url, user=ADMIN))
    for table, name, grantees, sql_filter in POLICIES:
        members = ", ".join(f"'{g}'" for g in grantees)
        admin.sql(f"CREATE ROW ACCESS POLICY {name} ON {DB}.{table} GRANT TO ({members}) FILTER USING ({sql_filter})")
    direct.sql(f"USE {DB}")  # the filters' lookup subqueries name tpch tables unqualified
    oracles = {}
    for caller in CALLERS:
        copy = unique(f"tpch_oracle_{caller}")
        direct.sql(f"CREATE DATABASE {copy}")
        for table in TABLES:
            direct.sql(
                f"CREATE TABLE {copy}.{table} USING parquet AS SELECT * FROM {DB}.{table} WHERE {oracle_filter(caller, table)}"
            )
        oracles[caller] = copy
    proxied = {
        caller: module_sessions(remote_url(tpch_proxy.url, user=who["user"], groups=who["groups"]))
        for caller, who in CALLERS.items()
    }
    try:
        yield {"direct": direct, "admin": admin, "oracles": oracles, "proxied": proxied}
    finally:
        for copy in oracles.values():
            direct.sql(f"DROP DATABASE IF EXISTS {copy} CASCADE")


def test_oracle_copies_are_really_filtered(world):
    """The comparison below is only worth something if the copies differ from the full tables
    and are not all empty (the generated data must meet the filters)."""
    direct = world["direct"]
    full = {t: direct.table(f"{DB}.{t}").count() for t in PROTECTED}
    for caller, copy in world["oracles"].items():
        counts = {t: direct.table(f"{copy}.{t}").count() for t in PROTECTED}
        assert all(counts[t] < full[t] for t in PROTECTED), (caller, counts, full)
        expected_empty = {t for t in PROTECTED if oracle_filter(caller, t) == "FALSE"}
        assert {t for t, n in counts.items() if n == 0} == expected_empty, (caller, counts)
    assert oracle_filter("carl", "supplier") == "FALSE"


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_protected_tables_count_like_the_oracle(world, caller):
    spark, copy = world["proxied"][caller], world["oracles"][caller]
    direct = world["direct"]
    for table in TABLES:
        assert spark.table(f"{DB}.{table}").count() == direct.table(f"{copy}.{table}").count(), (caller, table)


@pytest.mark.parametrize("number", sorted(QUERIES))
@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_tpch_query_matches_the_oracle(world, caller, number):
    query = QUERIES[number]
    through_proxy = run(world["proxied"][caller], DB, query)
    oracle = run(world["direct"], world["oracles"][caller], query)
    assert through_proxy == oracle


@pytest.mark.parametrize("number", sorted(QUERIES))
def test_every_query_is_changed_by_the_policies_for_someone(world, number):
    """Guards against a vacuous oracle: each query's unfiltered answer differs from at least one
    caller's answer, and at least one caller gets a non-empty answer."""
    query = QUERIES[number]
    unfiltered = run(world["direct"], DB, query)
    answers = {caller: run(world["direct"], copy, query) for caller, copy in world["oracles"].items()}
    assert unfiltered
    assert any(rows != unfiltered for rows in answers.values()), number
    assert any(rows for rows in answers.values()), number


def test_admin_without_grant_gets_empty_answers(world):
    """Admins are filtered like anyone (BigQuery): no policy grants admin@example.com except
    li_all (allAuthenticatedUsers), so only lineitem-only queries return rows."""
    admin = world["admin"]
    assert run(admin, DB, q3) == []
    assert run(admin, DB, q5) == []
    assert run(admin, DB, q10) == []
    direct = world["direct"]
    air = lambda name: direct.table(f"{DB}.{name}").where(F.col("l_shipmode") == "AIR")  # noqa: E731
    assert run(admin, DB, q1) == [tuple(r) for r in q1(air).collect()]
    assert run(admin, DB, q6) == [tuple(r) for r in q6(air).collect()]
