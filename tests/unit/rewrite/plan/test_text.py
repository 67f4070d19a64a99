"""SQL text and expression text inside plans (bypass catalogue A5-A7, B9)."""

import grpc
import pytest
from pyspark.sql.connect.proto import expressions_pb2

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import rewrite_plan
from tests.unit.rewrite.fakes import tn
from tests.unit.rewrite.plan.build import (
    ALICE_FILTER,
    ALICE_ORDERS,
    Command,
    Relation,
    select_exprs,
    sql,
    sql_command,
    stable,
    table,
    where,
)


def test_sql_relation_rewritten_and_common_kept(ctx):
    rel = sql("SELECT id FROM orders", plan_id=4)
    r = stable(rel, ctx)
    assert rel.sql.query == f"SELECT id FROM {ALICE_ORDERS} AS orders"
    assert rel.common.plan_id == 4
    assert r.filtered and r.statement_kinds == ("query",) and len(r.sql_results) == 1


def test_unprotected_sql_is_the_clients_text_with_names_pinned(ctx):
    """Issue #22: while protection is in force only the proxy's edits differ from the client's text."""
    rel = sql("select  *  from lineitem -- hi")
    r = stable(rel, ctx)
    assert rel.sql.query == "select  *  from `spark_catalog`.`default`.`lineitem` -- hi" and r.changed and not r.filtered
    ctx.policies.clear()
    rel = sql("select  *  from lineitem -- hi")
    assert not stable(rel, ctx).changed and rel.sql.query == "select  *  from lineitem -- hi"


def test_named_arguments_resolve_identifier(ctx):
    rel = sql("SELECT * FROM IDENTIFIER(:t)", t="orders")
    r = stable(rel, ctx)
    assert r.filtered and "IDENTIFIER" not in rel.sql.query
    assert rel.sql.named_arguments["t"].literal.string == "orders"


def test_positional_arguments_kept_in_place(ctx):
    rel = sql("SELECT * FROM orders WHERE id > ? AND region = ?")
    rel.sql.pos_arguments.add().literal.integer = 1
    rel.sql.pos_arguments.add().literal.string = "EU"
    stable(rel, ctx)
    assert rel.sql.query.endswith("WHERE id > ? AND region = ?")
    assert len(rel.sql.pos_arguments) == 2


def test_legacy_args_are_read(ctx):
    rel = Relation()
    rel.sql.query = "SELECT * FROM IDENTIFIER(:t)"
    rel.sql.args["t"].string = "default.orders"
    assert stable(rel, ctx).filtered


def test_sql_args_keyword_used_when_text_has_none(ctx):
    rel = sql("SELECT * FROM IDENTIFIER(:t)")
    assert stable(rel, ctx, sql_args={"t": "orders"}).filtered


def test_sql_with_dataframe_reference(ctx):
    """spark.sql("SELECT * FROM {df}", df=spark.table("orders")): both parts are filtered."""
    rel = Relation()
    rel.common.plan_id = 9
    rel.with_relations.root.CopyFrom(sql("SELECT * FROM _view_1 JOIN orders USING (id)", plan_id=8))
    ref = rel.with_relations.references.add()
    ref.subquery_alias.alias = "_view_1"
    ref.subquery_alias.input.CopyFrom(table("orders", plan_id=5))
    r = stable(rel, ctx)
    assert ALICE_ORDERS in rel.with_relations.root.sql.query
    assert rel.with_relations.references[0].subquery_alias.input.WhichOneof("rel_type") == "filter"
    assert r.filtered


def test_sql_command_input_and_legacy_text(ctx):
    cmd = sql_command("SELECT * FROM orders")
    r = stable(cmd, ctx)
    assert ALICE_ORDERS in cmd.sql_command.input.sql.query and r.statement_kinds == ("query",)
    legacy = Command()
    legacy.sql_command.sql = "SELECT * FROM IDENTIFIER(:t)"
    legacy.sql_command.named_arguments["t"].literal.string = "orders"
    assert stable(legacy, ctx).filtered
    assert ALICE_ORDERS in legacy.sql_command.sql


