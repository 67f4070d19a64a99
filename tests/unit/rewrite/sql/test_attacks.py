"""Adversarial tests for bypass catalogue classes A1-A7 (name resolution and parsing)."""

import grpc
import pytest

from rowgate.refusal import Refusal
from tests.unit.rewrite.fakes import ALICE_ORDERS, ORDERS_FQ, rw, shop, tn, unfiltered


@pytest.fixture
def ctx():
    return shop()


# -- A1: case and quoting variants ---------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ORDERS",
        "SELECT * FROM Orders",
        "SELECT * FROM `orders`",
        "SELECT * FROM `ORDERS`",
        "SELECT * FROM `default`.`orders`",
        "SELECT * FROM Default.ORDERS",
        'SELECT * FROM "orders"',
        "select * from\n\torders\n",
        "SELECT * FROM /* c */ orders -- x",
    ],
)
def test_a1_case_and_quoting(ctx, sql):
    r = rw(sql, ctx)
    assert r.filtered and ALICE_ORDERS in r.sql and unfiltered(r.sql) == []


def test_a1_quoted_dotted_name_is_one_part(ctx):
    """`default.orders` is a table literally named "default.orders" in the current database."""
    r = rw("SELECT * FROM `default.orders`", ctx)
    # Unknown to the catalog: forwarded as a temp view (it may be one Spark made itself),
    # which Spark never resolves to a table.
    assert not r.filtered and r.sql == "SELECT * FROM `system`.`session`.`default.orders`"
    assert r.unknown_relations == {"default.orders"} and not r.tables_read


# -- A2: two- and three-part names ---------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM default.orders",
        "SELECT * FROM spark_catalog.default.orders",
        "SELECT * FROM SPARK_CATALOG.DEFAULT.ORDERS",
        "SELECT * FROM `spark_catalog`.`default`.`orders`",
        "SELECT * FROM spark_catalog.`default`.orders o",
    ],
)
def test_a2_multi_part(ctx, sql):
    r = rw(sql, ctx)
    assert r.filtered and unfiltered(r.sql) == []


def test_a2_same_name_other_database_is_not_filtered(ctx):
    r = rw("SELECT * FROM sales.orders", ctx)
    assert not r.filtered and r.tables_read == {tn("spark_catalog.sales.orders")}
    assert r.sql == "SELECT * FROM `spark_catalog`.`sales`.`orders`"  # pinned, not wrapped


