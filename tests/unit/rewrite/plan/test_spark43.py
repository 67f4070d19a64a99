"""What Spark 4.2/4.3 added to the protocol, as the plan walker judges it.

`nearestByJoin` and `zip` filter both inputs like a join; `read.changes` is time travel;
the new catalog calls are judged as their SQL twins (rewrite/plan/catalog_statements.py).
"""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import rewrite_plan
from tests.unit.rewrite.fakes import ADMIN
from tests.unit.rewrite.plan.build import ALICE_FILTER, ORDERS_ID, Relation, filtered_read, table

LINEITEM_ID = "`spark_catalog`.`default`.`lineitem`"


def _filtered_orders(rel) -> bool:
    return filtered_read(rel) == (ORDERS_ID, ALICE_FILTER)


@pytest.mark.parametrize("kind", ["zip", "nearest_by_join"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_both_inputs_of_the_new_binary_relations_are_filtered(ctx, kind, side):
    rel = Relation()
    node = getattr(rel, kind)
    getattr(node, side).CopyFrom(table("orders"))
    getattr(node, "right" if side == "left" else "left").CopyFrom(table("lineitem"))
    if kind == "nearest_by_join":
        node.ranking_expression.expression_string.expression = "abs(amount - qty)"
        node.num_results = 1
    result = rewrite_plan(rel, ctx)
    assert result.filtered and _filtered_orders(getattr(node, side))
    other = getattr(node, "right" if side == "left" else "left")
    assert other.read.named_table.unparsed_identifier == LINEITEM_ID


def changes(name: str, **options: str) -> Relation:
    rel = Relation()
    rel.relation_changes.unparsed_identifier = name
    for key, value in options.items():
        rel.relation_changes.options[key] = value
    return rel


@pytest.mark.parametrize("admin", [False, True])
def test_the_change_feed_of_a_protected_table_is_time_travel(ctx, admin):
    ctx.is_admin = admin  # admins' reads are filtered like anyone's: the grant is needed
    with pytest.raises(Refusal) as e:
        rewrite_plan(changes("orders", startingVersion="0"), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "FILTER USING (TRUE)" in e.value.message
    assert "spark_catalog.default.orders" in e.value.message


def test_the_change_feed_with_full_access_is_forwarded_pinned(ctx):
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    rel = changes("orders", startingVersion="0")
    rewrite_plan(rel, ctx)
    assert rel.relation_changes.unparsed_identifier == ORDERS_ID
    assert dict(rel.relation_changes.options) == {"startingVersion": "0"}


def test_the_change_feed_of_an_unprotected_table_is_pinned(ctx):
    rel = changes("lineitem")
    result = rewrite_plan(rel, ctx)
    assert not result.filtered and rel.relation_changes.unparsed_identifier == LINEITEM_ID


def catalog(op: str, **fields) -> Relation:
    rel = Relation()
    body = getattr(rel.catalog, op)
    for key, value in fields.items():
        setattr(body, key, value)
    return rel


@pytest.mark.parametrize("op", ["list_partitions", "get_table_properties", "get_create_table_string", "analyze_table"])
def test_statistics_of_a_protected_table_need_the_grant(ctx, op):
    for admin in (False, True):
        ctx.is_admin = admin
        with pytest.raises(Refusal) as e:
            rewrite_plan(catalog(op, table_name="orders"), ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "FILTER USING (TRUE)" in e.value.message
    rel = catalog(op, table_name="lineitem")
    rewrite_plan(rel, ctx)
    assert getattr(rel.catalog, op).table_name == LINEITEM_ID
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    ctx.is_admin = False
    rewrite_plan(catalog(op, table_name="orders"), ctx)


def test_truncating_a_protected_table_needs_the_grant(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(catalog("truncate_table", table_name="orders"), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "FILTER USING (TRUE)" in e.value.message
    rel = catalog("truncate_table", table_name="lineitem")
    result = rewrite_plan(rel, ctx)
    assert rel.catalog.truncate_table.table_name == LINEITEM_ID
    assert [r.statement_kind for r in result.sql_results] == ["truncate"]


def test_drop_table_reports_what_drop_table_sql_reports(ctx):
    """The pipeline's protected-lifecycle rule and policy lifecycle read these effects."""
    rel = catalog("drop_table", table_name="orders", if_exists=True)
    result = rewrite_plan(rel, ctx.as_caller(ADMIN, admin=True))
    assert rel.catalog.drop_table.table_name == ORDERS_ID
    (sql,) = result.sql_results
    assert sql.statement_kind == "drop" and {str(t) for t in sql.session_effects.tables_dropped} == {
        "spark_catalog.default.orders"
    }
    assert sql.session_effects.invalidates_catalog


@pytest.mark.parametrize("op, field", [("drop_table", "table_name"), ("drop_view", "view_name")])
def test_a_temp_view_does_not_hide_the_table_spark_drops(ctx, op, field):
    """Spark's dropTable/dropView skip temp views: a temp view named `orders` must not make
    the proxy judge a drop of the protected table as a drop of the view."""
    ctx.temp_views.add("orders")
    rel = catalog(op, **{field: "orders"})
    result = rewrite_plan(rel, ctx)
    assert getattr(rel.catalog, op).__getattribute__(field) == ORDERS_ID
    effects = result.sql_results[0].session_effects
    assert not effects.temp_views_dropped
    assert {str(t) for t in effects.tables_dropped | effects.views_dropped} == {"spark_catalog.default.orders"}


def test_drop_database_reports_the_namespace(ctx):
    result = rewrite_plan(catalog("drop_database", db_name="default", cascade=True), ctx)
    assert set(result.sql_results[0].session_effects.namespaces_dropped) == {("spark_catalog", "default")}


def test_create_database_location_is_a_location(ctx):
    rel = catalog("create_database", db_name="d")
    rel.catalog.create_database.properties["LOCATION"] = "/tmp/x"
    assert rewrite_plan(rel, ctx).locations == ("/tmp/x",)
