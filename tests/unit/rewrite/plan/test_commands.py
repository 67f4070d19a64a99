"""Commands: writes, views, checkpoints, shipped code, catalog ops (bypass catalogue B11, B12, C17, E21)."""

import grpc
import pytest
from pyspark.sql.connect.proto import commands_pb2, relations_pb2

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import CatalogOp, TempView, UserCode, rewrite_plan
from rowgate.rewrite.sql.result import PathRead
from tests.unit.rewrite.fakes import tn
from tests.unit.rewrite.plan.build import Command, Relation, filtered_read, read_of, stable, table


def view(input_rel: Relation, name: str, *, is_global: bool = False, replace: bool = True) -> Command:
    cmd = Command()
    cmd.create_dataframe_view.input.CopyFrom(input_rel)
    cmd.create_dataframe_view.name = name
    cmd.create_dataframe_view.is_global = is_global
    cmd.create_dataframe_view.replace = replace
    return cmd


def test_temp_view_input_filtered_and_reported(ctx):
    cmd = view(table("orders", plan_id=1), "mine")
    r = stable(cmd, ctx)
    assert filtered_read(cmd.create_dataframe_view.input) is not None
    assert r.temp_views_created == (TempView("mine", False, True),) and r.filtered


def test_global_temp_view_over_protected_data_denied(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(view(table("orders"), "shared", is_global=True), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "shared" in e.value.message


def test_global_temp_view_over_expression_subquery_denied(ctx):
    rel = Relation()
    rel.filter.input.CopyFrom(table("lineitem"))
    rel.filter.condition.expression_string.expression = "order_id IN (SELECT id FROM orders)"
    with pytest.raises(Refusal):
        rewrite_plan(view(rel, "shared", is_global=True), ctx)


def test_global_temp_view_over_session_temp_view_denied(ctx):
    ctx.temp("mine")
    with pytest.raises(Refusal):
        rewrite_plan(view(table("mine"), "shared", is_global=True), ctx)


def test_global_temp_view_over_cached_relation_denied(ctx):
    rel = Relation()
    rel.cached_remote_relation.relation_id = "abc"
    with pytest.raises(Refusal):
        rewrite_plan(view(rel, "shared", is_global=True), ctx)


def test_global_temp_view_over_unprotected_data_allowed(ctx):
    r = stable(view(table("lineitem"), "shared", is_global=True), ctx)
    assert r.temp_views_created == (TempView("shared", True, True),)


def write_table(
    input_rel: Relation, name: str, method=commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_INSERT_INTO
) -> Command:
    cmd = Command()
    cmd.write_operation.input.CopyFrom(input_rel)
    cmd.write_operation.table.table_name = name
    cmd.write_operation.table.save_method = method
    cmd.write_operation.mode = commands_pb2.WriteOperation.SAVE_MODE_APPEND
    return cmd


@pytest.mark.parametrize("name", ["orders", "default.ORDERS", "`spark_catalog`.`default`.`orders`"])
def test_write_into_protected_table_needs_full_access(ctx, name):
    with pytest.raises(Refusal) as e:
        rewrite_plan(write_table(table("lineitem"), name), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "writing to spark_catalog.default.orders requires a FILTER USING (TRUE) grant" == e.value.message


def test_write_with_full_access_filters_the_read_side(ctx):
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    cmd = write_table(table("orders"), "orders")
    r = stable(cmd, ctx)
    assert r.tables_written == {tn("orders")} and r.filtered
    assert filtered_read(cmd.write_operation.input) is not None


def test_write_into_temp_view_name_checks_the_table_too(ctx):
    ctx.temp("orders")
    with pytest.raises(Refusal):
        rewrite_plan(write_table(table("lineitem"), "orders"), ctx)


def test_write_by_path_reported(ctx):
    cmd = Command()
    cmd.write_operation.input.CopyFrom(table("orders"))
    cmd.write_operation.path = "/tmp/out"
    cmd.write_operation.options["Path"] = "/tmp/other"
    r = stable(cmd, ctx)
    assert r.paths_written == ("/tmp/out", "/tmp/other") and r.filtered


def test_write_by_table_name_as_path_is_a_table_write(ctx):
    cmd = Command()
    cmd.write_operation.input.CopyFrom(table("lineitem"))
    cmd.write_operation.source = "iceberg"
    cmd.write_operation.path = "default.orders"
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)


def test_write_v2_target_checked_and_condition_walked(ctx):
    cmd = Command()
    cmd.write_operation_v2.input.CopyFrom(table("lineitem"))
    cmd.write_operation_v2.table_name = "orders"
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)
    cmd.write_operation_v2.table_name = "lineitem"
    cmd.write_operation_v2.overwrite_condition.expression_string.expression = "order_id IN (SELECT id FROM orders)"
    r = stable(cmd, ctx)
    assert r.filtered and r.tables_written == {tn("lineitem")}


def test_write_stream_targets(ctx):
    cmd = Command()
    start = cmd.write_stream_operation_start
    start.input.CopyFrom(table("orders", streaming=True))
    start.table_name = "orders"
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)
    start.path = "/tmp/sink"
    r = stable(cmd, ctx)
    assert r.paths_written == ("/tmp/sink",) and r.filtered
    assert read_of(cmd.write_stream_operation_start.input).read.is_streaming