def test_a2_four_part_names_are_refused(ctx):
    with pytest.raises(Refusal) as e:
        rw("SELECT * FROM x.spark_catalog.default.orders", ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


# -- A3: current database and catalog ------------------------------------------------------


def test_a3_current_database_changes_resolution(ctx):
    ctx.current_schema = "sales"
    assert not rw("SELECT * FROM orders", ctx).filtered  # sales.orders, unprotected
    assert rw("SELECT * FROM default.orders", ctx).filtered
    ctx.protect("sales.orders", "p", ("allUsers",), "region = 'US'")
    r = rw("SELECT * FROM orders", ctx)
    assert "`spark_catalog`.`sales`.`orders` WHERE TRUE AND ((region = 'US')" in r.sql


def test_a3_current_catalog_changes_resolution(ctx):
    ctx.current_catalog = "lake"
    assert not rw("SELECT * FROM orders", ctx).filtered
    assert not rw("SELECT * FROM default.orders", ctx).filtered  # lake.default.orders
    assert rw("SELECT * FROM spark_catalog.default.orders", ctx).filtered


def test_a3_use_statements_report_the_new_namespace(ctx):
    r = rw("USE sales", ctx)
    assert r.statement_kind == "use" and r.session_effects.current_schema == "sales" and r.sql == "USE `sales`"
    r = rw("USE DATABASE `Sales`", ctx)
    assert r.session_effects.current_schema == "sales"
    r = rw("USE CATALOG lake", ctx)
    assert r.session_effects.current_catalog == "lake"
    r = rw("SET CATALOG lake", ctx)
    assert r.statement_kind == "use" and r.session_effects.current_catalog == "lake"
    r = rw("USE lake.db", ctx)
    assert (r.session_effects.current_catalog, r.session_effects.current_schema) == ("lake", "db")
    r = rw("USE IDENTIFIER(:db)", ctx, args={"db": "sales"})
    assert r.session_effects.current_schema == "sales"
    with pytest.raises(Refusal):
        rw("USE IDENTIFIER(somevar)", ctx)


# -- A4: shadowing ---------------------------------------------------------------------------


def test_a4_cte_named_like_the_table_is_not_filtered_as_the_table(ctx):
    r = rw("WITH orders AS (SELECT * FROM lineitem) SELECT * FROM orders", ctx)
    assert not r.filtered
    assert r.sql == "WITH orders AS (SELECT * FROM `spark_catalog`.`default`.`lineitem`) SELECT * FROM orders"


def test_a4_cte_does_not_hide_the_table_it_reads(ctx):
    r = rw("WITH orders AS (SELECT * FROM orders WHERE amount > 0) SELECT * FROM orders", ctx)
    assert r.sql == f"WITH orders AS (SELECT * FROM {ALICE_ORDERS} AS orders WHERE amount > 0) SELECT * FROM orders"
    assert len(unfiltered(r.sql)) == 1  # the CTE reference


def test_a4_cte_scope_ends_with_its_query(ctx):
    r = rw("SELECT * FROM (WITH orders AS (SELECT 1 AS id) SELECT * FROM orders) x JOIN orders ON x.id = orders.id", ctx)
    assert r.sql.count(ALICE_ORDERS) == 1 and len(unfiltered(r.sql)) == 1


def test_a4_cte_does_not_shadow_qualified_names(ctx):
    r = rw("WITH orders AS (SELECT 1 AS id) SELECT * FROM default.orders, spark_catalog.default.orders o2", ctx)
    assert r.sql.count(ALICE_ORDERS) == 2


def test_a4_later_cte_cannot_be_used_before_its_definition(ctx):
    r = rw("WITH a AS (SELECT * FROM orders), orders AS (SELECT 1 AS id) SELECT * FROM a", ctx)
    assert ALICE_ORDERS in r.sql


def test_a4_cte_matching_only_by_case_is_refused(ctx):
    """With spark.sql.caseSensitive=true Spark would read the table, not the CTE."""
    with pytest.raises(Refusal):
        rw("WITH Orders AS (SELECT 1 AS id) SELECT * FROM orders", ctx)
    rw("WITH Lines AS (SELECT 1 AS id) SELECT * FROM lines", ctx)  # unprotected: fine


def test_a4_temp_view_shadows_one_part_name_only(ctx):
    ctx.temp("orders")
    r = rw("SELECT * FROM orders", ctx)
    assert r.sql == "SELECT * FROM `system`.`session`.`orders`" and r.temp_views_read == {"orders"}
    for sql in ("SELECT * FROM default.orders", "SELECT * FROM spark_catalog.default.orders"):
        assert rw(sql, ctx).filtered


def test_a4_global_temp_views_are_reported_not_wrapped(ctx):
    r = rw("SELECT * FROM global_temp.orders", ctx)
    assert not r.changed and r.temp_views_read == {"global_temp.orders"}


# -- A5: ${var} substitution -----------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ${t}",
        "SELECT * FROM lineitem WHERE order_id = '${x}'",
        "SELECT * FROM lineitem -- ${x}",
        "SELECT * FROM lineitem /* ${hiveconf:x} */",
        "SELECT * FROM ${db}.orders",
        "SET x = ${y}",
        "EXPLAIN SELECT ${x}",
    ],
)
def test_a5_variables_are_refused(ctx, sql):
    with pytest.raises(Refusal) as e:
        rw(sql, ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("sql", ["SELECT * FROM $orders", "SELECT * FROM lineitem@v1", "SELECT $1 FROM lineitem"])
def test_a5_dollar_forms_are_refused(ctx, sql):
    with pytest.raises(Refusal):
        rw(sql, ctx)


# -- A6: IDENTIFIER() and SQL arguments --------------------------------------------------------


@pytest.mark.parametrize(
    "sql, args",
    [
        ("SELECT * FROM IDENTIFIER('orders')", None),
        ("SELECT * FROM IDENTIFIER('ORDERS') o", None),
        ("SELECT * FROM IDENTIFIER('default.orders')", None),
        ("SELECT * FROM IDENTIFIER('spark_catalog.default.`orders`')", None),
        ("SELECT * FROM IDENTIFIER('ord' || 'ers')", None),
        ("SELECT * FROM IDENTIFIER(:t)", {"t": "orders"}),
        ("SELECT * FROM IDENTIFIER(:t || '.orders')", {"t": "default"}),
    ],
)
def test_a6_identifier_is_resolved(ctx, sql, args):
    r = rw(sql, ctx, args=args) if args is not None else rw(sql, ctx)
    assert r.filtered and "IDENTIFIER" not in r.sql
    assert unfiltered(r.sql) == []


def test_a6_identifier_quoted_dotted_is_one_part(ctx):
    r = rw("SELECT * FROM IDENTIFIER('`default.orders`')", ctx)
    # One part, unknown to the catalog: forwarded as the temp view of that name or nothing.
    assert not r.filtered and r.unknown_relations == {"default.orders"} and not r.tables_read
    assert r.sql == "SELECT * FROM `system`.`session`.`default.orders`"


@pytest.mark.parametrize(
    "sql, args",
    [
        ("SELECT * FROM IDENTIFIER(:t)", None),
        ("SELECT * FROM IDENTIFIER(:t)", {"t": 5}),
        ("SELECT * FROM IDENTIFIER(:t)", {"other": "orders"}),
        ("SELECT * FROM IDENTIFIER(v)", None),
        ("SELECT * FROM IDENTIFIER(upper('orders'))", None),
        ("SELECT * FROM IDENTIFIER('a b')", None),
        ("INSERT INTO IDENTIFIER(:t) SELECT 1", None),
    ],
)
def test_a6_unresolvable_identifier_is_refused(ctx, sql, args):
    with pytest.raises(Refusal) as e:
        rw(sql, ctx, args=args)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO IDENTIFIER(:t) SELECT * FROM lineitem",
        "INSERT OVERWRITE TABLE IDENTIFIER(:t) SELECT * FROM lineitem",
        "UPDATE IDENTIFIER(:t) SET amount = 0",
        "DELETE FROM IDENTIFIER(:t) WHERE amount > 0",
        "MERGE INTO IDENTIFIER(:t) USING lineitem ON true WHEN MATCHED THEN DELETE",
        "TRUNCATE TABLE IDENTIFIER(:t)",
        "CREATE OR REPLACE TABLE IDENTIFIER(:t) AS SELECT 1",
    ],
)
def test_a6_identifier_write_target_is_checked(ctx, sql):
    with pytest.raises(Refusal) as e:
        rw(sql, ctx, args={"t": "default.orders"})
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    ctx.protect("orders", "all", ("user:alice@example.com",), "TRUE")
    r = rw(sql, ctx, args={"t": "default.orders"})
    assert r.tables_written == {tn("orders")} and not r.filtered
    # the name the proxy checked is the one Spark writes: pinned, IDENTIFIER() resolved
    assert "IDENTIFIER" not in r.sql and "`spark_catalog`.`default`.`orders`" in r.sql


