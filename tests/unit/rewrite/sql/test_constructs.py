"""Every place a table can appear is filtered (rule 5), with the caller's alias kept."""

import grpc
import pytest

from rowgate.refusal import Refusal
from tests.unit.rewrite.fakes import ALICE_ORDERS, BARRIER, BOB, BOB_ORDERS, ORDERS_FQ, reparse, rw, shop, unfiltered


@pytest.fixture
def ctx():
    return shop()


def test_plain_read_keeps_table_name_as_alias(ctx):
    r = rw("SELECT * FROM orders", ctx)
    assert r.sql == f"SELECT * FROM {ALICE_ORDERS} AS orders"
    assert r.filtered and r.changed and r.statement_kind == "query"
    assert r.policies_applied == ("spark_catalog.default.orders:eu_sales", "spark_catalog.default.orders:own_rows")
    assert ctx.tables and r.tables_read == {ctx_table("orders")}


def ctx_table(name):
    from tests.unit.rewrite.fakes import tn

    return tn(name)


def test_caller_alias_and_column_aliases_kept(ctx):
    r = rw("SELECT o.a FROM orders AS o(a, b, c, d) WHERE o.a > 1", ctx)
    assert r.sql == f"SELECT o.a FROM {ALICE_ORDERS} AS o(a, b, c, d) WHERE o.a > 1"


def test_caller_predicates_stay_outside_the_filter(ctx):
    """D18: the caller's predicate (which may raise) only sees allowed rows."""
    r = rw("SELECT * FROM orders WHERE 1 / (amount - 42) > 0 OR assert_true(owner <> 'x')", ctx)
    tree = reparse(r.sql)
    outer_where = tree.args["where"].sql("spark")
    assert "region" not in outer_where and "1 / (amount - 42)" in outer_where
    assert f"FROM {ALICE_ORDERS} AS orders" in r.sql


def test_other_users_get_their_own_filter(ctx):
    ctx.as_caller(BOB)
    r = rw("SELECT * FROM orders", ctx)
    assert r.sql == f"SELECT * FROM {BOB_ORDERS} AS orders"
    assert r.policies_applied == ("spark_catalog.default.orders:own_rows",)


def test_no_grant_means_false(ctx):
    ctx.policies.clear()
    ctx.protect("orders", "only_sales", ("group:sales@example.com",), "region = 'EU'")
    ctx.as_caller(BOB)
    r = rw("SELECT count(*) FROM orders", ctx)
    assert r.sql == f"SELECT count(*) FROM (SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE AND (FALSE)) {BARRIER}) AS orders"
    assert r.filtered and r.policies_applied == ()


def test_full_access_is_still_wrapped(ctx):
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    r = rw("SELECT * FROM orders", ctx)
    assert "(TRUE)" in r.sql and r.filtered


def test_unprotected_query_is_forwarded_with_pinned_names(ctx):
    """Issues #12 and #22: while protection is in force every resolved name is fully
    qualified, and nothing else of the client's text changes."""
    sql = "select  l.*  from lineitem l /* keep */ join customers c on c.id = l.order_id -- tail"
    r = rw(sql, ctx)
    assert not r.filtered and r.changed
    assert r.sql == (
        "select  l.*  from `spark_catalog`.`default`.`lineitem` l /* keep */ "
        "join `spark_catalog`.`default`.`customers` c on c.id = l.order_id -- tail"
    )
    assert r.tables_read == {ctx_table("lineitem"), ctx_table("customers")}


