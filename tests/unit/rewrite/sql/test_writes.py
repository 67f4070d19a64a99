"""Writes into protected tables need a FILTER USING (TRUE) grant (rule 6, catalogue E21)."""

import grpc
import pytest

from rowgate.refusal import Refusal
from tests.unit.rewrite.fakes import ADMIN, BOB, rw, shop, tn

WRITES = [
    "INSERT INTO orders SELECT * FROM lineitem",
    "INSERT INTO TABLE default.orders VALUES (1, 'EU', 'x', 2)",
    "INSERT INTO orders (id, region) VALUES (1, 'EU')",
    "INSERT OVERWRITE TABLE orders SELECT * FROM lineitem",
    "INSERT OVERWRITE orders PARTITION (region = 'EU') SELECT 1, 'x', 2",
    "INSERT INTO orders REPLACE WHERE region = 'EU' SELECT * FROM lineitem",
    "INSERT INTO orders BY NAME SELECT 1 AS id",
    "WITH x AS (SELECT 1) INSERT INTO spark_catalog.default.orders SELECT * FROM x",
    "FROM lineitem INSERT INTO lineitem SELECT * INSERT INTO orders SELECT order_id, 'EU', 'x', qty",
    "UPDATE orders SET amount = 0 WHERE region = 'US'",
    "UPDATE default.orders o SET o.amount = 0",
    "DELETE FROM orders WHERE region = 'US'",
    "DELETE FROM ORDERS",
    "MERGE INTO orders t USING lineitem s ON t.id = s.order_id WHEN MATCHED THEN DELETE",
    "MERGE INTO orders USING (SELECT 1 AS id) s ON orders.id = s.id WHEN NOT MATCHED THEN INSERT *",
    "TRUNCATE TABLE orders",
    "TRUNCATE TABLE orders PARTITION (region = 'EU')",
    "LOAD DATA INPATH '/tmp/x' INTO TABLE orders",
    "CREATE OR REPLACE TABLE orders AS SELECT * FROM lineitem",
    "ALTER TABLE orders DROP PARTITION (region = 'US')",
    "ALTER TABLE orders SET LOCATION '/elsewhere'",
    "ALTER TABLE orders ADD PARTITION (region = 'XX') LOCATION '/planted'",
]


@pytest.fixture
def ctx():
    return shop()