def test_a6_identifier_whose_argument_sqlglot_drops_is_refused(ctx):
    # sqlglot reads this as `DROP TABLE IDENTIFIER`: the argument is lost
    with pytest.raises(Refusal):
        rw("DROP TABLE IDENTIFIER(:t)", ctx, args={"t": "orders"})


def test_a6_positional_identifier(ctx):
    # Names are pinned while protection is in force, which consumes the ?: refused, with
    # the way out named (a named parameter is kept by name).
    for table in ("lineitem", "default.orders"):
        with pytest.raises(Refusal) as e:
            rw("SELECT * FROM IDENTIFIER(?)", ctx, args=[table])
        assert "named parameters" in str(e.value)
    r = rw("SELECT * FROM IDENTIFIER(:t)", ctx, args={"t": "lineitem"})
    assert r.tables_read == {tn("lineitem")} and r.sql == "SELECT * FROM `spark_catalog`.`default`.`lineitem`"
    ctx.policies.clear()
    r = rw("SELECT * FROM IDENTIFIER(?)", ctx, args=["lineitem"])
    assert not r.changed  # nothing protected: forwarded as sent


def test_a6_positional_parameters_keep_their_text_order(ctx):
    # FROM-first text: the first ? is in FROM even though sqlglot puts SELECT first
    r = rw("FROM lineitem SELECT ?, current_user() WHERE qty = ?", ctx, args=[1, 2])
    assert r.sql == "SELECT ?, 'alice@example.com' AS `current_user()` FROM `spark_catalog`.`default`.`lineitem` WHERE qty = ?"
    with pytest.raises(Refusal):
        rw("FROM lineitem l JOIN orders o ON o.amount = ? SELECT ?", ctx, args=[1, 2])
    # a ? consumed by the rewrite would shift the others
    with pytest.raises(Refusal):
        rw("SELECT * FROM IDENTIFIER(?) WHERE amount = ?", ctx, args=["orders", 5])
    with pytest.raises(Refusal):  # pinned, so consumed too
        rw("SELECT * FROM IDENTIFIER(?) WHERE qty = ?", ctx, args=["lineitem", 5])