def test_sql_command_with_input_and_text_refused(ctx):
    cmd = sql_command("SELECT 1")
    cmd.sql_command.sql = "SELECT * FROM orders"
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)


def test_policy_ddl_only_as_a_sql_command(ctx):
    ddl = "CREATE ROW ACCESS POLICY p ON orders GRANT TO ('allUsers') FILTER USING (TRUE)"
    r = rewrite_plan(sql_command(ddl), ctx)
    assert r.statement_kinds == ("row_access_policy",)
    with pytest.raises(Refusal) as e:
        rewrite_plan(select_exprs(sql(ddl), "*"), ctx)
    assert "on their own" in e.value.message
    with pytest.raises(Refusal):
        rewrite_plan(sql(ddl), ctx)  # a root relation: the pipeline answers only sql_command


def test_writes_in_sql_text_are_enforced(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(sql_command("INSERT INTO orders SELECT * FROM orders"), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_sql_session_effects_reported(ctx):
    r = rewrite_plan(sql_command("CREATE TEMP VIEW mine AS SELECT * FROM orders"), ctx)
    assert r.sql_results[0].session_effects.temp_views_created == {"mine"}
    assert r.filtered


# -- expression strings ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "id IN (SELECT id FROM orders)",
        "EXISTS (SELECT 1 FROM orders o WHERE o.id = order_id)",
        "qty > (SELECT max(amount) FROM default.orders)",
    ],
)
def test_subqueries_in_filter_strings_are_filtered(ctx, text):
    rel = where(table("lineitem"), text)
    r = stable(rel, ctx)
    new = rel.filter.condition.expression_string.expression
    assert ALICE_FILTER in new and r.filtered
    assert rel.filter.input.WhichOneof("rel_type") == "read"  # lineitem untouched


def test_select_expr_with_alias(ctx):
    rel = select_exprs(table("lineitem"), "order_id", "(SELECT count(*) FROM orders) AS n")
    stable(rel, ctx)
    exprs = [e.expression_string.expression for e in rel.project.expressions]
    assert exprs[0] == "order_id"
    assert exprs[1].startswith("(SELECT count(*) FROM (SELECT * FROM") and exprs[1].endswith(") AS n")


def test_plain_expression_strings_are_kept(ctx):
    """Issue #22: an expression string the proxy has nothing to change in passes as sent,
    unless Spark's lexer might read it differently (then it is the proxy's rendering)."""
    rel = where(table("`spark_catalog`.`default`.`lineitem`"), "qty   >  1 AND order_id <> 3 -- c")
    assert not stable(rel, ctx).changed
    assert rel.filter.condition.expression_string.expression == "qty   >  1 AND order_id <> 3 -- c"
    rel = where(table("`spark_catalog`.`default`.`lineitem`"), "qty   >  1 AND order_id <> 3 -- c \\")
    assert stable(rel, ctx).changed
    assert rel.filter.condition.expression_string.expression == "qty > 1 AND order_id <> 3"
    ctx.policies.clear()
    rel = where(table("lineitem"), "qty   >  1 AND order_id <> 3 -- c")
    assert not stable(rel, ctx).changed


def test_expression_comment_continued_over_backslash_newline_is_not_forwarded(ctx):
    """Spark continues the `--` comment over the backslash-newline and would read the
    scalar subquery over orders unfiltered; sqlglot sees `(SELECT MAX(id))`."""
    text = "(SELECT max(id) -- \\\n/*\nFROM orders\n-- */\n)"
    rel = where(table("`spark_catalog`.`default`.`lineitem`"), text)
    stable(rel, ctx)
    assert rel.filter.condition.expression_string.expression == "(SELECT MAX(id))"


