"""Views over protected tables are expanded and filtered (bypass catalogue B8)."""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.sql.views import MAX_VIEW_DEPTH
from tests.unit.rewrite.fakes import ALICE_ORDERS, BOB, BOB_ORDERS, rw, shop, tn, unfiltered


@pytest.fixture
def ctx():
    c = shop()
    c.view("v_orders", "SELECT id, amount FROM orders WHERE amount > 0")
    c.view("v_lines", "SELECT * FROM lineitem")
    return c


def test_view_over_protected_table_is_expanded(ctx):
    r = rw("SELECT * FROM v_orders", ctx)
    assert r.sql == f"SELECT * FROM (SELECT id, amount FROM {ALICE_ORDERS} AS orders WHERE amount > 0) AS v_orders"
    assert r.filtered and r.views_expanded == {tn("v_orders")}
    assert tn("orders") in r.tables_read and tn("v_orders") in r.tables_read


def test_view_alias_kept(ctx):
    r = rw("SELECT v.id FROM default.v_orders v WHERE v.id = 1", ctx)
    assert r.sql.startswith("SELECT v.id FROM (SELECT id, amount FROM (SELECT") and r.sql.endswith(") AS v WHERE v.id = 1")


def test_each_reader_gets_their_own_rows(ctx):
    ctx.as_caller(BOB)
    r = rw("SELECT * FROM v_orders", ctx)
    assert BOB_ORDERS in r.sql


def test_unprotected_view_is_left_alone(ctx):
    sql = "SELECT * FROM v_lines"
    r = rw(sql, ctx)
    assert r.sql == "SELECT * FROM `spark_catalog`.`default`.`v_lines`" and r.views_expanded == frozenset()
    assert not r.filtered


def test_view_text_spark_may_read_differently_is_expanded(ctx):
    """Issue #12: a stored view text that is not the proxy's own rendering (made before a
    policy existed, or around the proxy) is not left to Spark's reading. Here Spark continues
    the `--` comment over the backslash-newline and joins `orders` unfiltered; sqlglot reads
    only lineitem. The proxy inlines its own reading."""
    ctx.view("v_odd", "SELECT order_id FROM lineitem -- \\\n/*\n, orders\n-- */")
    r = rw("SELECT * FROM v_odd", ctx)
    assert r.views_expanded == {tn("v_odd")} and not r.filtered
    assert r.sql == "SELECT * FROM (SELECT order_id FROM `spark_catalog`.`default`.`lineitem`) AS v_odd"
    # the same view is Spark's business when nothing is protected
    ctx.policies.clear()
    assert rw("SELECT * FROM v_odd", ctx).sql == "SELECT * FROM v_odd"


def test_view_text_spark_reads_like_the_proxy_is_left_to_spark(ctx):
    """Issue #22: a view created through the proxy stores the client's text (names pinned);
    one Spark's lexer reads like sqlglot's, over nothing protected, stays a view."""
    ctx.view("v_plain", "SELECT approx_percentile(qty, 0.5) AS p FROM `spark_catalog`.`default`.`lineitem` -- c")
    r = rw("SELECT * FROM v_plain", ctx)
    assert r.views_expanded == set() and r.sql == "SELECT * FROM `spark_catalog`.`default`.`v_plain`"


def test_views_of_views(ctx):
    ctx.view("v2", "SELECT * FROM v_orders JOIN v_lines ON id = order_id")
    ctx.view("v3", "SELECT count(*) AS n FROM v2")
    r = rw("SELECT n FROM v3", ctx)
    assert r.views_expanded == {tn("v3"), tn("v2"), tn("v_orders")}
    assert r.sql.count(ALICE_ORDERS) == 1 and unfiltered(r.sql) == []
    # the unprotected inner view is kept as a view, qualified in v2's namespace
    assert "JOIN `spark_catalog`.`default`.`v_lines` ON" in r.sql


def test_view_text_resolves_in_the_views_own_namespace(ctx):
    # sales.v reads `orders` unqualified: that is sales.orders, not default.orders
    ctx.view("sales.v_sales", "SELECT * FROM orders", catalog="spark_catalog", schema="sales")
    r = rw("SELECT * FROM sales.v_sales", ctx)
    assert not r.filtered and r.views_expanded == frozenset()
    assert r.sql == "SELECT * FROM `spark_catalog`.`sales`.`v_sales`"
    # and a view in sales reading default.orders two-part is expanded
    ctx.view("sales.v_default", "SELECT * FROM default.orders", catalog="spark_catalog", schema="sales")
    r = rw("SELECT * FROM sales.v_default", ctx)
    assert ALICE_ORDERS in r.sql


def test_view_text_does_not_see_session_temp_views_or_outer_ctes(ctx):
    ctx.temp("orders")
    # the caller's temp view `orders` shadows the table for the caller's own text...
    r = rw("SELECT * FROM orders", ctx)
    assert r.sql == "SELECT * FROM `system`.`session`.`orders`" and r.temp_views_read == {"orders"}
    # ... but not inside the view's text, which still reads the protected table
    r = rw("WITH orders AS (SELECT 1 AS id, 2 AS amount) SELECT * FROM v_orders", ctx)
    assert ALICE_ORDERS in r.sql and unfiltered(r.sql) == []


