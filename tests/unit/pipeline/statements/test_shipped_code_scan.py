"""The scan for reflection and TRANSFORM scripts in a DataFrame plan's expressions."""

from __future__ import annotations

import sys

from pyspark.sql.connect.proto import expressions_pb2, relations_pb2

from rowgate.pipeline.statements.shipped_code import code_in_expressions


def _filtered(condition: expressions_pb2.Expression, levels: int) -> relations_pb2.Relation:
    """`levels` filters over a range, built in place (a copy would go through protobuf's
    parser, which caps nesting far below what the deep test needs)."""
    plan = relations_pb2.Relation()
    node = plan
    for _ in range(levels):
        node.filter.condition.CopyFrom(condition)
        node = node.filter.input
    node.range.end = 1
    return plan


def _text(sql: str) -> expressions_pb2.Expression:
    return expressions_pb2.Expression(expression_string=expressions_pb2.Expression.ExpressionString(expression=sql))


def test_reflection_in_an_expression_string_and_a_function_call_is_found():
    call = expressions_pb2.Expression(unresolved_function=expressions_pb2.Expression.UnresolvedFunction(function_name="reflect"))
    assert code_in_expressions(_filtered(_text("java_method('a', 'b') IS NULL"), 1)) == {"reflect"}
    assert code_in_expressions(_filtered(call, 1)) == {"reflect"}


def test_a_transform_script_is_found_and_the_higher_order_function_is_not():
    assert code_in_expressions(_filtered(_text("EXISTS (SELECT TRANSFORM(a) USING 'cat' FROM t)"), 1)) == {"transform"}
    assert code_in_expressions(_filtered(_text("size(transform(array(1), x -> x + 1)) > 0"), 1)) == set()


def test_a_plan_nested_deeper_than_pythons_recursion_limit_is_scanned_to_the_bottom():
    """Requests may nest up to Spark's 1024 levels; the scan must not recurse, or a deep plan
    would end as a RecursionError (INTERNAL) instead of a verdict."""
    plain = expressions_pb2.Expression(literal=expressions_pb2.Expression.Literal(boolean=True))
    plan = _filtered(plain, sys.getrecursionlimit() + 10)
    node = plan
    while node.HasField("filter"):
        node = node.filter.input
    node.Clear()
    node.filter.condition.CopyFrom(_text("reflect('x')"))  # at the bottom
    node.filter.input.range.end = 1
    assert code_in_expressions(plan) == {"reflect"}
