"""Caller identity functions (rule 7), idempotence and the already-filtered marker."""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.sql import rewrite_sql
from tests.unit.rewrite.fakes import ALICE, ALICE_ORDERS, BARRIER, BOB, BOB_ORDERS, EVE, ORDERS_FQ, rw, shop, unfiltered


@pytest.fixture
def ctx():
    return shop()


@pytest.mark.parametrize(
    "sql, out",
    [
        ("SELECT current_user()", "SELECT 'alice@example.com' AS `current_user()`"),
        (
            "SELECT CURRENT_USER(), Session_User(), user()",
            "SELECT 'alice@example.com' AS `current_user()`, 'alice@example.com' AS `session_user()`, "
            "'alice@example.com' AS `user()`",
        ),
        (  # Spark names a bare session_user `current_user()` (checked against Spark 4.3)
            "SELECT current_user, session_user",
            "SELECT 'alice@example.com' AS `current_user()`, 'alice@example.com' AS `current_user()`",
        ),
        # nested: the projection keeps the name Spark gives the client's expression (issue #22)
        ("SELECT UPPER(current_user())", "SELECT UPPER('alice@example.com') AS `upper(current_user())`"),
        (
            "SELECT nvl(user(), 'x'), current_user() IN ('a','b'), (current_user() = 'a') AS y",
            "SELECT nvl('alice@example.com', 'x') AS `nvl(user(), x)`, 'alice@example.com' IN ('a','b') AS "
            "`(current_user() IN (a, b))`, ('alice@example.com' = 'a') AS y",
        ),
        ("SELECT `current_user`()", "SELECT 'alice@example.com' AS `current_user()`"),
        ("SELECT current_user() AS me", "SELECT 'alice@example.com' AS me"),
        (
            "SELECT * FROM lineitem WHERE order_id = current_user()",
            "SELECT * FROM `spark_catalog`.`default`.`lineitem` WHERE order_id = 'alice@example.com'",
        ),
    ],
)
def test_identity_functions_become_the_callers_email(ctx, sql, out):
    r = rw(sql, ctx)
    assert r.sql == out and r.identity_bound and not r.filtered


def test_bare_user_and_quoted_columns_are_columns(ctx):
    for sql in ("SELECT user FROM lineitem", "SELECT `current_user` FROM lineitem"):
        r = rw(sql, ctx)
        assert not r.identity_bound and r.sql == sql.replace("lineitem", "`spark_catalog`.`default`.`lineitem`")


def test_identity_in_writes_and_ddl(ctx):
    r = rw("INSERT INTO lineitem SELECT 1, length(current_user())", ctx)
    assert "length('alice@example.com')" in r.sql.lower()
    r = rw("CREATE TEMP VIEW me AS SELECT session_user() AS who", ctx)
    assert "'alice@example.com' AS who" in r.sql


def test_identity_is_replaced_without_any_protection(ctx):
    ctx.policies.clear()
    r = rw("SELECT current_user()", ctx)
    assert r.sql == "SELECT 'alice@example.com' AS `current_user()`"


def test_identity_cannot_break_out_of_the_literal(ctx):
    ctx.caller = type(ALICE)("user:o'neil\\x@example.com")
    r = rw("SELECT current_user()", ctx)
    assert r.sql in (
        "SELECT 'o\\'neil\\\\x@example.com' AS `current_user()`",
        "SELECT 'o''neil\\\\x@example.com' AS `current_user()`",
    )


def test_idempotent_on_its_own_output(ctx):
    sql = (
        "WITH x AS (SELECT * FROM orders WHERE owner = current_user()) "
        "SELECT x.id, (SELECT count(*) FROM default.orders) FROM x JOIN lineitem ON x.id = lineitem.order_id"
    )
    first = rw(sql, ctx)
    second = rewrite_sql(first.sql, ctx)
    assert second.sql == first.sql and not second.changed
    assert second.filtered and second.policies_applied == first.policies_applied
    third = rewrite_sql(second.sql, ctx)
    assert third.sql == first.sql


@pytest.mark.parametrize(
    "filters",
    [
        ("region = 'EU'",),
        ("region IN ('EU', 'US') AND amount > 10",),
        ("NOT region <> 'EU' OR owner IS NULL",),
        ("region IN (SELECT region FROM acl.region_grants WHERE member = SESSION_USER())",),
        ("EXISTS (SELECT 1 FROM acl.region_grants g WHERE g.region = orders.region AND g.member = current_user())",),
        ("CAST(amount AS DECIMAL(10, 2)) BETWEEN 1 AND 2 -- trailing comment",),
        ("owner = SESSION_USER() /* mine */", "region LIKE 'E%'"),
        ("lower(owner) = lower(SESSION_USER()) AND region RLIKE '^E.$'",),
        ("CASE WHEN region = 'EU' THEN TRUE ELSE amount > 100 END",),
    ],
)
def test_idempotent_for_many_filter_shapes(ctx, filters):
    ctx.policies.clear()
    for i, f in enumerate(filters):
        ctx.protect("orders", f"p{i}", ("allAuthenticatedUsers",), f)
    for sql in (
        "SELECT * FROM orders",
        "SELECT * FROM orders TABLESAMPLE (3 ROWS)",
        "SELECT * FROM orders TABLESAMPLE (1 PERCENT) o",
    ):
        r = rw(sql, ctx)  # rw checks the second pass
        assert r.filtered and unfiltered(r.sql) == []