def test_inlined_view_text_is_fully_qualified(ctx):
    """Inlined text must not be re-resolved in the caller's session (temp views, USE)."""
    ctx.view("v_mix", "SELECT o.id, l.qty FROM orders o JOIN lineitem l ON o.id = l.order_id")
    ctx.temp("lineitem")
    ctx.current_schema = "sales"
    r = rw("SELECT * FROM default.v_mix", ctx)
    assert "JOIN `spark_catalog`.`default`.`lineitem` AS l" in r.sql
    assert ALICE_ORDERS in r.sql


def test_view_column_names(ctx):
    ctx.view("v_cols", "SELECT id, amount FROM orders", columns=("order_id", "total"))
    r = rw("SELECT order_id FROM v_cols", ctx)
    assert r.sql.endswith(") AS v_cols(`order_id`, `total`)")
    r = rw("SELECT a FROM v_cols AS x(a, b)", ctx)
    assert r.sql.endswith(") AS x(a, b)")


def test_view_with_identity_function_is_expanded_for_the_reader(ctx):
    ctx.view("v_mine", "SELECT * FROM lineitem WHERE order_id = current_user()")
    r = rw("SELECT * FROM v_mine", ctx)
    assert "order_id = 'alice@example.com'" in r.sql and not r.filtered


def test_depth_limit(ctx):
    ctx.view("d0", "SELECT * FROM orders")
    for i in range(1, MAX_VIEW_DEPTH + 1):
        ctx.view(f"d{i}", f"SELECT * FROM d{i - 1}")
    r = rw(f"SELECT * FROM d{MAX_VIEW_DEPTH - 1}", ctx)  # 8 views deep
    assert r.filtered and len(r.views_expanded) == MAX_VIEW_DEPTH
    with pytest.raises(Refusal) as e:
        rw(f"SELECT * FROM d{MAX_VIEW_DEPTH}", ctx)  # 9 views deep
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "view nesting deeper than 8" in str(e.value)


def test_cycle(ctx):
    ctx.view("ca", "SELECT * FROM cb")
    ctx.view("cb", "SELECT * FROM ca")
    with pytest.raises(Refusal) as e:
        rw("SELECT * FROM ca", ctx)
    assert "view cycle" in str(e.value)
    ctx.view("self_ref", "SELECT * FROM self_ref")
    with pytest.raises(Refusal):
        rw("SELECT * FROM self_ref", ctx)


def test_unparseable_view_is_refused_under_protection(ctx):
    ctx.view("v_bad", "SELECT * FROM ${x}")
    with pytest.raises(Refusal):
        rw("SELECT * FROM v_bad", ctx)
    ctx.view("v_bad2", "EXPLAIN SELECT 1")
    with pytest.raises(Refusal):
        rw("SELECT * FROM v_bad2", ctx)
    ctx.view("v_bad3", "WITH x AS (TABLE orders) SELECT * FROM x")
    with pytest.raises(Refusal):
        rw("SELECT * FROM v_bad3", ctx)


def test_policy_on_a_view_is_refused(ctx):
    ctx.protect("v_lines", "p", ("allUsers",), "qty > 0")
    with pytest.raises(Refusal):
        rw("SELECT * FROM v_lines", ctx)


def test_persistent_view_definition_is_stored_unfiltered_and_filtered_when_read(ctx):
    """A persistent view keeps its own text: every later reader gets their own filter."""
    r = rw("CREATE OR REPLACE VIEW v_new AS SELECT * FROM orders WHERE current_user() IS NOT NULL", ctx)
    # the body is the client's text with its names pinned, but not filtered nor bound
    assert r.sql == (
        "CREATE OR REPLACE VIEW `spark_catalog`.`default`.`v_new` AS "
        "SELECT * FROM `spark_catalog`.`default`.`orders` WHERE current_user() IS NOT NULL"
    )
    assert not r.filtered and r.session_effects.views_created == {tn("v_new")}
    ctx.view("v_new", "SELECT * FROM orders WHERE current_user() IS NOT NULL")
    ctx.as_caller(BOB)
    r = rw("SELECT * FROM v_new", ctx)
    assert BOB_ORDERS in r.sql and "NOT 'bob@example.com' IS NULL" in r.sql


def test_persistent_view_with_unanalysable_text_is_refused_at_creation(ctx):
    with pytest.raises(Refusal):
        rw("CREATE VIEW v_x AS SELECT * FROM IDENTIFIER(some_column)", ctx)


def test_alter_view_as(ctx):
    r = rw("ALTER VIEW v_lines AS SELECT * FROM orders", ctx)
    assert r.statement_kind == "alter" and not r.filtered
    assert r.sql == "ALTER VIEW `spark_catalog`.`default`.`v_lines` AS SELECT * FROM `spark_catalog`.`default`.`orders`"
    assert r.session_effects.views_altered == {tn("v_lines")}


def test_materialized_view_is_a_copy_and_filtered(ctx):
    r = rw("CREATE MATERIALIZED VIEW mv AS SELECT * FROM orders", ctx)
    assert ALICE_ORDERS in r.sql and r.statement_kind == "create_table"
