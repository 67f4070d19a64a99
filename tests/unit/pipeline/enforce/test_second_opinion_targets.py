"""What the second opinion refuses without asking Spark (proxy/rowgate/pipeline/enforce/second_opinion.py):
what Spark would run while it plans, and command expressions it would evaluate unanalysed."""

from __future__ import annotations

import pytest
from pyspark.sql.connect.proto import base_pb2, catalog_pb2, commands_pb2, expressions_pb2, relations_pb2

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.second_opinion import (
    _refuse_run_while_planning,
    _refuse_unanalysed_expressions,
    analysis_targets,
)


def _catalog(op: str, **fields) -> relations_pb2.Relation:
    rel = relations_pb2.Relation()
    rel.common.plan_id = 1
    getattr(rel.catalog, op).SetInParent()
    for k, v in fields.items():
        setattr(getattr(rel.catalog, op), k, v)
    return rel


def _cross(left: relations_pb2.Relation, right: relations_pb2.Relation) -> relations_pb2.Relation:
    rel = relations_pb2.Relation()
    rel.join.left.CopyFrom(left)
    rel.join.right.CopyFrom(right)
    rel.join.join_type = relations_pb2.Join.JoinType.JOIN_TYPE_CROSS
    return rel


def _table(name: str) -> relations_pb2.Relation:
    rel = relations_pb2.Relation()
    rel.read.named_table.unparsed_identifier = name
    return rel


def test_a_state_changing_catalog_call_alone_is_not_analysed():
    plan = base_pb2.Plan(root=_catalog("set_current_database", db_name="d"))
    assert _refuse_run_while_planning(plan, alone_ok=True) is True


@pytest.mark.parametrize("op", ["set_current_database", "create_table", "cache_table", "drop_temp_view", "clear_cache"])
def test_a_state_changing_catalog_call_inside_another_plan_is_refused(op):
    plan = base_pb2.Plan(root=_cross(_catalog(op), _table("t")))
    with pytest.raises(Refusal) as info:
        _refuse_run_while_planning(plan, alone_ok=True)
    assert op in info.value.message


def test_a_state_changing_catalog_call_in_an_analysis_is_refused_even_alone():
    request = base_pb2.AnalyzePlanRequest()
    request.schema.plan.root.CopyFrom(_catalog("set_current_catalog", catalog_name="c"))
    with pytest.raises(Refusal):
        _refuse_run_while_planning(request, alone_ok=False)
    persist = base_pb2.AnalyzePlanRequest()
    persist.persist.relation.CopyFrom(_cross(_catalog("refresh_table"), _table("t")))
    with pytest.raises(Refusal):
        _refuse_run_while_planning(persist, alone_ok=False)


def test_read_only_catalog_calls_are_analysed_with_the_plan():
    plan = base_pb2.Plan(root=_cross(_catalog("current_database"), _table("t")))
    assert _refuse_run_while_planning(plan, alone_ok=True) is False
    assert analysis_targets(plan) == [plan.root]


def test_a_script_is_refused_in_an_analysis_too():
    request = base_pb2.AnalyzePlanRequest()
    request.schema.plan.root.sql.query = "BEGIN SELECT 1; END"
    with pytest.raises(Refusal):
        _refuse_run_while_planning(request, alone_ok=False)


def _merge(condition: str) -> commands_pb2.Command:
    command = commands_pb2.Command()
    merge = command.merge_into_table_command
    merge.target_table_name = "t"
    merge.source_table_plan.CopyFrom(_table("s"))
    merge.merge_condition.expression_string.expression = condition
    return command


@pytest.mark.parametrize(
    "condition",
    [
        "t.id = s.id AND s.id IN (SELECT id FROM prot)",
        "EXISTS (TABLE prot)",
        "s.id IN (FROM prot SELECT id)",
    ],
)
def test_a_subquery_in_a_command_condition_is_refused(condition):
    with pytest.raises(Refusal):
        _refuse_unanalysed_expressions(_merge(condition))


def test_a_plain_command_condition_passes_and_source_relations_are_targets():
    command = _merge("t.id = s.id AND s.from_date > t.table_id")
    _refuse_unanalysed_expressions(command)
    plan = base_pb2.Plan(command=command)
    assert [t.read.named_table.unparsed_identifier for t in analysis_targets(plan)] == ["s"]


def test_a_subquery_expression_outside_relations_is_refused():
    command = commands_pb2.Command()
    write = command.write_operation_v2
    write.table_name = "t"
    write.input.CopyFrom(_table("s"))
    write.overwrite_condition.subquery_expression.plan_id = 3
    with pytest.raises(Refusal):
        _refuse_unanalysed_expressions(command)
    assert isinstance(write.overwrite_condition, expressions_pb2.Expression)
    assert isinstance(catalog_pb2.Catalog(), catalog_pb2.Catalog)