def test_a6_positional_identifier_resolution_uses_text_order(ctx):
    """`FROM IDENTIFIER(?) SELECT ?`: Spark binds the first argument to the FROM."""
    with pytest.raises(Refusal):  # resolved to orders (filtered), so the ? is consumed
        rw("FROM IDENTIFIER(?) SELECT ?", ctx, args=["orders", "lineitem"])


# -- A7: parser differentials ------------------------------------------------------------------


def test_a7_nested_comments_hide_nothing(ctx):
    # Spark nests bracketed comments; so does sqlglot: `, orders` is inside the comment.
    sql = "SELECT * FROM lineitem /* outer /* inner */ , orders */"
    r = rw(sql, ctx)
    assert not r.filtered and r.sql == "SELECT * FROM `spark_catalog`.`default`.`lineitem`"
    # and what follows a properly closed nested comment is read
    r = rw("SELECT * FROM lineitem /* a /* b */ c */ , orders", ctx)
    assert r.filtered and unfiltered(r.sql) == []


def test_a7_hints_are_not_reads_and_survive(ctx):
    sql = "SELECT /*+ BROADCAST(orders) */ * FROM lineitem"
    r = rw(sql, ctx)
    assert not r.filtered and r.sql == "SELECT /*+ BROADCAST(orders) */ * FROM `spark_catalog`.`default`.`lineitem`"


def test_a7_backslash_escapes_match_spark_defaults(ctx):
    # Spark (escapedStringLiterals=false) reads one string literal here, as sqlglot does.
    sql = "SELECT 'a\\' , (SELECT max(amount) FROM orders) --' FROM lineitem"
    r = rw(sql, ctx)
    assert not r.filtered and r.tables_read == {tn("lineitem")}
    assert r.sql == "SELECT 'a\\' , (SELECT max(amount) FROM orders) --' FROM `spark_catalog`.`default`.`lineitem`"


def test_a7_comment_continued_over_backslash_newline_is_not_forwarded(ctx):
    """Spark continues a `--` comment over a backslash-newline, sqlglot does not: Spark would
    read `FROM orders` here while sqlglot sees a comment. Only the proxy's reading is sent."""
    r = rw("SELECT * -- \\\n/*\nFROM orders\n-- */", ctx)
    assert r.sql == "SELECT *" and "orders" not in r.sql
    r = rw("SELECT id -- \\\n/*\nFROM orders\n-- */\nFROM lineitem", ctx)
    assert r.sql == "SELECT id FROM `spark_catalog`.`default`.`lineitem`"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT * FROM orders",
        "SELECT * FROM lineitem; DROP TABLE x",
        "BEGIN SELECT * FROM orders; END",
        "BEGIN DECLARE x INT; SELECT * FROM orders; END",
        "EXECUTE IMMEDIATE 'SELECT * FROM orders'",
        "EXECUTE IMMEDIATE sql_text",
        "(TABLE orders)",
        "SELECT * FROM (TABLE orders)",
        "SELECT (TABLE orders)",
        "WITH x AS (TABLE orders) SELECT * FROM x",
        "SELECT * FROM STREAM orders",
        "SELECT * FROM STREAM(orders)",
        "SELECT * FROM lineitem, table orders",
        "SHOW CREATE TABLE orders",
        "SHOW PARTITIONS orders",
        "SHOW TBLPROPERTIES orders",
        "SHOW TABLE EXTENDED LIKE 'orders'",
        "DESCRIBE TABLE EXTENDED orders region",
        "SELECT * FROM orders WITH ('versionAsOf' = '1')",
        "INSERT OVERWRITE DIRECTORY '/tmp/x' USING parquet SELECT * FROM orders",
        "MSCK REPAIR TABLE orders",
        "VACUUM orders",
        "CALL system.rollback_to_snapshot('default.orders', 1)",
        "CLEAR CACHE orders",
        "RESET a b",
        "SELECT * FROM `orders@v1`",
        "SELECT 'unterminated",
        "SELECT * FROM orders /* unterminated",
    ],
)
def test_a7_unanalysable_text_is_refused(ctx, sql):
    with pytest.raises(Refusal):
        rw(sql, ctx)


