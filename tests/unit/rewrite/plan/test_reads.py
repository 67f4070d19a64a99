"""Reads by name, by path and through table functions (bypass catalogue A1-A4, B9, B10, B13, B14)."""

import grpc
import pytest

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import rewrite_plan
from rowgate.rewrite.sql.result import PathRead
from rowgate.rewrite.sql.wrap import BARRIER
from tests.unit.rewrite.fakes import BOB, tn
from tests.unit.rewrite.plan.build import (
    ALICE_FILTER,
    BOB_FILTER,
    ORDERS_ID,
    Relation,
    filtered_read,
    read_of,
    select_exprs,
    stable,
    table,
    where,
)


def test_protected_read_becomes_a_filter_that_keeps_common(ctx):
    rel = table("orders", plan_id=7)
    rel.common.source_info = "df = spark.table('orders')"
    r = stable(rel, ctx)
    assert rel.common.plan_id == 7 and rel.common.source_info == "df = spark.table('orders')"
    assert filtered_read(rel) == (ORDERS_ID, ALICE_FILTER)
    assert r.filtered and r.changed
    assert r.tables_read == {tn("orders")}
    assert r.policies_applied == ("spark_catalog.default.orders:eu_sales", "spark_catalog.default.orders:own_rows")


def test_other_caller_gets_own_filter(ctx):
    ctx.as_caller(BOB)
    rel = table("orders")
    stable(rel, ctx)
    assert filtered_read(rel) == (ORDERS_ID, BOB_FILTER)


def test_alice_filter_is_not_accepted_for_bob(ctx):
    """A client cannot send another caller's filtered form: it is filtered again."""
    rel = table("orders")
    rewrite_plan(rel, ctx)
    ctx.as_caller(BOB)
    r = rewrite_plan(rel, ctx)
    assert r.changed and r.filtered
    assert filtered_read(rel) is None  # alice's filtered form is no longer recognised ...
    assert rel.filter.input.filter.condition.expression_string.expression == ALICE_FILTER  # ... her filter stays ...
    assert filtered_read(rel.filter.input.filter.input) == (ORDERS_ID, BOB_FILTER)  # ... over bob's read


def test_lookalike_filter_is_filtered_again(ctx):
    rel = where(table(ORDERS_ID), "TRUE")
    r = stable(rel, ctx)
    assert r.filtered
    assert filtered_read(rel.filter.input) == (ORDERS_ID, ALICE_FILTER)


def test_recognised_form_with_common_on_the_read_is_filtered_again(ctx):
    rel = where(where(table(ORDERS_ID, plan_id=3), ALICE_FILTER), BARRIER)
    rewrite_plan(rel, ctx)
    assert filtered_read(rel.filter.input.filter.input) == (ORDERS_ID, ALICE_FILTER)


def test_recognised_form_without_the_barrier_is_filtered_again(ctx):
    """The row filter alone (no barrier above it) is not the proxy's form: Spark could run
    the caller's predicates before it."""
    rel = where(table(ORDERS_ID), ALICE_FILTER)
    r = rewrite_plan(rel, ctx)
    assert r.changed and filtered_read(rel.filter.input) == (ORDERS_ID, ALICE_FILTER)


def test_unprotected_read_is_pinned_not_filtered(ctx):
    """Issue #12 (names pinned): the name is forwarded fully qualified, nothing else changes."""
    rel = table("lineitem", plan_id=1)
    expected = table("`spark_catalog`.`default`.`lineitem`", plan_id=1).SerializeToString()
    r = stable(rel, ctx)
    assert rel.SerializeToString() == expected
    assert not r.filtered and r.changed and r.tables_read == {tn("lineitem")}
    # already pinned: untouched
    assert not stable(rel, ctx).changed and rel.SerializeToString() == expected
    # with nothing protected the read passes as sent
    ctx.policies.clear()
    rel = table("lineitem", plan_id=1)
    assert not stable(rel, ctx).changed and rel.read.named_table.unparsed_identifier == "lineitem"


@pytest.mark.parametrize(
    "name",
    [
        "orders",
        "ORDERS",
        "`orders`",
        "default.orders",
        "`default`.`orders`",
        "spark_catalog.default.orders",
        " default . orders ",
    ],
)
def test_name_variants_all_filtered(ctx, name):
    rel = table(name)
    stable(rel, ctx)
    assert filtered_read(rel) == (ORDERS_ID, ALICE_FILTER)


