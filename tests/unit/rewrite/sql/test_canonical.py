"""Issue #12, properties 1 and 2: only the proxy's rendering is forwarded, names pinned.

While a table is protected, no text the client sent reaches Spark as sent: every statement
is rendered from the proxy's own reading (comments dropped), including statements read
from tokens (SET, SHOW, EXPLAIN, ...), and every name resolved to a catalog relation is
fully qualified. With nothing protected, texts pass byte for byte.
"""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.sql import rewrite_sql
from tests.unit.rewrite.fakes import ADMIN, rw, shop

FQ = "`spark_catalog`.`default`"
BS = "\\"


@pytest.fixture
def ctx():
    return shop()


# -- property 1: canonical forwarding ---------------------------------------------------------


@pytest.mark.parametrize(
    "sql, out",
    [
        # the example of the issue: Spark continues the comment and reads orders, sqlglot does not
        ("SELECT * -- " + BS + "\n/*\nFROM orders\n-- */", "SELECT *"),
        ("SELECT 1 AS x -- " + BS + "\n/* UNION ALL SELECT id FROM orders */", "SELECT 1 AS x"),
        ("select\t*\r\nfrom\flineitem;", f"SELECT * FROM {FQ}.`lineitem`"),
        ("SELECT * FROM lineitem /* a /* nested */ comment */", f"SELECT * FROM {FQ}.`lineitem`"),
        (
            "SELECT 'it''s', \"dq\", r'a" + BS + "n' FROM lineitem -- " + BS,
            "SELECT 'it" + BS + "'s', 'dq', 'a" + BS + BS + f"n' FROM {FQ}.`lineitem`",
        ),
        # a raw string with a backslash but no quote inside ends where Spark ends it: spliced
        ("SELECT r'a" + BS + "n' FROM lineitem", "SELECT r'a" + BS + f"n' FROM {FQ}.`lineitem`"),
        ("", ""),
        ("  -- only a comment", ""),
    ],
)
def test_the_proxys_rendering_is_forwarded(ctx, sql, out):
    r = rewrite_sql(sql, ctx)
    assert r.sql == out and "--" not in r.sql and "/*" not in r.sql.replace("/*+", "")


def test_a_doubled_quote_is_read_like_spark(ctx):
    """Spark reads 'it''s' as it's; sqlglot alone would read two adjacent literals (its)."""
    sql = "SELECT 'it''s', '''', \"a\"\"b\", 'a' 'b' FROM lineitem"
    out = "SELECT 'it" + BS + "'s', '" + BS + "'', 'a\"b', CONCAT('a', 'b') FROM " + FQ + ".`lineitem`"
    assert rw(sql + " -- " + BS, ctx).sql == out  # the canonical rendering (a comment Spark may continue)
    assert rw(sql, ctx).sql == sql.replace("lineitem", FQ + ".`lineitem`")  # spliced: as written


@pytest.mark.parametrize(
    "sql, out",
    [
        ("SELECT * FROM lineitem -- trailing", f"SELECT * FROM {FQ}.`lineitem` -- trailing"),
        ("select  nvl(qty, 0)  from lineitem /* c */ l", f"select  nvl(qty, 0)  from {FQ}.`lineitem` /* c */ l"),
        ("SELECT 'a" + BS + BS + "d' FROM lineitem", "SELECT 'a" + BS + BS + f"d' FROM {FQ}.`lineitem`"),
    ],
)
def test_the_clients_text_is_forwarded_with_the_proxys_edits(ctx, sql, out):
    """Issue #22: a text Spark tokenises like sqlglot keeps every character rowgate does not edit."""
    assert rewrite_sql(sql, ctx).sql == out


def test_hints_and_comments_are_kept(ctx):
    r = rw("SELECT /*+ BROADCAST(l) */ * FROM lineitem l -- c", ctx)
    assert r.sql == f"SELECT /*+ BROADCAST(l) */ * FROM {FQ}.`lineitem` l -- c"
    r = rw("SELECT * FROM lineitem l /*+ BROADCAST(l) */", ctx)  # not where Spark reads a hint
    assert r.sql == f"SELECT * FROM {FQ}.`lineitem` AS l"