def test_output_for_one_caller_is_rewrapped_for_another(ctx):
    alice_sql = rw("SELECT * FROM orders", ctx).sql
    ctx.as_caller(BOB)
    r = rewrite_sql(alice_sql, ctx)
    assert r.changed and r.filtered
    assert r.sql == (
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM {BOB_ORDERS} AS `orders` WHERE TRUE AND ((region = 'EU') OR "
        f"(owner = 'alice@example.com'))) {BARRIER}) AS orders"
    )


@pytest.mark.parametrize(
    "forged",
    [
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE) AS orders",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU')) AS orders",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com') OR TRUE) AS orders",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'ALICE@example.com')) AS orders",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com') GROUP BY id) AS o",
        f"SELECT * FROM (SELECT *, 1 AS x FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} AS t WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ}, lineitem WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o",
        "SELECT * FROM (SELECT * FROM default.orders WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o",
        "SELECT * FROM (SELECT * FROM orders WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o",
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com') UNION ALL SELECT * FROM {ORDERS_FQ}) AS o",
        f"WITH w AS (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com')) SELECT * FROM w",
        f"SELECT * FROM lineitem WHERE EXISTS (SELECT * FROM {ORDERS_FQ} WHERE (region = 'EU') OR (owner = 'alice@example.com'))",
    ],
)
def test_forged_look_alikes_are_wrapped_again(ctx, forged):
    r = rewrite_sql(forged, ctx)
    assert r.changed and r.filtered
    # every read of the real table now sits inside this caller's exact filter
    assert r.sql.count(ALICE_ORDERS) == r.sql.count(ORDERS_FQ) >= 1
    assert unfiltered(r.sql) == []


def test_weaker_forgery_gains_nothing(ctx):
    forged = f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE) AS orders"
    r = rewrite_sql(forged, ctx)
    assert r.sql == f"SELECT * FROM (SELECT * FROM {ALICE_ORDERS} AS `orders` WHERE TRUE) AS orders"


def test_exact_copy_of_the_callers_own_filter_is_accepted(ctx):
    """Writing the exact filter by hand is the same query the proxy would produce."""
    hand = (
        f"SELECT o.id FROM (SELECT * FROM (SELECT * FROM {ORDERS_FQ} WHERE TRUE AND ((region = 'EU') OR "
        f"(owner = 'alice@example.com'))) {BARRIER}) AS o"
    )
    r = rewrite_sql(hand, ctx)
    assert r.sql == hand and not r.changed and r.filtered
    # ... also when written with current_user() (it means the same) and comments
    hand2 = (
        f"SELECT o.id FROM (SELECT * FROM (SELECT * /* c */ FROM {ORDERS_FQ} WHERE TRUE AND ((region = 'EU') OR "
        f"(owner = current_user()))) {BARRIER}) AS o"
    )
    r = rewrite_sql(hand2, ctx)
    assert r.filtered and r.sql.count(ALICE_ORDERS) == 1 and unfiltered(r.sql) == []


def test_another_callers_marker_is_not_accepted(ctx):
    ctx.as_caller(EVE)
    r = rewrite_sql(f"SELECT * FROM {ALICE_ORDERS} AS orders", ctx)
    assert r.changed and "(owner = 'eve@example.com')" in r.sql


def test_policy_change_invalidates_old_markers(ctx):
    first = rw("SELECT * FROM orders", ctx).sql
    ctx.policies.clear()
    ctx.protect("orders", "narrow", ("allAuthenticatedUsers",), "region = 'NONE'")
    r = rewrite_sql(first, ctx)
    assert r.changed and "WHERE TRUE AND ((region = 'NONE'))" in r.sql


def test_forged_time_travel_marker_is_refused(ctx):
    forged = (
        f"SELECT * FROM (SELECT * FROM {ORDERS_FQ} VERSION AS OF 1 WHERE (region = 'EU') OR (owner = 'alice@example.com')) AS o"
    )
    with pytest.raises(Refusal) as e:
        rewrite_sql(forged, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_deterministic(ctx):
    outs = {rewrite_sql("SELECT * FROM orders o JOIN orders p ON o.id = p.id", shop()).sql for _ in range(5)}
    assert len(outs) == 1


@pytest.mark.parametrize(
    "text, projected, filtered",
    [
        ("current_user()", "'alice@example.com' AS `current_user()`", "'alice@example.com'"),
        ("upper(current_user())", "upper('alice@example.com') AS `upper(current_user())`", "upper('alice@example.com')"),
        ("length(user()) > 0", "length('alice@example.com') > 0 AS `(length(user()) > 0)`", "length('alice@example.com') > 0"),
        ("current_user() AS who", "'alice@example.com' AS who", "'alice@example.com' AS who"),
    ],
)
def test_an_expression_string_projection_keeps_sparks_name(ctx, text, projected, filtered):
    """`selectExpr("upper(current_user())")` keeps the column name Spark gives the client's
    text (issue #22); the same text as a filter condition gets no alias (invalid there)."""
    from pyspark.sql.connect.proto import base_pb2

    from rowgate.rewrite.plan import rewrite_plan

    plan = base_pb2.Plan()
    plan.root.project.input.sql.query = "SELECT 1 AS s"
    plan.root.project.expressions.add().expression_string.expression = text
    rewrite_plan(plan.root, ctx)
    assert plan.root.project.expressions[0].expression_string.expression == projected
    plan = base_pb2.Plan()
    plan.root.filter.input.sql.query = "SELECT 1 AS s"
    plan.root.filter.condition.expression_string.expression = text
    rewrite_plan(plan.root, ctx)
    assert plan.root.filter.condition.expression_string.expression == filtered