def test_identity_functions_in_expression_strings(ctx):
    rel = where(table("lineitem"), "current_user() = 'alice@example.com' OR session_user() IS NULL")
    r = stable(rel, ctx)
    assert rel.filter.condition.expression_string.expression == (
        "'alice@example.com' = 'alice@example.com' OR 'alice@example.com' IS NULL"
    )
    assert r.identity_bound


def test_identity_bound_even_without_protection(ctx):
    ctx.policies.clear()
    rel = where(table("lineitem"), "user() = 'x'")
    stable(rel, ctx)
    assert rel.filter.condition.expression_string.expression == "'alice@example.com' = 'x'"


def test_variable_substitution_refused(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(where(table("lineitem"), "${cond}"), ctx)
    assert "${" in e.value.message


@pytest.mark.parametrize("text", ["1 FROM orders", "id IN (SELECT id FROM orders", "(TABLE orders)", "a, (SELECT 1)"])
def test_texts_that_are_not_one_expression_refused(ctx, text):
    with pytest.raises(Refusal):
        rewrite_plan(where(table("lineitem"), text), ctx)


def test_unparseable_text_refused_while_protected(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(where(table("lineitem"), "qty >>> 1"), ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "qty >>> 1" in e.value.message
    ctx.policies.clear()
    rel = where(table("lineitem"), "qty >>> 1")
    assert not rewrite_plan(rel, ctx).changed  # nothing protected: Spark's business


def test_expression_string_in_subquery_reference(ctx):
    """df.where(col.isin(other_df)): the referenced plan is walked through with_relations."""
    rel = Relation()
    rel.with_relations.root.CopyFrom(table("lineitem", plan_id=1))
    rel.with_relations.references.add().CopyFrom(where(table("orders", plan_id=2), "amount > 0", plan_id=3))
    r = stable(rel, ctx)
    assert r.filtered
    assert rel.with_relations.references[0].filter.input.WhichOneof("rel_type") == "filter"


def function(name: str, *args: str, **kwargs) -> expressions_pb2.Expression:
    expr = expressions_pb2.Expression()
    expr.unresolved_function.function_name = name
    for arg in args:
        expr.unresolved_function.arguments.add().unresolved_attribute.unparsed_identifier = arg
    for key, value in kwargs.items():
        setattr(expr.unresolved_function, key, value)
    return expr


@pytest.mark.parametrize("name", ["current_user", "SESSION_USER", "user", "system.builtin.current_user"])
def test_identity_dataframe_functions_bound(ctx, name):
    rel = Relation()
    rel.project.input.CopyFrom(table("lineitem"))
    rel.project.expressions.add().CopyFrom(function(name))
    r = stable(rel, ctx)
    alias = rel.project.expressions[0].alias
    assert alias.expr.literal.string == "alice@example.com" and r.identity_bound
    # the column keeps the name Spark gives the function (issue #22)
    assert list(alias.name) == [name.lower().removeprefix("system.builtin.") + "()"]


def test_identity_dataframe_function_outside_a_projection_is_a_literal(ctx):
    rel = Relation()
    rel.filter.input.CopyFrom(table("lineitem"))
    rel.filter.condition.CopyFrom(function("current_user"))
    stable(rel, ctx)
    assert rel.filter.condition.literal.string == "alice@example.com"


def test_user_defined_function_named_user_untouched(ctx):
    rel = Relation()
    rel.project.input.CopyFrom(table("`spark_catalog`.`default`.`lineitem`"))
    rel.project.expressions.add().CopyFrom(function("user", is_user_defined_function=True))
    rel.project.expressions.add().CopyFrom(function("user", "qty"))
    assert not rewrite_plan(rel, ctx).changed


def test_tables_read_by_subqueries_reported(ctx):
    r = rewrite_plan(where(table("lineitem"), "order_id IN (SELECT id FROM customers)"), ctx)
    assert r.tables_read == {tn("lineitem"), tn("customers")} and not r.filtered