@pytest.mark.parametrize(
    "sql, out",
    [
        ("SET spark.sql.shuffle.partitions = 4 ; ", "SET spark.sql.shuffle.partitions=4"),
        ("SET  /* c */ spark.sql.ansi.enabled=true", None),  # Spark reads the comment as the key: refused
        ("RESET  spark.sql.shuffle.partitions", "RESET spark.sql.shuffle.partitions"),
        ("SET CATALOG spark_catalog", "SET CATALOG 'spark_catalog'"),
        ("SET CATALOG 'spark_catalog'", "SET CATALOG 'spark_catalog'"),
        ("SET CATALOG `odd'name`", "SET CATALOG 'odd\\'name'"),
        ("SET TIME ZONE /* c */ 'UTC'", "SET TIME ZONE 'UTC'"),
        ("SHOW /* c */ TABLES IN sales -- c", "SHOW TABLES IN sales"),
        # sqlglot reads SHOW TABLES, Spark (comment continued) reads SHOW PARTITIONS orders:
        # the proxy's reading is what Spark gets
        ("SHOW -- " + BS + "\nTABLES\nPARTITIONS orders", "SHOW TABLES PARTITIONS orders"),
        ("CLEAR   CACHE", "CLEAR CACHE"),
        ("EXPLAIN /* c */ EXTENDED SELECT * FROM lineitem -- c", f"EXPLAIN EXTENDED SELECT * FROM {FQ}.`lineitem` -- c"),
        ("USE  sales -- c", "USE `sales`"),
    ],
)
def test_statements_read_from_tokens_are_rendered_too(ctx, sql, out):
    if out is None:
        with pytest.raises(Refusal):
            rewrite_sql(sql, ctx)
    else:
        assert rewrite_sql(sql, ctx).sql == out


def test_a_set_value_spanning_lines_is_refused(ctx):
    """sqlglot: SET a = 'b<newline>SELECT ...'; Spark (comment continued): SELECT * FROM orders."""
    with pytest.raises(Refusal) as e:
        rewrite_sql("-- " + BS + "\nSET a=b\nSELECT * FROM orders", ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_describe_kinds_survive_rendering(ctx):
    # sqlglot's own rendering drops the kind: `DESCRIBE abs` would describe a table
    assert rw("DESCRIBE FUNCTION abs", ctx).sql == "DESCRIBE FUNCTION abs"
    assert rw("DESCRIBE FUNCTION EXTENDED abs", ctx).sql == "DESCRIBE FUNCTION EXTENDED abs"
    assert rw("DESCRIBE DATABASE EXTENDED sales", ctx).sql == "DESCRIBE DATABASE EXTENDED sales"


def test_nothing_protected_forwards_the_clients_bytes(ctx):
    ctx.policies.clear()
    for sql in (
        "SELECT * -- " + BS + "\n/*\nFROM orders\n-- */",
        "INSERT INTO lineitem SELECT * FROM customers -- c",
        "SET a = b ;",
        "SHOW /* c */ TABLES",
    ):
        assert rewrite_sql(sql, ctx).sql == sql


def test_rendering_is_stable(ctx):
    for sql in (
        "SELECT * FROM orders o JOIN lineitem l ON o.id = l.order_id -- c",
        "TABLE lineitem",
        "DESCRIBE orders region",
        "SHOW TABLES",
    ):
        once = rewrite_sql(sql, ctx).sql
        assert rewrite_sql(once, ctx).sql == once


# -- property 2: names pinned -------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, out",
    [
        ("DROP TABLE lineitem", f"DROP TABLE {FQ}.`lineitem`"),
        ("DROP VIEW IF EXISTS sales.v", "DROP VIEW IF EXISTS `spark_catalog`.`sales`.`v`"),
        ("CREATE TABLE c LIKE lineitem", f"CREATE TABLE {FQ}.`c` LIKE {FQ}.`lineitem`"),
        ("COMMENT ON TABLE lineitem IS 'x'", f"COMMENT ON TABLE {FQ}.`lineitem` IS 'x'"),
        ("REFRESH TABLE lineitem", f"REFRESH TABLE {FQ}.`lineitem`"),
        ("TRUNCATE TABLE lineitem", f"TRUNCATE TABLE {FQ}.`lineitem`"),
        ("ALTER TABLE lineitem RENAME TO li2", f"ALTER TABLE {FQ}.`lineitem` RENAME TO li2"),  # new name as written
        ("CREATE TEMPORARY VIEW tv AS SELECT * FROM lineitem", f"CREATE TEMPORARY VIEW tv AS SELECT * FROM {FQ}.`lineitem`"),
        ("DROP TEMPORARY VIEW IF EXISTS lineitem", "DROP TEMPORARY VIEW IF EXISTS lineitem"),
        ("SELECT * FROM my_udtf(TABLE(lineitem))", f"SELECT * FROM MY_UDTF(TABLE({FQ}.`lineitem`))"),
        ("SELECT * FROM IDENTIFIER('lineitem')", f"SELECT * FROM {FQ}.`lineitem`"),
    ],
)
def test_targets_and_reads_are_fully_qualified(ctx, sql, out):
    assert rw(sql, ctx).sql == out