def test_a7_unanalysable_text_passes_when_nothing_is_protected(ctx):
    ctx.policies.clear()
    for sql in ("SHOW CREATE TABLE orders", "SELECT 1; SELECT 2", "SELECT * FROM ${x}", "BEGIN SELECT 1; END"):
        r = rw(sql, ctx)
        assert r.sql == sql and not r.filtered and not r.analysed


def test_a7_unknown_context_is_assumed_protected(ctx):
    ctx.protected_probe = False
    ctx.policies.clear()
    with pytest.raises(Refusal):
        rw("SHOW CREATE TABLE orders", ctx)


def test_a7_table_statement_is_a_filtered_query(ctx):
    r = rw("TABLE orders", ctx)
    assert r.statement_kind == "query" and r.filtered and r.sql == f"SELECT * FROM {ALICE_ORDERS} AS orders"
    ctx.policies.clear()
    r = rw("TABLE orders", ctx)
    assert r.sql == "TABLE orders" and r.analysed and not r.filtered


def test_a7_trailing_semicolons_and_whitespace(ctx):
    r = rw("SELECT * FROM orders;;  \n", ctx)
    assert r.sql == f"SELECT * FROM {ALICE_ORDERS} AS orders;;  \n"  # Spark accepts trailing semicolons
    assert rw("  ;  ", ctx).statement_kind == "empty"


def test_a7_deep_nesting_is_refused_not_crashing(ctx):
    sql = "SELECT " + "(" * 3000 + "1" + ")" * 3000 + " FROM orders"
    with pytest.raises(Refusal):
        rw(sql, ctx)


def test_time_travel_needs_full_access(ctx):
    """B13."""
    for sql in (
        "SELECT * FROM orders VERSION AS OF 3",
        "SELECT * FROM orders TIMESTAMP AS OF '2024-01-01'",
        "SELECT * FROM orders FOR SYSTEM_TIME AS OF '2024-01-01'",
        "SELECT * FROM lineitem WHERE order_id IN (SELECT id FROM default.orders VERSION AS OF 1)",
    ):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    ctx.protect("orders", "everything", ("user:alice@example.com",), "TRUE")
    r = rw("SELECT * FROM orders VERSION AS OF 3 AS o", ctx)
    assert f"FROM {ORDERS_FQ} VERSION AS OF 3 WHERE" in r.sql and r.sql.endswith(") AS o")
    # time travel on unprotected tables is none of the proxy's business
    r = rw("SELECT * FROM lineitem VERSION AS OF 3", ctx)
    assert not r.filtered and r.sql == "SELECT * FROM `spark_catalog`.`default`.`lineitem` VERSION AS OF 3"


def test_path_reads_are_reported(ctx):
    r = rw("SELECT * FROM parquet.`/warehouse/orders` JOIN delta.`s3://b/orders` ON true", ctx)
    assert not r.filtered  # rendered, but the file reads keep their `<format>.<path>` names
    assert r.sql == "SELECT * FROM parquet.`/warehouse/orders` JOIN delta.`s3://b/orders` ON true"
    assert [(p.format, p.path, p.certain) for p in r.paths_read] == [
        ("parquet", "/warehouse/orders", True),
        ("delta", "s3://b/orders", True),
    ]
    r = rw("SELECT * FROM mysource.`/some/path`", ctx)
    assert [(p.format, p.certain) for p in r.paths_read] == [("mysource", False)]
