"""Deeply nested Spark Connect requests, written as protobuf wire bytes without recursion.

A test that built a 10,000-level plan with the protobuf classes would overflow its own stack
(or hit upb's limits) before the proxy saw a byte; these builders write the bytes directly,
outermost header first, in time and memory linear in the depth.
"""

from __future__ import annotations

import uuid

import zstandard
from pyspark.sql.connect.proto import base_pb2, expressions_pb2, relations_pb2

_RELATION = relations_pb2.Relation.DESCRIPTOR.fields_by_name
_EXPRESSION = expressions_pb2.Expression.DESCRIPTOR.fields_by_name


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def nest(leaf: bytes, times: int, outer: int, inner: int, before: bytes = b"", after: bytes = b"") -> bytes:
    """`times` x {outer: {before, inner: <...>, after}} around `leaf`: two levels a wrap.

    Only the headers depend on the size of what they wrap; they are computed innermost
    first, then written outermost first.
    """
    headers, size = [], len(leaf)
    for _ in range(times):
        body = len(before) + len(varint(inner << 3 | 2)) + len(varint(size)) + size + len(after)
        headers.append(varint(outer << 3 | 2) + varint(body) + before + varint(inner << 3 | 2) + varint(size))
        size = len(varint(outer << 3 | 2)) + len(varint(body)) + body
    return b"".join(reversed(headers)) + leaf + after * times


def unknown_groups(levels: int, number: int = 999) -> bytes:
    """`levels` nested groups of an unknown field: valid in any message type, and decoded
    by upb with one level of recursion each."""
    return varint(number << 3 | 3) * levels + varint(number << 3 | 4) * levels


def range_relation(end: int = 3) -> bytes:
    return relations_pb2.Relation(range=relations_pb2.Range(start=0, end=end, step=1)).SerializeToString()


def aliased_relations(times: int, leaf: bytes | None = None) -> bytes:
    """A Relation: `times` SubqueryAlias around a range (2 levels each)."""
    alias = relations_pb2.SubqueryAlias.DESCRIPTOR.fields_by_name
    return nest(
        leaf if leaf is not None else range_relation(),
        times,
        _RELATION["subquery_alias"].number,
        alias["input"].number,
        after=field(alias["alias"].number, b"a"),
    )


def coalesce_chain(times: int, *, array_leaf: bool) -> bytes:
    """An Expression: coalesce(coalesce(...(x))) `times` deep (2 levels each) around either
    the integer 1 (1 level below its Expression) or an empty array of int (4 levels below),
    so chains of either parity of depth can be built."""
    Literal = expressions_pb2.Expression.Literal
    if array_leaf:
        from pyspark.sql.connect.proto import types_pb2

        literal = Literal(array=Literal.Array(element_type=types_pb2.DataType(integer=types_pb2.DataType.Integer())))
    else:
        literal = Literal(integer=1)
    leaf = expressions_pb2.Expression(literal=literal).SerializeToString()
    function = expressions_pb2.Expression.UnresolvedFunction.DESCRIPTOR.fields_by_name
    return nest(
        leaf,
        times,
        _EXPRESSION["unresolved_function"].number,
        function["arguments"].number,
        before=field(function["function_name"].number, b"coalesce"),
    )


def project(expression: bytes) -> bytes:
    """A Relation: SELECT <expression> FROM range(3)."""
    fields = relations_pb2.Project.DESCRIPTOR.fields_by_name
    body = field(fields["input"].number, range_relation()) + field(fields["expressions"].number, expression)
    return field(_RELATION["project"].number, body)


def execute_request(relation: bytes | None = None, *, compressed: bytes | None = None, session_id: str | None = None) -> bytes:
    """ExecutePlanRequest bytes around a Relation given as bytes (or a zstd-compressed one)."""
    head = base_pb2.ExecutePlanRequest(
        session_id=session_id or str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
    ).SerializeToString()
    plan_fields = base_pb2.Plan.DESCRIPTOR.fields_by_name
    if compressed is not None:
        op = base_pb2.Plan.CompressedOperation(
            data=zstandard.ZstdCompressor().compress(compressed),
            op_type=base_pb2.Plan.CompressedOperation.OP_TYPE_RELATION,
            compression_codec=base_pb2.CompressionCodec.COMPRESSION_CODEC_ZSTD,
        )
        plan = field(plan_fields["compressed_operation"].number, op.SerializeToString())
    else:
        assert relation is not None
        plan = field(plan_fields["root"].number, relation)
    return head + field(base_pb2.ExecutePlanRequest.DESCRIPTOR.fields_by_name["plan"].number, plan)


def relation_at_depth(depth: int) -> bytes:
    """A Relation whose deepest sub-message is exactly `depth` levels below it (at least 7):
    SELECT coalesce(...) FROM range(3), which Spark plans and runs."""
    # relation > project (1) > expression (2) > chain > leaf literal
    base = depth - 2
    if base % 2:  # the integer leaf: its literal one level below its Expression
        return project(coalesce_chain((base - 1) // 2, array_leaf=False))
    return project(coalesce_chain((base - 4) // 2, array_leaf=True))


def request_at_depth(depth: int) -> bytes:
    """An ExecutePlanRequest whose deepest sub-message is exactly `depth` levels down."""
    return execute_request(relation_at_depth(depth - 2))  # request > plan (1) > root (2)