@pytest.mark.parametrize(
    "sql, count",
    [
        ("SELECT * FROM lineitem l JOIN orders o ON o.id = l.order_id", 1),
        ("SELECT * FROM lineitem l LEFT JOIN orders ON orders.id = l.order_id", 1),
        ("SELECT * FROM lineitem, orders", 1),
        ("SELECT * FROM lineitem NATURAL JOIN orders", 1),
        ("SELECT * FROM lineitem l LEFT SEMI JOIN orders o ON o.id = l.order_id", 1),
        ("SELECT * FROM lineitem l LEFT ANTI JOIN orders o ON o.id = l.order_id", 1),
        ("SELECT * FROM lineitem JOIN (orders JOIN customers ON orders.id = customers.id) ON true", 1),
        ("SELECT * FROM lineitem WHERE order_id IN (SELECT id FROM orders)", 1),
        ("SELECT * FROM lineitem l WHERE EXISTS (SELECT 1 FROM orders o WHERE o.id = l.order_id)", 1),
        ("SELECT * FROM lineitem l WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = l.order_id)", 1),
        ("SELECT (SELECT max(amount) FROM orders) AS m", 1),
        ("SELECT * FROM lineitem l WHERE qty > (SELECT avg(amount) FROM orders o WHERE o.id = l.order_id)", 1),
        ("SELECT * FROM lineitem WHERE order_id = ANY (SELECT id FROM orders)", 1),
        ("SELECT * FROM (SELECT * FROM (SELECT * FROM orders) a) b", 1),
        ("SELECT id FROM orders UNION SELECT order_id FROM lineitem", 1),
        ("SELECT id FROM orders UNION ALL SELECT id FROM orders", 2),
        ("SELECT id FROM orders INTERSECT SELECT order_id FROM lineitem", 1),
        ("(SELECT id FROM lineitem) EXCEPT (SELECT id FROM orders)", 1),
        ("WITH x AS (SELECT * FROM orders) SELECT * FROM x", 1),
        ("WITH x AS (SELECT * FROM lineitem), y AS (SELECT * FROM orders JOIN x) SELECT * FROM y", 1),
        ("SELECT * FROM orders LATERAL VIEW explode(array(1, 2)) t AS x", 1),
        ("SELECT * FROM orders PIVOT (sum(amount) FOR region IN ('EU', 'US'))", 1),
        ("SELECT * FROM orders UNPIVOT (v FOR k IN (amount, id))", 1),
        ("SELECT region, count(*) OVER (PARTITION BY region) FROM orders GROUP BY region HAVING count(*) > 1", 1),
        ("SELECT * FROM orders ORDER BY amount DESC LIMIT 10", 1),
        ("FROM orders SELECT id", 1),
        ("SELECT * FROM values (1, 2) t(a, b) JOIN orders ON orders.id = t.a", 1),
        ("SELECT * FROM orders CLUSTER BY region", 1),
        ("SELECT transform(array(1), x -> x + (SELECT max(amount) FROM orders))", 1),
        ("SELECT * FROM lineitem WHERE order_id IN (SELECT id FROM orders WHERE amount > (SELECT avg(amount) FROM orders))", 2),
    ],
)
def test_every_position_is_filtered(ctx, sql, count):
    r = rw(sql, ctx)
    assert r.filtered
    assert r.sql.count(ALICE_ORDERS) == count, r.sql
    assert unfiltered(r.sql) == []


def test_recursive_cte_body_is_filtered(ctx):
    sql = (
        "WITH RECURSIVE r AS (SELECT id, 0 AS depth FROM orders UNION ALL "
        "SELECT r.id, depth + 1 FROM r JOIN orders o ON o.id = r.id WHERE depth < 3) SELECT * FROM r"
    )
    r = rw(sql, ctx)
    assert r.sql.count(ALICE_ORDERS) == 2
    assert unfiltered(r.sql) == []


def test_pipe_syntax(ctx):
    r = rw("FROM orders |> WHERE amount > 1 |> AGGREGATE count(*) GROUP BY region", ctx)
    assert r.filtered and unfiltered(r.sql) == []
    # sqlglot reads `FROM (<derived table>) AS orders |> ...` with one more level of nesting
    # than the tree it rewrote, so the splice does not verify: the proxy's rendering is sent
    assert "|>" not in r.sql


def test_pipe_syntax_is_kept_unless_a_name_could_be_sqlglots(ctx):
    """sqlglot turns |> into CTEs named __tmpN; a text naming __tmp anything is rendered."""
    r = rw("FROM lineitem |> WHERE qty > 1 |> SELECT order_id", ctx)
    assert r.sql == "FROM `spark_catalog`.`default`.`lineitem` |> WHERE qty > 1 |> SELECT order_id"
    r = rw("FROM lineitem |> WHERE qty > 1 |> SELECT order_id AS __tmp2", ctx)
    assert "|>" not in r.sql and not r.filtered


def test_pipe_cte_names_cannot_hide_a_protected_table(ctx):
    ctx.table("__tmp1", "x").protect("__tmp1", "p", ("allUsers",), "x = 1")
    r = rw("FROM lineitem |> WHERE order_id IN (SELECT x FROM __tmp1) |> SELECT order_id", ctx)
    assert "|>" not in r.sql
    assert "`spark_catalog`.`default`.`__tmp1` WHERE TRUE AND ((x = 1))" in r.sql


