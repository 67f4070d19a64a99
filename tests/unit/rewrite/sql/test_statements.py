"""Statement kinds and session effects (rule 8) and the commands sqlglot does not model."""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.sql.text_statements import parse_reset, parse_set
from tests.unit.rewrite.fakes import ADMIN, rw, shop, tn


@pytest.fixture
def ctx():
    return shop()


@pytest.mark.parametrize(
    "sql, pairs",
    [
        ("SET spark.sql.shuffle.partitions=4", (("spark.sql.shuffle.partitions", "4"),)),
        ("SET spark.sql.shuffle.partitions = 4 ;", (("spark.sql.shuffle.partitions", "4"),)),
        ("set spark.sql.optimizer.excludedRules=a,b", (("spark.sql.optimizer.excludedRules", "a,b"),)),
        ("SET spark.sql.variable.substitute", (("spark.sql.variable.substitute", None),)),
        ("SET `spark.sql.caseSensitive` = `true`", (("spark.sql.caseSensitive", "true"),)),
        (
            "SET spark.sql.catalog.evil=org.apache.spark.sql.execution.datasources.v2.V2SessionCatalog",
            (("spark.sql.catalog.evil", "org.apache.spark.sql.execution.datasources.v2.V2SessionCatalog"),),
        ),
        ("SET", ()),
        ("SET -v", (("-v", None),)),
        ("SET TIME ZONE 'UTC'", (("spark.sql.session.timeZone", "'UTC'"),)),
    ],
)
def test_set(ctx, sql, pairs):
    r = rw(sql, ctx)
    assert r.statement_kind == "set" and not r.filtered
    assert r.session_effects.config_set == pairs
    # forwarded as the proxy's own text for what it read (canonical.set_text)
    assert rw(r.sql, ctx).session_effects.config_set == pairs
    if pairs and pairs[0][0] != "spark.sql.session.timeZone" and pairs[0][1] is not None:
        assert r.sql == f"SET {pairs[0][0]}={pairs[0][1]}"


def test_unreadable_set_is_refused_under_protection(ctx):
    with pytest.raises(Refusal):
        rw("SET a b c = d", ctx)
    ctx.policies.clear()
    assert rw("SET a b c = d", ctx).statement_kind == "set"


def test_reset(ctx):
    r = rw("RESET", ctx)
    assert r.statement_kind == "reset" and r.session_effects.config_reset_all
    r = rw("RESET spark.sql.variable.substitute", ctx)
    assert r.session_effects.config_reset == ("spark.sql.variable.substitute",) and not r.session_effects.config_reset_all


def test_parse_set_and_reset_helpers():
    assert parse_set("k=v;") == (("k", "v"),)
    assert parse_set("a b") is None
    assert parse_reset("`a.b`") == ("a.b",)
    assert parse_reset("a b") is None


def test_show_safe_forms_pass(ctx):
    for sql in (
        "SHOW TABLES",
        "SHOW TABLES IN sales LIKE 'o*'",
        "SHOW DATABASES",
        "SHOW COLUMNS IN orders",
        "SHOW FUNCTIONS",
        "SHOW USER FUNCTIONS",
        "SHOW CURRENT NAMESPACE",
        "SHOW VIEWS",
        "SHOW CATALOGS",
    ):
        r = rw(sql, ctx)
        assert r.statement_kind == "show" and r.sql == sql


def test_row_access_policy_statements_are_classified_not_parsed(ctx):
    for sql in (
        "CREATE ROW ACCESS POLICY p ON orders GRANT TO ('user:a@x.com') FILTER USING (region = 'EU')",
        "create or replace row access policy p on orders filter using (true)",
        "DROP ROW ACCESS POLICY p ON orders",
        "DROP ALL ROW ACCESS POLICIES ON orders",
        "SHOW ROW ACCESS POLICIES ON orders",
    ):
        assert rw(sql, ctx).statement_kind == "row_access_policy"


def test_add_jar_is_admin_only_under_protection(ctx):
    with pytest.raises(Refusal) as e:
        rw("ADD JAR '/tmp/evil.jar'", ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    ctx.as_caller(ADMIN, admin=True)
    assert rw("ADD JAR '/tmp/ok.jar'", ctx).statement_kind == "add_resource"


def test_ddl_effects(ctx):
    r = rw("CREATE TABLE IF NOT EXISTS sales.t (a INT) USING delta", ctx)
    assert r.statement_kind == "create_table" and r.session_effects.tables_created == {tn("spark_catalog.sales.t")}
    r = rw("CREATE VIEW sales.v AS SELECT 1", ctx)
    assert r.session_effects.views_created == {tn("spark_catalog.sales.v")}
    r = rw("CREATE TEMP VIEW TV AS SELECT 1", ctx)
    assert r.session_effects.temp_views_created == {"tv"}
    r = rw("DROP VIEW IF EXISTS sales.v", ctx)
    assert r.session_effects.views_dropped == {tn("spark_catalog.sales.v")}
    r = rw("CREATE DATABASE d LOCATION '/x'", ctx)
    assert r.statement_kind == "ddl" and r.session_effects.locations == ("/x",)
    r = rw("COMMENT ON TABLE orders IS 'x'", ctx)
    assert r.statement_kind == "ddl"
    r = rw("CACHE TABLE orders", ctx)
    assert r.statement_kind == "cache" and not r.filtered and r.session_effects.metadata_read == {tn("orders")}
    assert r.sql == "CACHE TABLE `spark_catalog`.`default`.`orders`"
    assert rw("UNCACHE TABLE IF EXISTS orders", ctx).statement_kind == "uncache"
    assert rw("REFRESH TABLE orders", ctx).statement_kind == "refresh"
    assert rw("CLEAR CACHE", ctx).statement_kind == "cache"


def test_statement_kinds_of_queries(ctx):
    assert rw("VALUES (1), (2)", ctx).statement_kind == "query"
    assert rw("(SELECT 1) UNION (SELECT 2)", ctx).statement_kind == "query"
    assert rw("WITH x AS (SELECT 1) SELECT * FROM x", ctx).statement_kind == "query"


@pytest.mark.parametrize(
    "sql, namespace",
    [
        ("DROP DATABASE default CASCADE", ("spark_catalog", "default")),
        ("DROP SCHEMA IF EXISTS spark_catalog.Default", ("spark_catalog", "default")),
        ("DROP NAMESPACE `Other`", ("spark_catalog", "other")),
    ],
)
def test_drop_database_names_its_namespace(sql, namespace):
    """The enforcement step refuses it for non-admins when it holds a protected table, and
    drops those tables' policies after an admin's succeeds."""
    r = rw(sql, shop())
    assert r.session_effects.namespaces_dropped == {namespace} and r.sql == sql