@pytest.mark.parametrize("sql", WRITES)
def test_write_without_full_access_is_denied(ctx, sql):
    with pytest.raises(Refusal) as e:
        rw(sql, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "FILTER USING (TRUE)" in str(e.value)
    assert "region = " not in str(e.value)


@pytest.mark.parametrize("sql", WRITES)
def test_admins_are_no_exception(ctx, sql):
    ctx.as_caller(ADMIN, admin=True)
    with pytest.raises(Refusal):
        rw(sql, ctx)


@pytest.mark.parametrize("sql", WRITES)
def test_write_with_full_access_is_allowed_and_target_not_wrapped(ctx, sql):
    ctx.protect("orders", "writers", ("user:bob@example.com",), "TRUE")
    ctx.as_caller(BOB)
    r = rw(sql, ctx)
    assert tn("orders") in r.tables_written or r.session_effects.tables_altered == {tn("orders")}
    assert "WHERE (TRUE)" not in r.sql.split(" SELECT ")[0]  # the target itself is never a derived table
    # the target is pinned to the very table whose policies were checked
    assert "`spark_catalog`.`default`.`orders`" in r.sql


def test_full_access_write_still_filters_the_read_side(ctx):
    ctx.table("audit", "id")
    ctx.protect("audit", "ops", ("user:bob@example.com",), "TRUE")
    ctx.as_caller(BOB)
    r = rw("INSERT INTO audit SELECT id FROM orders", ctx)
    assert r.sql == (
        "INSERT INTO `spark_catalog`.`default`.`audit` SELECT id FROM (SELECT * FROM (SELECT * FROM "
        "`spark_catalog`.`default`.`orders` WHERE TRUE AND ((owner = 'bob@example.com'))) WHERE SPARK_PARTITION_ID() >= 0) "
        "AS orders"
    )
    assert r.tables_written == {tn("audit")} and r.filtered


def test_full_access_merge_target_plain_source_filtered(ctx):
    ctx.protect("orders", "writers", ("user:alice@example.com",), "TRUE")
    r = rw("MERGE INTO orders t USING orders s ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.amount = s.amount", ctx)
    assert r.sql.startswith("MERGE INTO `spark_catalog`.`default`.`orders` t USING (SELECT * FROM")
    assert "(TRUE)" in r.sql


def test_writes_to_unprotected_tables_pass(ctx):
    for sql in ("INSERT INTO lineitem VALUES (1, 2)", "DELETE FROM lineitem", "TRUNCATE TABLE sales.orders"):
        r = rw(sql, ctx)
        assert r.tables_written and not r.filtered
        (target,) = r.tables_written
        assert f"`{target.catalog}`.`{target.schema}`.`{target.table}`" in r.sql


def test_temp_view_named_like_the_target_does_not_hide_it(ctx):
    ctx.temp("orders")
    with pytest.raises(Refusal):
        rw("INSERT INTO orders SELECT * FROM lineitem", ctx)


def test_cte_named_like_the_target_does_not_hide_it(ctx):
    with pytest.raises(Refusal):
        rw("WITH orders AS (SELECT 1) INSERT INTO orders SELECT * FROM lineitem", ctx)


def test_clone_needs_full_access(ctx):
    with pytest.raises(Refusal) as e:
        rw("CREATE TABLE c SHALLOW CLONE orders", ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_stats_and_history_need_full_access(ctx):
    for sql in (
        "DESCRIBE EXTENDED orders",
        "DESCRIBE FORMATTED default.orders",
        "DESCRIBE HISTORY orders",
        "ANALYZE TABLE orders COMPUTE STATISTICS",
    ):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    r = rw("DESCRIBE orders", ctx)
    assert r.statement_kind == "describe" and r.session_effects.metadata_read == {tn("orders")}
    assert r.sql == "DESCRIBE `spark_catalog`.`default`.`orders`"


def test_describe_column_needs_full_access_for_its_statistics(ctx):
    """Issue #12 while-here: `DESCRIBE t col` works (name, type, comment); with EXTENDED it
    shows the column's min/max/distinct count (D19), which needs full access."""
    r = rw("DESCRIBE orders region", ctx)
    assert r.statement_kind == "describe" and r.sql == "DESCRIBE `spark_catalog`.`default`.`orders` `region`"
    assert r.session_effects.metadata_read == {tn("orders")}
    for sql in ("DESCRIBE EXTENDED orders region", "DESC TABLE FORMATTED default.orders region"):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    ctx.protect("orders", "everything", ("user:alice@example.com",), "TRUE")
    assert rw("DESCRIBE EXTENDED orders region", ctx).sql == "DESCRIBE EXTENDED `spark_catalog`.`default`.`orders` `region`"


def test_describe_query(ctx):
    r = rw("DESCRIBE QUERY SELECT id FROM orders", ctx)
    assert r.statement_kind == "describe" and r.filtered
    assert r.sql.startswith("DESCRIBE SELECT id FROM (SELECT * FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE")
    assert rw("DESC QUERY TABLE orders", ctx).filtered


def test_drop_and_rename_are_reported(ctx):
    r = rw("DROP TABLE IF EXISTS orders", ctx)
    assert r.statement_kind == "drop" and r.session_effects.tables_dropped == {tn("orders")}
    r = rw("ALTER TABLE orders RENAME TO orders_old", ctx)
    assert r.session_effects.tables_renamed == ((tn("orders"), tn("orders_old")),)
    assert r.session_effects.invalidates_catalog
    r = rw("ALTER TABLE default.orders RENAME TO sales.o2", ctx)
    assert r.session_effects.tables_renamed == ((tn("orders"), tn("spark_catalog.sales.o2")),)
    r = rw("ALTER TABLE orders ADD COLUMNS (note STRING)", ctx)
    assert r.session_effects.tables_altered == {tn("orders")}


def test_drop_temp_view_named_like_a_table(ctx):
    ctx.temp("orders")
    r = rw("DROP VIEW orders", ctx)
    assert r.session_effects.temp_views_dropped == {"orders"} and not r.session_effects.views_dropped
    r = rw("DROP TABLE orders", ctx)
    assert r.session_effects.temp_views_dropped == {"orders"} and not r.session_effects.tables_dropped
    r = rw("DROP TABLE default.orders", ctx)
    assert r.session_effects.tables_dropped == {tn("orders")}
    r = rw("DROP VIEW global_temp.g", ctx)
    assert r.session_effects.temp_views_dropped == {"global_temp.g"}


def test_locations_are_reported(ctx):
    r = rw("CREATE TABLE t2 (a INT) USING parquet LOCATION '/warehouse/orders'", ctx)
    assert r.session_effects.locations == ("/warehouse/orders",)
    r = rw("CREATE TEMPORARY VIEW tv USING parquet OPTIONS (path '/warehouse/orders')", ctx)
    assert r.session_effects.locations == ("/warehouse/orders",)
    r = rw("CREATE TABLE t3 LIKE orders LOCATION '/warehouse/orders'", ctx)
    assert r.session_effects.locations == ("/warehouse/orders",)
    assert r.session_effects.metadata_read == {tn("orders")}


def test_functions_are_admin_only_under_protection(ctx):
    for sql in (
        "CREATE TEMPORARY FUNCTION lower(x STRING) RETURNS STRING RETURN 'eu'",
        "CREATE FUNCTION f AS 'com.example.F' USING JAR '/x.jar'",
    ):
        with pytest.raises(Refusal) as e:
            rw(sql, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    ctx.as_caller(ADMIN, admin=True)
    r = rw("CREATE TEMPORARY FUNCTION f() RETURNS TABLE (id INT) RETURN SELECT id FROM orders", ctx)
    assert r.statement_kind == "create_function" and r.session_effects.functions_created == ("f",)
    assert "(SELECT * FROM `spark_catalog`.`default`.`orders` WHERE TRUE AND ((owner = 'root@example.com')))" in r.sql
    with pytest.raises(Refusal):  # a stored function body cannot be filtered per reader
        rw("CREATE FUNCTION g() RETURNS TABLE (id INT) RETURN SELECT id FROM orders", ctx)


def test_global_temp_view_over_protected_data_is_refused(ctx):
    with pytest.raises(Refusal) as e:
        rw("CREATE GLOBAL TEMPORARY VIEW g AS SELECT * FROM orders", ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    r = rw("CREATE GLOBAL TEMPORARY VIEW g AS SELECT * FROM lineitem", ctx)
    assert r.session_effects.temp_views_created == {"global_temp.g"}
    ctx.temp("mine")  # may hold this caller's filtered rows
    with pytest.raises(Refusal):
        rw("CREATE GLOBAL TEMPORARY VIEW g2 AS SELECT * FROM mine", ctx)


def test_insert_overwrite_directory_is_refused_under_protection(ctx):
    with pytest.raises(Refusal):
        rw("INSERT OVERWRITE DIRECTORY '/tmp/out' USING parquet SELECT * FROM orders", ctx)


def test_writes_by_path_are_reported_as_locations(ctx):
    r = rw("INSERT INTO parquet.`/warehouse/orders` SELECT * FROM lineitem", ctx)
    assert r.session_effects.locations == ("/warehouse/orders",)
    r = rw("CREATE TABLE delta.`/warehouse/copy` AS SELECT * FROM lineitem", ctx)
    assert r.session_effects.locations == ("/warehouse/copy",)
    r = rw("DELETE FROM delta.`/warehouse/orders` WHERE true", ctx)
    assert r.session_effects.locations == ("/warehouse/orders",)