def test_temp_views_are_qualified_ctes_stay_as_written(ctx):
    ctx.temp("tv")
    assert rw("SELECT * FROM tv", ctx).sql == "SELECT * FROM `system`.`session`.`tv`"
    assert rw("SELECT tv.* FROM tv AS tv", ctx).sql == "SELECT tv.* FROM `system`.`session`.`tv` AS tv"
    assert rw("UNCACHE TABLE tv", ctx).sql == "UNCACHE TABLE tv"
    r = rw("WITH lineitem AS (SELECT 1 AS x) SELECT * FROM lineitem", ctx)
    assert r.sql == "WITH lineitem AS (SELECT 1 AS x) SELECT * FROM lineitem"


def test_stored_bodies_are_pinned_not_filtered(ctx):
    """A persistent view or function body is resolved where it is created: pinned there, so a
    concurrent USE cannot make Spark store a body over another table; never filtered."""
    r = rw("CREATE VIEW v AS WITH c AS (SELECT * FROM orders) SELECT * FROM c JOIN sales.orders s ON true", ctx)
    assert not r.filtered
    assert r.sql == (
        f"CREATE VIEW {FQ}.`v` AS WITH c AS (SELECT * FROM {FQ}.`orders`) "
        "SELECT * FROM c JOIN `spark_catalog`.`sales`.`orders` s ON true"
    )
    ctx.as_caller(ADMIN, admin=True)  # creating functions is reserved to admins
    r = rw("CREATE FUNCTION f() RETURNS TABLE (x INT) RETURN SELECT order_id FROM lineitem", ctx)
    assert f"FROM {FQ}.`lineitem`" in r.sql
    # a temp view in a persistent view's body is Spark's error to raise, not a table to read
    ctx.temp("tv")
    assert "FROM tv" in rw("CREATE VIEW v2 AS SELECT * FROM tv", ctx).sql


def test_current_namespace_is_resolved_once_by_the_proxy(ctx):
    ctx.current_schema = "sales"
    assert rw("SELECT * FROM orders", ctx).sql == "SELECT * FROM `spark_catalog`.`sales`.`orders`"
    ctx.current_catalog = "lake"
    assert rw("INSERT INTO t SELECT 1", ctx).sql == "INSERT INTO `lake`.`sales`.`t` SELECT 1"


def test_admins_get_the_same_rendering(ctx):
    ctx.as_caller(ADMIN, admin=True)
    assert rw("SELECT * FROM lineitem -- c", ctx).sql == f"SELECT * FROM {FQ}.`lineitem` -- c"


@pytest.mark.parametrize(
    "sql, out",
    [
        # namespaces are not relations: neither read nor pinned as tables
        ("CREATE DATABASE d", "CREATE DATABASE d"),
        ("CREATE SCHEMA IF NOT EXISTS d LOCATION '/x'", "CREATE SCHEMA IF NOT EXISTS d LOCATION '/x'"),
        ("COMMENT ON DATABASE d IS 'x'", "COMMENT ON DATABASE d IS 'x'"),
        ("DROP DATABASE d CASCADE", "DROP DATABASE d CASCADE"),
        # sqlglot reads `USE NAMESPACE d` as the schema NAMESPACE aliased d
        ("USE NAMESPACE d", "USE SCHEMA `d`"),
        ("USE spark_catalog.d", "USE `spark_catalog`.`d`"),
        ("USE CATALOG spark_catalog", "USE CATALOG `spark_catalog`"),
    ],
)
def test_namespace_statements(ctx, sql, out):
    ctx.as_caller(ADMIN, admin=True)
    r = rw(sql, ctx)
    assert r.sql == out and not r.tables_read
