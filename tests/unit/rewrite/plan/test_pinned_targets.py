"""Names pinned (issue #12): DataFrame write targets and Catalog API table names are forwarded
fully qualified while protection is in force, so a concurrent `USE` cannot retarget them."""

import grpc
import pytest
from pyspark.sql.connect.proto import commands_pb2

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import rewrite_plan
from rowgate.rewrite.sql.result import PathRead
from tests.unit.rewrite.fakes import tn
from tests.unit.rewrite.plan.build import Command, table
from tests.unit.rewrite.plan.test_commands import catalog, write_table

LINEITEM = "`spark_catalog`.`default`.`lineitem`"
CUSTOMERS = "`spark_catalog`.`default`.`customers`"  # a read already pinned: no change of its own
SaveTable = commands_pb2.WriteOperation.SaveTable
V2 = commands_pb2.WriteOperationV2


@pytest.mark.parametrize("method", [SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE, SaveTable.TABLE_SAVE_METHOD_INSERT_INTO])
@pytest.mark.parametrize("name", ["lineitem", "default.lineitem", "new_table"])
def test_write_operation_target_pinned(ctx, method, name):
    cmd = write_table(table(CUSTOMERS), name, method)
    result = rewrite_plan(cmd, ctx)
    assert cmd.write_operation.table.table_name == f"`spark_catalog`.`default`.`{name.split('.')[-1]}`"
    assert result.changed
    again = rewrite_plan(cmd, ctx)
    assert not again.changed


def test_insert_into_a_temp_view_stays_a_temp_view(ctx):
    ctx.temp("staging")
    cmd = write_table(table(CUSTOMERS), "staging", SaveTable.TABLE_SAVE_METHOD_INSERT_INTO)
    assert not rewrite_plan(cmd, ctx).changed
    assert cmd.write_operation.table.table_name == "staging"


def test_save_as_table_ignores_temp_views_so_it_is_pinned(ctx):
    ctx.temp("staging")
    cmd = write_table(table(CUSTOMERS), "staging", SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE)
    rewrite_plan(cmd, ctx)
    assert cmd.write_operation.table.table_name == "`spark_catalog`.`default`.`staging`"


@pytest.mark.parametrize(
    ("mode", "pinned"),
    [
        (V2.MODE_APPEND, False),
        (V2.MODE_OVERWRITE, False),
        (V2.MODE_OVERWRITE_PARTITIONS, False),
        (V2.MODE_CREATE, True),
        (V2.MODE_REPLACE, True),
        (V2.MODE_CREATE_OR_REPLACE, True),
    ],
)
def test_write_to_targets_pinned_and_temp_views_only_where_spark_looks_them_up(ctx, mode, pinned):
    cmd = Command()
    cmd.write_operation_v2.input.CopyFrom(table(CUSTOMERS))
    cmd.write_operation_v2.table_name = "lineitem"
    cmd.write_operation_v2.mode = mode
    rewrite_plan(cmd, ctx)
    assert cmd.write_operation_v2.table_name == LINEITEM
    ctx.temp("staging")
    cmd.write_operation_v2.table_name = "staging"
    rewrite_plan(cmd, ctx)
    expected = "`spark_catalog`.`default`.`staging`" if pinned else "staging"
    assert cmd.write_operation_v2.table_name == expected


def test_merge_and_stream_targets_pinned(ctx):
    merge = Command()
    merge.merge_into_table_command.target_table_name = "lineitem"
    merge.merge_into_table_command.source_table_plan.CopyFrom(table(CUSTOMERS))
    merge.merge_into_table_command.merge_condition.expression_string.expression = "true"
    rewrite_plan(merge, ctx)
    assert merge.merge_into_table_command.target_table_name == LINEITEM
    stream = Command()
    stream.write_stream_operation_start.input.CopyFrom(table(CUSTOMERS, streaming=True))
    stream.write_stream_operation_start.table_name = "lineitem"
    rewrite_plan(stream, ctx)
    assert stream.write_stream_operation_start.table_name == LINEITEM


def test_nothing_pinned_while_no_table_is_protected(ctx):
    ctx.policies.clear()
    cmd = write_table(table(CUSTOMERS), "lineitem", SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE)
    assert not rewrite_plan(cmd, ctx).changed
    assert cmd.write_operation.table.table_name == "lineitem"
    rel = catalog("cache_table", table_name="lineitem")
    rewrite_plan(rel, ctx)
    assert rel.catalog.cache_table.table_name == "lineitem"


@pytest.mark.parametrize(
    "op",
    [
        "list_columns",
        "get_table",
        "table_exists",
        "is_cached",
        "cache_table",
        "uncache_table",
        "refresh_table",
        "recover_partitions",
        "create_table",
        "create_external_table",
    ],
)
def test_catalog_table_names_pinned(ctx, op):
    rel = catalog(op, table_name="lineitem")
    result = rewrite_plan(rel, ctx)
    assert getattr(rel.catalog, op).table_name == LINEITEM and result.changed
    assert not rewrite_plan(rel, ctx).changed
    rel = catalog(op, table_name="sales.orders")
    rewrite_plan(rel, ctx)
    assert getattr(rel.catalog, op).table_name == "`spark_catalog`.`sales`.`orders`"


def test_catalog_names_spark_does_not_resolve_in_the_session_stay(ctx):
    with_db = catalog("get_table", table_name="orders", db_name="sales")
    assert not rewrite_plan(with_db, ctx).changed  # Spark reads spark_catalog.sales.orders
    ctx.temp("staging")
    for op in ("get_table", "cache_table", "list_columns"):
        rel = catalog(op, table_name="staging")
        assert not rewrite_plan(rel, ctx).changed
    unknown = catalog("is_cached", table_name="memory_sink_query")  # maybe a temp view Spark made
    assert not rewrite_plan(unknown, ctx).changed
    created = catalog("create_table", table_name="staging")  # creates a catalog table
    rewrite_plan(created, ctx)
    assert created.catalog.create_table.table_name == "`spark_catalog`.`default`.`staging`"
    drop = catalog("drop_temp_view", view_name="staging")
    assert not rewrite_plan(drop, ctx).changed


def test_catalog_cache_of_a_file_path_name_is_a_path_read(ctx):
    rel = catalog("cache_table", table_name="parquet.`/data/orders`")
    result = rewrite_plan(rel, ctx)
    assert result.paths_read == (PathRead("parquet", "/data/orders", certain=False),)
    assert rel.catalog.cache_table.table_name == "parquet.`/data/orders`"


def test_recover_partitions_of_a_protected_table_needs_full_access(ctx):
    with pytest.raises(Refusal) as e:
        rewrite_plan(catalog("recover_partitions", table_name="orders"), ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "spark_catalog.default.orders" in e.value.message
    ctx.protect("orders", "all_rows", ("user:alice@example.com",), "TRUE")
    rel = catalog("recover_partitions", table_name="orders")
    assert rewrite_plan(rel, ctx).tables_written == {tn("orders")}
    assert rel.catalog.recover_partitions.table_name == "`spark_catalog`.`default`.`orders`"
