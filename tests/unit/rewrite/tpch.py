"""TPC-H queries and a context with some of its tables protected (for tests and timing)."""

from __future__ import annotations

from tests import tpch_data
from tests.unit.rewrite.fakes import FakeContext

TABLES = {
    "lineitem": (
        "l_orderkey",
        "l_partkey",
        "l_suppkey",
        "l_linenumber",
        "l_quantity",
        "l_extendedprice",
        "l_discount",
        "l_tax",
        "l_returnflag",
        "l_linestatus",
        "l_shipdate",
        "l_commitdate",
        "l_receiptdate",
        "l_shipinstruct",
        "l_shipmode",
        "l_comment",
    ),
    "orders": (
        "o_orderkey",
        "o_custkey",
        "o_orderstatus",
        "o_totalprice",
        "o_orderdate",
        "o_orderpriority",
        "o_clerk",
        "o_shippriority",
        "o_comment",
    ),
    "customer": ("c_custkey", "c_name", "c_address", "c_nationkey", "c_phone", "c_acctbal", "c_mktsegment", "c_comment"),
    "part": ("p_partkey", "p_name", "p_mfgr", "p_brand", "p_type", "p_size", "p_container", "p_retailprice", "p_comment"),
    "partsupp": ("ps_partkey", "ps_suppkey", "ps_availqty", "ps_supplycost", "ps_comment"),
    "supplier": ("s_suppkey", "s_name", "s_address", "s_nationkey", "s_phone", "s_acctbal", "s_comment"),
    "nation": ("n_nationkey", "n_name", "n_regionkey", "n_comment"),
    "region": ("r_regionkey", "r_name", "r_comment"),
}


def queries() -> list[tuple[str, str]]:
    """[(label, sql)] for the 22 queries (DuckDB's texts, tests/tpch_data.py)."""
    return [(f"TPC-H {n}", sql) for n, sql in sorted(tpch_data.queries().items())]


def tpch_context(*, protect: bool = True) -> FakeContext:
    ctx = FakeContext()
    for name, columns in TABLES.items():
        ctx.table(name, *columns)
    if protect:
        ctx.protect("lineitem", "no_air", ("allAuthenticatedUsers",), "l_shipmode <> 'AIR'")
        ctx.protect("orders", "urgent", ("group:sales@example.com",), "o_orderpriority = '1-URGENT'")
        ctx.protect(
            "orders",
            "by_nation",
            ("allAuthenticatedUsers",),
            "o_custkey IN (SELECT c_custkey FROM customer WHERE c_nationkey IN "
            "(SELECT n_nationkey FROM nation WHERE n_comment = SESSION_USER()))",
        )
        ctx.protect("customer", "segment", ("domain:example.com",), "c_mktsegment <> 'AUTOMOBILE'")
    return ctx
