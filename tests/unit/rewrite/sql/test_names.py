"""Name resolution like Spark's (bypass catalogue A1, A2, A4, A6)."""

import pytest
import sqlglot
from sqlglot import exp

from rowgate.policy.model import TableName
from rowgate.rewrite.sql.names import (
    Unresolvable,
    constant_string,
    parse_multipart,
    resolve,
    written_parts,
)
from rowgate.rewrite.sql.scope import Scope, relation_references


def table_of(sql: str) -> exp.Table:
    return sqlglot.parse_one(sql, read="spark").find(exp.Table)


TOP = Scope.top("spark_catalog", "default")


@pytest.mark.parametrize(
    "text, parts",
    [
        ("orders", ("orders",)),
        ("default.orders", ("default", "orders")),
        ("`default.orders`", ("default.orders",)),
        ("`default`.`orders`", ("default", "orders")),
        ("spark_catalog.default.orders", ("spark_catalog", "default", "orders")),
        (" a . `b``c` ", ("a", "b`c")),
        ("a.", None),
        ("a..b", None),
        ("`a", None),
        ("a b", None),
        ("", None),
        ("a-b", None),
        ("a /* c */ .b", None),
    ],
)
def test_parse_multipart(text, parts):
    assert parse_multipart(text) == parts


@pytest.mark.parametrize(
    "sql, parts",
    [
        ("SELECT * FROM ORDERS", ("ORDERS",)),
        ("SELECT * FROM `orders`", ("orders",)),
        ("SELECT * FROM `default`.`orders`", ("default", "orders")),
        ("SELECT * FROM `default.orders`", ("default.orders",)),
        ("SELECT * FROM spark_catalog.default.orders", ("spark_catalog", "default", "orders")),
        ("SELECT * FROM a.b.c.d", ("a", "b", "c", "d")),
        ("SELECT * FROM IDENTIFIER('default.orders')", ("default", "orders")),
        ("SELECT * FROM IDENTIFIER('`default.orders`')", ("default.orders",)),
        ("SELECT * FROM IDENTIFIER('default' || '.orders')", ("default", "orders")),
    ],
)
def test_written_parts(sql, parts):
    assert written_parts(table_of(sql)) == parts


def test_identifier_with_parameters():
    assert written_parts(table_of("SELECT * FROM IDENTIFIER(:t)"), {"t": "sales.orders"}) == ("sales", "orders")
    with pytest.raises(Unresolvable):
        written_parts(table_of("SELECT * FROM IDENTIFIER(:t)"), {"t": 42})
    with pytest.raises(Unresolvable):
        written_parts(table_of("SELECT * FROM IDENTIFIER(:t)"), {})
    with pytest.raises(Unresolvable):
        written_parts(table_of("SELECT * FROM IDENTIFIER(x)"))  # a column or session variable
    with pytest.raises(Unresolvable):
        written_parts(table_of("SELECT * FROM IDENTIFIER('a b')"))


@pytest.mark.parametrize("sql", ["SELECT * FROM ${x}", "SELECT * FROM $orders", "SELECT * FROM ``"])
def test_unresolvable_names(sql):
    with pytest.raises(Unresolvable):
        written_parts(table_of(sql))


def test_constant_string_positional():
    node = sqlglot.parse_one("SELECT :__rowgate_pos_1", read="spark").expressions[0]
    assert constant_string(node, ["x", "db.t"]) == "db.t"
    assert constant_string(node, ["x"]) is None


@pytest.mark.parametrize(
    "parts, kind, name",
    [
        (("orders",), "catalog", TableName("spark_catalog", "default", "orders")),
        (("ORDERS",), "catalog", TableName("spark_catalog", "default", "orders")),
        (("default", "orders"), "catalog", TableName("spark_catalog", "default", "orders")),
        (("sales", "orders"), "catalog", TableName("spark_catalog", "sales", "orders")),
        (("default.orders",), "catalog", TableName("spark_catalog", "default", "default.orders")),
        (("Spark_Catalog", "Default", "Orders"), "catalog", TableName("spark_catalog", "default", "orders")),
        (("other", "default", "orders"), "catalog", TableName("other", "default", "orders")),
        (("global_temp", "v"), "global_temp_view", None),
        (("GLOBAL_TEMP", "v"), "global_temp_view", None),
        (("spark_catalog", "global_temp", "v"), "global_temp_view", None),
        (("a", "b", "c", "d"), "unresolved", None),
    ],
)
def test_resolve(parts, kind, name):
    r = resolve(parts, TOP, lambda n: False)
    assert r.kind == kind
    assert r.name == name


def test_resolve_uses_current_namespace():
    scope = Scope.top("spark_catalog", "sales")
    assert resolve(("orders",), scope, lambda n: False).name == TableName("spark_catalog", "sales", "orders")
    assert resolve(("default", "orders"), scope, lambda n: False).name == TableName("spark_catalog", "default", "orders")
    scope = Scope.top("lake", "db")
    assert resolve(("x", "orders"), scope, lambda n: False).name == TableName("lake", "x", "orders")


def test_temp_view_shadows_one_part_names_only():
    temp = {"orders"}.__contains__
    assert resolve(("orders",), TOP, temp).kind == "temp_view"
    assert resolve(("Orders",), TOP, lambda n: n.lower() == "orders").kind == "temp_view"
    assert resolve(("default", "orders"), TOP, temp).kind == "catalog"
    inside_view = Scope.view_body("spark_catalog", "default")
    assert resolve(("orders",), inside_view, temp).kind == "catalog"


def test_cte_shadows_one_part_names_only():
    tree = sqlglot.parse_one("WITH orders AS (SELECT 1) SELECT * FROM orders, default.orders, Orders", read="spark")
    refs = relation_references(tree, TOP)
    kinds = [resolve(written_parts(r.node), r.scope, lambda n: False) for r in refs]
    assert [(k.kind, k.cte_exact) for k in kinds] == [("cte", True), ("catalog", True), ("cte", False)]
    assert resolve(("orders",), refs[0].scope, lambda n: False, ctes=False).kind == "catalog"


def test_cte_visibility_non_recursive_and_recursive():
    tree = sqlglot.parse_one(
        "WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a), c AS (SELECT * FROM c) SELECT * FROM c", read="spark"
    )
    seen = [(r.node.name, r.scope.cte_match(r.node.name)) for r in relation_references(tree, TOP)]
    # a's body sees nothing, b's body sees a, c's body does not see c, the main query sees c
    assert seen == [("b", None), ("a", "exact"), ("c", None), ("c", "exact")]
    tree = sqlglot.parse_one(
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r", read="spark"
    )
    assert [r.scope.cte_match("r") for r in relation_references(tree, TOP)] == ["exact", "exact"]


def test_inner_with_shadows_outer_only_inside():
    tree = sqlglot.parse_one(
        "WITH x AS (SELECT 1) SELECT * FROM (WITH orders AS (SELECT 2) SELECT * FROM orders) AS s, orders, x",
        read="spark",
    )
    seen = [(r.node.name, r.scope.cte_match(r.node.name)) for r in relation_references(tree, TOP)]
    assert seen == [("orders", "exact"), ("orders", None), ("x", "exact")]


def test_hints_are_not_reads():
    tree = sqlglot.parse_one("SELECT /*+ BROADCAST(orders) */ * FROM lineitem", read="spark")
    assert [r.node.name for r in relation_references(tree, TOP)] == ["lineitem"]