def test_foreach_batch_is_user_code(ctx):
    cmd = Command()
    start = cmd.write_stream_operation_start
    start.input.CopyFrom(table("lineitem", streaming=True))
    start.foreach_batch.python_function.command = b"pickled"
    r = stable(cmd, ctx)
    assert r.user_code == (UserCode("python_udf", "foreach_batch", "call"),)


def test_merge_target_written_and_source_read(ctx):
    cmd = Command()
    merge = cmd.merge_into_table_command
    merge.target_table_name = "lineitem"
    merge.source_table_plan.CopyFrom(table("orders"))
    merge.merge_condition.expression_string.expression = "true"
    r = stable(cmd, ctx)
    assert r.tables_written == {tn("lineitem")} and r.filtered
    merge.target_table_name = "orders"
    with pytest.raises(Refusal):
        rewrite_plan(cmd, ctx)


def test_checkpoint_and_cached_relations_reported(ctx):
    cmd = Command()
    cmd.checkpoint_command.relation.CopyFrom(table("orders"))
    cmd.checkpoint_command.local = True
    r = stable(cmd, ctx)
    assert r.checkpoints == ("local",) and r.filtered
    rel = Relation()
    rel.join.left.cached_remote_relation.relation_id = "r1"
    rel.join.right.cached_remote_relation.relation_id = "r2"
    assert stable(rel, ctx).cached_relations_used == ("r1", "r2")
    remove = Command()
    remove.remove_cached_remote_relation_command.relation.relation_id = "r3"
    assert stable(remove, ctx).cached_relations_used == ("r3",)


def test_registrations_are_user_code(ctx):
    udf = Command()
    udf.register_function.function_name = "f"
    udf.register_function.python_udf.command = b"x"
    java = Command()
    java.register_function.function_name = "j"
    java.register_function.java_udf.class_name = "com.example.F"
    udtf = Command()
    udtf.register_table_function.function_name = "t"
    udtf.register_table_function.python_udtf.command = b"x"
    source = Command()
    source.register_data_source.name = "mysource"
    source.register_data_source.python_data_source.command = b"x"
    found = [stable(c, ctx).user_code for c in (udf, java, udtf, source)]
    assert found == [
        (UserCode("python_udf", "f", "register"),),
        (UserCode("java_udf", "j", "register"),),
        (UserCode("python_udtf", "t", "register"),),
        (UserCode("python_data_source", "mysource", "register"),),
    ]


def test_udf_calls_anywhere_are_user_code(ctx):
    rel = Relation()
    rel.map_partitions.input.CopyFrom(table("orders"))
    rel.map_partitions.func.function_name = "f"
    rel.map_partitions.func.python_udf.command = b"x"
    project = Relation()
    project.project.input.CopyFrom(rel)
    call = project.project.expressions.add().common_inline_user_defined_function
    call.function_name = "g"
    call.scalar_scala_udf.payload = b"x"
    call.arguments.add().expression_string.expression = "(SELECT max(id) FROM orders)"
    udtf = Relation()
    udtf.common_inline_user_defined_table_function.function_name = "t"
    udtf.common_inline_user_defined_table_function.python_udtf.command = b"x"
    source = Relation()
    source.common_inline_user_defined_data_source.name = "ds"
    source.common_inline_user_defined_data_source.python_data_source.command = b"x"
    r = stable(project, ctx)
    assert r.user_code == (UserCode("python_udf", "f", "call"), UserCode("scalar_scala_udf", "g", "call"))
    assert r.filtered and "SELECT * FROM `spark_catalog`" in call.arguments[0].expression_string.expression
    assert stable(udtf, ctx).user_code == (UserCode("python_udtf", "t", "call"),)
    assert stable(source, ctx).user_code == (UserCode("python_data_source", "ds", "call"),)