def test_tablesample_percent_and_rows(ctx):
    # every sample goes above the barrier: it draws from filtered rows only
    r = rw("SELECT * FROM orders TABLESAMPLE (10 PERCENT) REPEATABLE (5) o", ctx)
    assert r.sql == (
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM (SELECT * FROM {ORDERS_FQ} "
        f"WHERE TRUE AND ((region = 'EU') OR (owner = 'alice@example.com'))) {BARRIER}) WHERE RAND(5) < 10 / 100) AS o"
    )
    r = rw("SELECT * FROM orders TABLESAMPLE (5 ROWS)", ctx)
    # a row sample is a LIMIT
    assert r.sql.endswith(f"WHERE TRUE AND ((region = 'EU') OR (owner = 'alice@example.com'))) {BARRIER} LIMIT 5) AS orders")
    r = rw("SELECT * FROM orders TABLESAMPLE (BUCKET 1 OUT OF 4)", ctx)
    assert f"{BARRIER}) WHERE RAND(" in r.sql and r.sql.endswith(" < 1 / 4) AS orders") and "TABLESAMPLE" not in r.sql


def test_hints_survive_and_still_name_the_alias(ctx):
    r = rw("SELECT /*+ BROADCAST(orders), REPARTITION(4) */ * FROM orders JOIN lineitem", ctx)
    assert r.sql.startswith("SELECT /*+ BROADCAST(orders), REPARTITION(4) */ * FROM (SELECT")
    assert "AS orders JOIN `spark_catalog`.`default`.`lineitem`" in r.sql


def test_insert_select_read_side(ctx):
    r = rw("INSERT INTO lineitem SELECT id, 1 FROM orders", ctx)
    assert r.statement_kind == "insert" and r.filtered
    assert r.sql == f"INSERT INTO `spark_catalog`.`default`.`lineitem` SELECT id, 1 FROM {ALICE_ORDERS} AS orders"
    assert r.tables_written == {ctx_table("lineitem")}


def test_insert_overwrite_and_table_source(ctx):
    r = rw("INSERT OVERWRITE TABLE lineitem SELECT * FROM orders", ctx)
    assert r.sql.startswith("INSERT OVERWRITE TABLE `spark_catalog`.`default`.`lineitem` SELECT * FROM (SELECT")
    r = rw("INSERT INTO lineitem TABLE orders", ctx)
    assert r.sql == f"INSERT INTO `spark_catalog`.`default`.`lineitem` SELECT * FROM {ALICE_ORDERS} AS orders"


def test_insert_with_cte(ctx):
    r = rw("WITH x AS (SELECT * FROM orders) INSERT INTO lineitem SELECT * FROM x", ctx)
    assert r.filtered and unfiltered(r.sql) == []


def test_multi_insert_from_first(ctx):
    r = rw("FROM orders INSERT INTO lineitem SELECT id, 1 INSERT INTO customers SELECT id, owner", ctx)
    assert r.filtered and r.tables_written == {ctx_table("lineitem"), ctx_table("customers")}
    assert unfiltered(r.sql) == []


def test_ctas(ctx):
    r = rw("CREATE TABLE copy USING parquet AS SELECT * FROM orders", ctx)
    assert r.statement_kind == "create_table" and r.filtered
    assert f"AS SELECT * FROM {ALICE_ORDERS} AS orders" in r.sql
    assert r.tables_written == {ctx_table("copy")}
    assert r.session_effects.tables_created == {ctx_table("copy")}


def test_cache_table_as_select(ctx):
    r = rw("CACHE TABLE c AS SELECT * FROM orders", ctx)
    assert r.statement_kind == "cache" and r.filtered
    assert r.sql == f"CACHE TABLE c AS SELECT * FROM {ALICE_ORDERS} AS orders"
    assert r.session_effects.temp_views_created == {"c"}


def test_create_temp_view_is_filtered_at_creation(ctx):
    r = rw("CREATE OR REPLACE TEMPORARY VIEW mine AS SELECT * FROM orders", ctx)
    assert r.filtered and r.session_effects.temp_views_created == {"mine"}
    assert ALICE_ORDERS in r.sql


def test_merge_source_filtered_target_not(ctx):
    r = rw(
        "MERGE INTO lineitem t USING orders s ON t.order_id = s.id "
        "WHEN MATCHED AND s.amount > (SELECT max(amount) FROM orders) THEN UPDATE SET qty = s.amount "
        "WHEN NOT MATCHED THEN INSERT *",
        ctx,
    )
    assert r.statement_kind == "merge"
    assert r.sql.startswith(f"MERGE INTO `spark_catalog`.`default`.`lineitem` t USING {ALICE_ORDERS} AS s ON")
    assert r.sql.count(ALICE_ORDERS) == 2
    assert r.tables_written == {ctx_table("lineitem")}


def test_update_delete_subqueries_filtered(ctx):
    r = rw("UPDATE lineitem SET qty = (SELECT max(amount) FROM orders)", ctx)
    assert r.statement_kind == "update" and ALICE_ORDERS in r.sql
    r = rw("DELETE FROM lineitem WHERE order_id NOT IN (SELECT id FROM orders)", ctx)
    assert r.statement_kind == "delete" and ALICE_ORDERS in r.sql


def test_explain_is_rewritten_and_marked(ctx):
    """D20: EXPLAIN output would show the filter; the caller decides what to do with it."""
    r = rw("EXPLAIN EXTENDED SELECT * FROM orders", ctx)
    assert r.statement_kind == "explain" and r.filtered
    assert r.sql == f"EXPLAIN EXTENDED SELECT * FROM {ALICE_ORDERS} AS orders"
    r = rw("explain /* c */ formatted SELECT * FROM lineitem", ctx)
    assert r.statement_kind == "explain" and not r.filtered
    assert r.sql == "EXPLAIN FORMATTED SELECT * FROM `spark_catalog`.`default`.`lineitem`"


def test_explain_cannot_smuggle_a_second_statement(ctx):
    with pytest.raises(Refusal):
        rw("EXPLAIN SELECT 1; SELECT * FROM orders", ctx)


def test_describe_query(ctx):
    r = rw("DESCRIBE SELECT * FROM orders", ctx)
    assert r.statement_kind == "describe" and ALICE_ORDERS in r.sql


def test_set_variable_and_declare_reads_are_filtered(ctx):
    r = rw("SET VAR v = (SELECT max(amount) FROM orders)", ctx)
    assert r.statement_kind == "set_variable" and ALICE_ORDERS in r.sql
    assert r.session_effects.variables_set == ("v",)
    r = rw("DECLARE VARIABLE w INT DEFAULT (SELECT max(amount) FROM orders)", ctx)
    assert r.statement_kind == "declare" and ALICE_ORDERS in r.sql


def test_builtin_table_functions_pass(ctx):
    r = rw("SELECT * FROM range(10) JOIN orders ON id = range.id", ctx)
    assert r.filtered and r.table_functions == ()
    r = rw("SELECT * FROM explode(array(1, 2))", ctx)
    assert not r.filtered and r.table_functions == () and r.sql == "SELECT * FROM explode(array(1, 2))"


def test_unknown_table_function_over_protected_name_is_refused(ctx):
    for sql in (
        "SELECT * FROM table_changes('orders', 0)",
        "SELECT * FROM table_changes('default.orders', 0)",
        "SELECT * FROM table_changes('spark_catalog.default.orders', 0)",
    ):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "table_changes" in str(e.value)
    r = rw("SELECT * FROM table_changes('lineitem', 0)", ctx)
    assert r.table_functions == ("table_changes",) and not r.filtered
    # a string argument naming a catalog table is pinned like any name
    assert r.sql == "SELECT * FROM TABLE_CHANGES('spark_catalog.default.lineitem', 0)"


def test_table_argument(ctx):
    with pytest.raises(Refusal):
        rw("SELECT * FROM my_udtf(TABLE(orders))", ctx)
    r = rw("SELECT * FROM my_udtf(TABLE(SELECT * FROM orders))", ctx)
    assert ALICE_ORDERS in r.sql
    r = rw("SELECT * FROM my_udtf(TABLE(lineitem))", ctx)
    assert not r.filtered and r.sql == "SELECT * FROM MY_UDTF(TABLE(`spark_catalog`.`default`.`lineitem`))"


def test_multi_part_column_qualifiers_follow_the_alias(ctx):
    r = rw("SELECT default.orders.id, orders.amount FROM default.orders", ctx)
    assert r.sql == f"SELECT orders.id, orders.amount FROM {ALICE_ORDERS} AS orders"


def test_lookup_tables_in_filters_are_not_filtered_again(ctx):
    """A policy's own subquery reads its lookup table with the owner's rights."""
    ctx.protect("acl.region_grants", "self", ("allAuthenticatedUsers",), "member = SESSION_USER()")
    ctx.policies.pop(ctx_table("orders"))
    ctx.protect(
        "orders",
        "by_acl",
        ("allAuthenticatedUsers",),
        "region IN (SELECT region FROM acl.region_grants WHERE member = SESSION_USER())",
    )
    r = rw("SELECT * FROM orders", ctx)
    assert r.sql == (
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE AND ((region IN "
        "(SELECT region FROM `spark_catalog`.`acl`.`region_grants` WHERE member = 'alice@example.com')))) "
        f"{BARRIER}) AS orders"
    )
    # ... but a direct read of the lookup table by the caller is filtered by its own policy
    r = rw("SELECT * FROM acl.region_grants", ctx)
    assert f"WHERE TRUE AND ((member = 'alice@example.com'))) {BARRIER}) AS region_grants" in r.sql


def test_protected_tables_are_refused_inside_lateral_subqueries(ctx):
    """Spark rejects the non-deterministic barrier in a LATERAL subquery; without it the
    caller's predicates could run on hidden rows, so the proxy refuses instead, for a plain
    policy and a lookup policy alike."""
    sql = "SELECT l.id FROM lineitem p, LATERAL (SELECT o.id FROM orders o WHERE o.id = p.order_id) l"
    with pytest.raises(Refusal) as e:
        rw(sql, ctx)
    assert "LATERAL" in str(e.value) and "join it instead" in str(e.value)
    ctx.policies.pop(ctx_table("orders"))
    ctx.protect("orders", "by_acl", ("allAuthenticatedUsers",), "region IN (SELECT r FROM acl.g)")
    with pytest.raises(Refusal) as e:
        rw(sql, ctx)
    assert "LATERAL" in str(e.value) and "join it instead" in str(e.value)
    # an unprotected table inside LATERAL is fine
    assert "LATERAL" in rw("SELECT l.id FROM orders p, LATERAL (SELECT x.id FROM lineitem x WHERE x.id = p.id) l", ctx).sql


@pytest.mark.parametrize(
    "policy", ["EXISTS (SELECT 1 FROM acl.g WHERE g.r = orders.region)", "region = 'eu'", "owner = SESSION_USER()"]
)
def test_every_policy_is_evaluated_before_the_callers_predicates(ctx, policy):
    """D18, issue 21: every policy's filter sits under the optimizer barrier, the caller's
    predicates above it."""
    ctx.policies.pop(ctx_table("orders"))
    ctx.protect("orders", "p", ("allAuthenticatedUsers",), policy)
    sql = rw("SELECT * FROM orders WHERE 1 / amount > 0", ctx).sql
    assert sql.endswith(f") {BARRIER}) AS orders WHERE 1 / amount > 0"), sql


def test_lookup_names_are_qualified_against_the_protected_table(ctx):
    """A caller's CTE or temp view named like the lookup table must not replace it."""
    ctx.policies.pop(ctx_table("orders"))
    ctx.table("grants", "region", "member")
    ctx.protect("orders", "p", ("allAuthenticatedUsers",), "region IN (SELECT region FROM grants WHERE member = SESSION_USER())")
    ctx.temp("grants")
    r = rw("WITH grants AS (SELECT 'EU' AS region, 'alice@example.com' AS member) SELECT * FROM orders", ctx)
    assert "FROM `spark_catalog`.`default`.`grants` WHERE member = 'alice@example.com'" in r.sql


def test_policy_filters_never_appear_in_refusals(ctx):
    ctx.protect("orders", "secret", ("user:zed@example.com",), "owner = 'TOPSECRET-VALUE'")
    messages = []
    for sql in ("UPDATE orders SET amount = 1", "SELECT * FROM orders VERSION AS OF 1", "SELECT * FROM ${x}"):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        messages.append(str(e.value))
    assert not any("TOPSECRET" in m or "region" in m or "SESSION_USER" in m.upper() for m in messages)


def test_ctes_stay_where_they_were_written(ctx):
    """Spark 3.2+ scopes a CTE defined in a subquery to that subquery; hoisting it to the top
    (sqlglot's Hive habit) would let it shadow a table of the same name elsewhere."""
    r = rw("SELECT (WITH o AS (SELECT * FROM orders) SELECT count(*) FROM o) AS n, id FROM lineitem", ctx)
    assert r.sql.startswith("SELECT (WITH o AS (SELECT * FROM (SELECT * FROM ")
    assert reparse(r.sql) and r.filtered
