"""The nesting check counts levels as upb and Spark do, without recursion, and only where the
descriptor says a message is."""

from __future__ import annotations

import doctest
import sys

import pytest
from google.protobuf.message import DecodeError
from pyspark.sql.connect.proto import base_pb2, expressions_pb2, relations_pb2

from rowgate.rewrite.plan import nesting
from rowgate.rewrite.plan.nesting import SPARK_RECURSION_LIMIT, NestedTooDeep, check_nesting, could_exceed, nesting_depth
from tests.deep_plans import aliased_relations, execute_request, field, request_at_depth, varint

REQUEST = base_pb2.ExecutePlanRequest.DESCRIPTOR
RELATION = relations_pb2.Relation.DESCRIPTOR


def reference_depth(message) -> int:
    """Levels counted by following the decoded message (fine for shallow test messages); a
    map entry is a message on the wire, so it is a level of its own."""
    deepest = 0
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            for item in value.values():
                deepest = max(deepest, 1 + (1 + reference_depth(item) if hasattr(item, "ListFields") else 0))
            continue
        for item in value if hasattr(value, "__len__") and not hasattr(value, "ListFields") else [value]:
            deepest = max(deepest, 1 + reference_depth(item))
    return deepest


def test_docstring_examples():
    failures, tried = doctest.testmod(nesting, optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
    assert failures == 0 and tried > 0


@pytest.mark.parametrize(
    "message",
    [
        base_pb2.ExecutePlanRequest(session_id="s"),
        base_pb2.ExecutePlanRequest(plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query="SELECT 1")))),
        relations_pb2.Relation(
            sql=relations_pb2.SQL(
                query="SELECT :a",
                named_arguments={"a": expressions_pb2.Expression(literal=expressions_pb2.Expression.Literal(integer=1))},
            )
        ),
        relations_pb2.Relation(
            project=relations_pb2.Project(
                input=relations_pb2.Relation(range=relations_pb2.Range(end=3, step=1)),
                expressions=[
                    expressions_pb2.Expression(
                        alias=expressions_pb2.Expression.Alias(
                            expr=expressions_pb2.Expression(literal=expressions_pb2.Expression.Literal(double=1.5)),
                            name=["x"],
                        )
                    )
                ],
            )
        ),
    ],
)
def test_counts_levels_like_the_decoded_message(message):
    assert nesting_depth(message.SerializeToString(), message.DESCRIPTOR) == reference_depth(message)


@pytest.mark.parametrize("depth", [9, 10, 11, 12, 100, 1023, 1024, 1025])
def test_the_test_builder_reaches_exactly_the_depth_asked(depth):
    assert nesting_depth(request_at_depth(depth), REQUEST, limit=10**6) == depth


def test_spark_s_limit_is_the_boundary():
    """Spark's marshaller accepts 1024 levels below the request and refuses 1025 (checked
    against the real server in tests/integration/test_one_request_cannot_hurt_others.py)."""
    assert SPARK_RECURSION_LIMIT == 1024
    check_nesting(request_at_depth(1024), REQUEST)
    with pytest.raises(NestedTooDeep, match=r"nested deeper than 1024 levels.*marshallerRecursionLimit"):
        check_nesting(request_at_depth(1025), REQUEST)


def test_ten_thousand_levels_are_refused_without_recursion():
    data = execute_request(aliased_relations(10_000))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # a recursive scanner would fail here, not refuse
    try:
        with pytest.raises(NestedTooDeep):
            check_nesting(data, REQUEST)
        with pytest.raises(NestedTooDeep):
            nesting_depth(data, REQUEST)
    finally:
        sys.setrecursionlimit(limit)


def test_strings_and_bytes_that_look_like_messages_are_not_entered():
    deep = aliased_relations(5_000)
    as_text = relations_pb2.Relation(sql=relations_pb2.SQL(query=deep.decode("latin-1")))
    as_bytes = relations_pb2.Relation(local_relation=relations_pb2.LocalRelation(data=deep))
    as_extension = relations_pb2.Relation()
    as_extension.extension.type_url = "type.googleapis.com/spark.connect.Relation"
    as_extension.extension.value = deep
    for message in (as_text, as_bytes, as_extension):
        data = message.SerializeToString()
        check_nesting(data, RELATION)
        assert nesting_depth(data, RELATION) == reference_depth(message) <= 2


def test_unknown_fields_are_opaque_but_unknown_groups_count():
    deep = aliased_relations(5_000)
    unknown_bytes = range_bytes = relations_pb2.Relation(range=relations_pb2.Range(end=1, step=1)).SerializeToString()
    unknown_bytes += field(9999, deep)  # upb keeps it as unknown bytes and never decodes it
    assert nesting_depth(unknown_bytes, RELATION) == 1
    groups = range_bytes + varint(9999 << 3 | 3) * 2000 + varint(9999 << 3 | 4) * 2000
    with pytest.raises(NestedTooDeep):
        check_nesting(groups, RELATION)
    shallow_groups = range_bytes + varint(9999 << 3 | 3) * 5 + varint(9999 << 3 | 4) * 5
    assert nesting_depth(shallow_groups, RELATION) == 5


def test_a_deep_branch_behind_a_long_flat_one_is_found():
    """The pruning skips short sub-messages only; a deep one after thousands of flat
    arguments is still seen."""
    flat = expressions_pb2.Expression(
        unresolved_function=expressions_pb2.Expression.UnresolvedFunction(
            function_name="in",
            arguments=[expressions_pb2.Expression(literal=expressions_pb2.Expression.Literal(integer=i)) for i in range(5000)],
        )
    ).SerializeToString()
    deep = execute_request(aliased_relations(600))
    flat_request = execute_request(
        field(
            relations_pb2.Relation.DESCRIPTOR.fields_by_name["project"].number, field(3, flat) + field(1, aliased_relations(600))
        )
    )
    check_nesting(execute_request(field(3, field(3, flat))), REQUEST)
    with pytest.raises(NestedTooDeep):
        check_nesting(deep, REQUEST)
    with pytest.raises(NestedTooDeep):
        check_nesting(flat_request, REQUEST)


def test_short_messages_cannot_be_too_deep():
    """Every level costs two bytes at least, so the cheap length test is a sound shortcut."""
    for depth in (9, 100, 1024, 1025, 3000):
        data = request_at_depth(depth)
        assert nesting_depth(data, REQUEST, limit=10**6) <= len(data) // 2
    minimal = varint(9999 << 3 | 3) * 1025 + varint(9999 << 3 | 4) * 1025
    assert len(minimal) > 2 * SPARK_RECURSION_LIMIT and could_exceed(minimal)


@pytest.mark.parametrize(
    "data, problem",
    [
        (field(3, b"\x0a\x05ab"), "runs past"),  # plan > root says 5 bytes, has 2
        (b"\x1a", "truncated"),  # a tag with no length
        (b"\x0f", "wire type"),  # wire type 7
        (b"\x00\x01", "field number 0"),
        (varint(9999 << 3 | 4), "end-group"),
        (varint(9999 << 3 | 3), "not closed"),
        (b"\x08" + b"\xff" * 11, "varint"),
    ],
)
def test_malformed_bytes_are_decode_errors(data, problem):
    with pytest.raises(DecodeError, match=problem):
        nesting_depth(data, REQUEST)