def catalog(op: str, **fields) -> Relation:
    rel = Relation()
    body = getattr(rel.catalog, op)
    body.SetInParent()
    for key, value in fields.items():
        if isinstance(value, dict):
            for k, v in value.items():
                getattr(body, key)[k] = v
        else:
            setattr(body, key, value)
    return rel


def test_catalog_ops_reported(ctx):
    r = stable(catalog("set_current_database", db_name="sales"), ctx)
    assert r.catalog_ops == (CatalogOp("set_current_database", (("db_name", "sales"),)),)
    r = stable(catalog("create_external_table", table_name="t2", path="/warehouse/orders", source="parquet"), ctx)
    assert r.catalog_ops[0].get("path") == "/warehouse/orders" and r.locations == ("/warehouse/orders",)
    r = stable(catalog("create_table", table_name="t3", options={"path": "/x"}), ctx)
    assert r.locations == ("/x",)
    r = stable(catalog("list_columns", table_name="orders"), ctx)
    assert r.catalog_ops == (CatalogOp("list_columns", (("table_name", "orders"),)),)
    assert stable(catalog("clear_cache"), ctx).catalog_ops == (CatalogOp("clear_cache"),)


@pytest.mark.parametrize("kind", ["ml_command", "pipeline_command", "execute_external_command", "extension"])
def test_admin_only_commands(ctx, kind):
    cmd = Command()
    getattr(cmd, kind).SetInParent()
    if kind == "execute_external_command":
        cmd.execute_external_command.runner = "jdbc"
    with pytest.raises(Refusal) as e:
        rewrite_plan(cmd, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and kind in e.value.message
    ctx.is_admin = True
    if kind == "ml_command":  # walked for admins: its relations are filtered
        assert rewrite_plan(cmd, ctx).unchecked == (f"the {kind} command",)
    else:  # nothing in it can be analysed: refused for admins too
        with pytest.raises(Refusal) as e:
            rewrite_plan(cmd, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "admins included" in e.value.message
    ctx.is_admin = False
    ctx.policies.clear()
    assert rewrite_plan(cmd, ctx).unchecked == (f"the {kind} command",)


@pytest.mark.parametrize("admin", [False, True])
def test_ml_relation_admin_only_and_extension_relation_refused_for_everyone(ctx, admin):
    ctx.is_admin = admin
    ml = Relation()
    ml.ml_relation.transform.input.CopyFrom(table("orders"))
    if admin:
        assert rewrite_plan(ml, ctx).filtered and filtered_read(ml.ml_relation.transform.input) is not None
    else:
        with pytest.raises(Refusal):
            rewrite_plan(ml, ctx)
    for holder, field in ((Relation(), "extension"), (Relation(), None)):
        if field is None:
            holder.project.input.CopyFrom(table("lineitem"))
            holder.project.expressions.add().extension.SetInParent()
        else:
            getattr(holder, field).SetInParent()
        with pytest.raises(Refusal) as e:
            rewrite_plan(holder, ctx)
        assert "extension" in e.value.message and ("admins included" in e.value.message or not admin)


def test_admin_ml_command_reads_are_still_filtered(ctx):
    ctx.is_admin = True
    cmd = Command()
    cmd.ml_command.fit.dataset.CopyFrom(table("orders"))
    r = rewrite_plan(cmd, ctx)
    assert r.filtered and filtered_read(cmd.ml_command.fit.dataset) is not None


def test_streaming_and_resource_commands_pass(ctx):
    cmd = Command()
    cmd.streaming_query_command.query_id.id = "q"
    cmd.streaming_query_command.stop = True
    assert not stable(cmd, ctx).changed


def test_data_source_paths_inside_commands(ctx):
    rel = relations_pb2.Relation()
    rel.read.data_source.format = "csv"
    rel.read.data_source.paths.append("/data/x.csv")
    cmd = view(rel, "x")
    assert stable(cmd, ctx).paths_read == (PathRead("csv", "/data/x.csv"),)