def test_quoted_dot_is_one_part(ctx):
    rel = table("`default.orders`")  # the table `default.orders` in the current database
    r = stable(rel, ctx)
    assert not r.filtered and rel.WhichOneof("rel_type") == "read"
    # unknown to the catalog and no temp view rowgate knows: forwarded as a temp view (it
    # may be one Spark made itself), never as a table; the pipeline refuses it unless Spark
    # lists it (pipeline/enforce/rules/unknown_relations.py)
    assert rel.read.named_table.unparsed_identifier == "`system`.`session`.`default.orders`"
    assert r.unknown_relations == {"default.orders"} and not r.tables_read


def test_a_known_one_part_name_is_pinned(ctx):
    rel = table("lineitem")
    stable(rel, ctx)
    assert rel.read.named_table.unparsed_identifier == "`spark_catalog`.`default`.`lineitem`"


def test_current_database_is_used(ctx):
    ctx.current_schema = "sales"
    rel = table("orders")  # sales.orders: unprotected
    assert not stable(rel, ctx).filtered
    assert rel.read.named_table.unparsed_identifier == "`spark_catalog`.`sales`.`orders`"
    rel = table("default.orders")
    stable(rel, ctx)
    assert filtered_read(rel) is not None


def test_temp_view_shadows_table(ctx):
    ctx.temp("orders")
    rel = table("orders")
    r = stable(rel, ctx)
    # pinned as the temp view: dropped before Spark runs it, the name cannot fall to the table
    assert r.changed and r.temp_views_read == {"orders"}
    assert rel.read.named_table.unparsed_identifier == "`system`.`session`.`orders`"
    rel = table("default.orders")  # two parts: never a temp view
    stable(rel, ctx)
    assert filtered_read(rel) is not None


def test_global_temp_view_read(ctx):
    rel = table("global_temp.orders")
    r = stable(rel, ctx)
    assert not r.changed and r.temp_views_read == {"global_temp.orders"}


def test_unparseable_name_refused_while_protected(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(table("orders-2024"), ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "orders-2024" in e.value.message
    ctx.policies.clear()
    assert not rewrite_plan(table("orders-2024"), ctx).changed


def test_four_part_name_refused(ctx):
    with pytest.raises(Refusal):
        rewrite_plan(table("a.b.c.d"), ctx)


def test_streaming_read_stays_streaming(ctx):
    rel = table("orders", plan_id=2, streaming=True)
    r = stable(rel, ctx)
    assert r.filtered
    assert read_of(rel).read.is_streaming


@pytest.mark.parametrize("key", ["versionAsOf", "TIMESTAMPASOF", "timestampAsOf", "readChangeFeed", "snapshot-id"])
def test_time_travel_options_need_full_access(ctx, key):
    with pytest.raises(Refusal) as e:
        rewrite_plan(table("orders", **{key: "1"}), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "FILTER USING (TRUE)" in e.value.message and key in e.value.message


def test_time_travel_with_full_access_keeps_options(ctx):
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    rel = table("orders", versionAsOf="3")
    r = stable(rel, ctx)
    assert r.filtered
    assert dict(read_of(rel).read.named_table.options) == {"versionAsOf": "3"}


def test_time_travel_on_unprotected_table_is_fine(ctx):
    rel = table("lineitem", versionAsOf="3")
    assert not stable(rel, ctx).filtered
    assert rel.read.named_table.unparsed_identifier == "`spark_catalog`.`default`.`lineitem`" and dict(
        rel.read.named_table.options
    ) == {"versionAsOf": "3"}


def test_unknown_option_on_protected_read_refused(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(table("orders", someOption="x"), ctx)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "someOption" in e.value.message


def test_harmless_streaming_option_kept(ctx):
    rel = table("orders", streaming=True, maxFilesPerTrigger="1")
    stable(rel, ctx)
    assert dict(read_of(rel).read.named_table.options) == {"maxFilesPerTrigger": "1"}


def test_recognised_form_still_checks_time_travel(ctx):
    rel = where(table(ORDERS_ID, versionAsOf="1"), ALICE_FILTER)
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_path_option_on_table_read_reported(ctx):
    r = rewrite_plan(table("lineitem", path="/warehouse/orders"), ctx)
    assert PathRead("", "/warehouse/orders") in r.paths_read


def test_file_format_name_is_a_path_read(ctx):
    r = stable(table("parquet.`/warehouse/orders`"), ctx)
    assert r.paths_read == (PathRead("parquet", "/warehouse/orders"),)


def test_view_over_protected_table_is_expanded_as_sql(ctx):
    ctx.view("eu_orders", "SELECT id, amount FROM orders WHERE amount > 0")
    rel = table("eu_orders", plan_id=5)
    r = stable(rel, ctx)
    assert rel.WhichOneof("rel_type") == "sql" and rel.common.plan_id == 5
    assert ALICE_FILTER in rel.sql.query and rel.sql.query.endswith("AS `eu_orders`")
    assert r.filtered and r.views_expanded == {tn("eu_orders")}


def test_view_over_unprotected_table_untouched(ctx):
    ctx.view("items", "SELECT * FROM lineitem")
    rel = table("items")
    assert not stable(rel, ctx).filtered and rel.WhichOneof("rel_type") == "read"
    assert rel.read.named_table.unparsed_identifier == "`spark_catalog`.`default`.`items`"


def test_streaming_or_options_on_expanded_view_refused(ctx):
    ctx.view("eu_orders", "SELECT * FROM orders")
    with pytest.raises(Refusal):
        rewrite_plan(table("eu_orders", streaming=True), ctx)
    with pytest.raises(Refusal):
        rewrite_plan(table("eu_orders", versionAsOf="1"), ctx)


def test_reads_nested_anywhere_are_filtered(ctx):
    join = Relation()
    join.join.left.CopyFrom(table("orders", plan_id=1))
    join.join.right.CopyFrom(table("lineitem", plan_id=2))
    outer = select_exprs(join, "id")
    r = stable(outer, ctx)
    assert filtered_read(outer.project.input.join.left) is not None
    assert outer.project.input.join.right.WhichOneof("rel_type") == "read"
    assert r.tables_read == {tn("orders"), tn("lineitem")}


def test_data_source_paths_reported(ctx):
    rel = Relation()
    source = rel.read.data_source
    source.format = "Parquet"
    source.paths.extend(["/a", "/b"])
    source.options["PATH"] = "/c"
    source.options["paths"] = '["/d", "/e"]'
    r = stable(rel, ctx)
    assert [p.path for p in r.paths_read] == ["/a", "/b", "/c", "/d", "/e"]
    assert {p.format for p in r.paths_read} == {"parquet"} and r.data_sources == ("parquet",)


def test_data_source_loading_a_protected_table_by_name_refused(ctx):
    rel = Relation()
    rel.read.data_source.format = "iceberg"
    rel.read.data_source.paths.append("default.orders")
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert "spark_catalog.default.orders" in e.value.message


def tvf(name: str, *args) -> Relation:
    rel = Relation()
    call = rel.unresolved_table_valued_function
    call.function_name = name
    for arg in args:
        expr = call.arguments.add()
        if isinstance(arg, str):
            expr.literal.string = arg
        elif isinstance(arg, int):
            expr.literal.integer = arg
        else:
            expr.CopyFrom(arg)
    return rel


def test_builtin_table_functions_pass(ctx):
    r = stable(tvf("range", 10), ctx)
    assert not r.changed and r.table_functions == ()


def test_table_changes_over_protected_table_refused(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(tvf("table_changes", "orders", 0), ctx)
    assert "table_changes" in e.value.message


def test_table_function_over_unprotected_table_reported(ctx):
    r = stable(tvf("table_changes", "lineitem", 0), ctx)
    assert r.table_functions == ("table_changes",)


def test_table_function_with_computed_argument_refused(ctx):
    from pyspark.sql.connect.proto import expressions_pb2

    arg = expressions_pb2.Expression()
    arg.unresolved_function.function_name = "concat"
    arg.unresolved_function.arguments.add().literal.string = "ord"
    arg.unresolved_function.arguments.add().literal.string = "ers"
    with pytest.raises(Refusal):
        rewrite_plan(tvf("table_changes", arg, 0), ctx)


def test_nothing_protected_means_pass_through(ctx):
    ctx.policies.clear()
    rel = table("orders", versionAsOf="1")
    r = rewrite_plan(rel, ctx)
    assert not r.changed and not r.filtered and r.tables_read == {tn("orders")}


def test_temp_views_go_out_qualified_and_never_as_a_table(ctx):
    """Issue 21 item 2: `system.session.<view>` names the temp view or nothing."""
    ctx.temp("tv")
    for written in ("tv", "system.session.tv", "session.tv"):
        rel = table(written)
        r = stable(rel, ctx)
        assert rel.read.named_table.unparsed_identifier == "`system`.`session`.`tv`", written
        assert r.temp_views_read == {"tv"} and not r.tables_read, written
    rel = table("sink")  # nothing rowgate knows: a temp view Spark made itself, or nothing
    r = stable(rel, ctx)
    assert rel.read.named_table.unparsed_identifier == "`system`.`session`.`sink`"
    assert r.unknown_relations == {"sink"}


def test_a_server_without_the_temp_view_namespace_keeps_one_part_names(ctx):
    ctx.qualify_temp_views = False
    ctx.temp("tv")
    for written in ("tv", "sink"):
        rel = table(written)
        r = stable(rel, ctx)
        assert rel.read.named_table.unparsed_identifier == written and not r.unknown_relations
