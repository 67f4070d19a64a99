"""Refuses messages nested deeper than Spark accepts, before anything decodes them recursively.

Decoding a protobuf message is recursive in upb and in every walker that follows a plan, so
one request nesting 10,000 relations (about 100 KB) overflowed the C stack of the event loop
and took the proxy down for every caller. Spark's own server refuses messages nested deeper
than `spark.connect.grpc.marshallerRecursionLimit` (1024) levels; the proxy applies the same
limit, counted the same way (every sub-message or group is one level, the top-level message
is level 0), on the raw bytes and without recursion, so a refused request never reaches a
recursive decoder.

The scan follows the request type's descriptors: a length-delimited field is entered only
when the descriptor says it holds a message, so a string or bytes value that happens to look
like protobuf is never mistaken for one, and unknown fields are skipped as upb keeps them (as
opaque bytes, not decoded).

>>> from pyspark.sql.connect.proto import relations_pb2
>>> relation = relations_pb2.Relation(limit=relations_pb2.Limit(input=relations_pb2.Relation(
...     range=relations_pb2.Range(end=5, step=1)), limit=1))
>>> nesting_depth(relation.SerializeToString(), relations_pb2.Relation.DESCRIPTOR)
3
>>> sql = relations_pb2.Relation(sql=relations_pb2.SQL(query="\\x1a\\x02\\x1a\\x00"))
>>> nesting_depth(sql.SerializeToString(), relations_pb2.Relation.DESCRIPTOR)
1
>>> nesting_depth(relation.SerializeToString(), relations_pb2.Relation.DESCRIPTOR, limit=2)
Traceback (most recent call last):
...
rowgate.rewrite.plan.nesting.NestedTooDeep: plan nested deeper than 2 levels, Spark's own spark.connect.grpc.marshallerRecursionLimit
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

# Spark Connect's default for spark.connect.grpc.marshallerRecursionLimit (and the limit its
# PlanCompressionUtils applies to a decompressed plan, counted from the plan's own top).
SPARK_RECURSION_LIMIT = 1024

_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = range(6)


class NestedTooDeep(ValueError):
    """The message nests more levels than the limit; nothing recursive has touched it."""

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"plan nested deeper than {limit} levels, Spark's own spark.connect.grpc.marshallerRecursionLimit")


class _Fields(dict):
    """Field number -> (`_Fields` of the sub-message, is_group) for the message-typed fields
    of one message type; other field numbers are absent (scalars, strings, bytes, unknown)."""


_tables: dict[str, _Fields] = {}
_UNKNOWN = _Fields()  # inside a group no descriptor names: every field is opaque


def _fields_of(descriptor: Descriptor) -> _Fields:
    table = _tables.get(descriptor.full_name)
    if table is None:
        # Registered before it is filled, so recursive message types (Relation inside
        # Relation) refer to the same table instead of building it for ever.
        table = _tables[descriptor.full_name] = _Fields()
        for field in descriptor.fields:
            if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
                table[field.number] = (_fields_of(field.message_type), field.type == FieldDescriptor.TYPE_GROUP)
    return table


def could_exceed(data: bytes, limit: int = SPARK_RECURSION_LIMIT) -> bool:
    """Whether `data` is long enough to nest deeper than `limit` at all: every level costs at
    least two bytes (a tag and a length, or a start and an end group tag).

    >>> could_exceed(b"x" * 2048), could_exceed(b"x" * 2050)
    (False, True)
    """
    return len(data) > 2 * limit


def check_nesting(data: bytes, descriptor: Descriptor, limit: int = SPARK_RECURSION_LIMIT) -> None:
    """Raises NestedTooDeep (or DecodeError for bytes that are not protobuf) when `data`, read
    as a `descriptor` message, nests deeper than `limit`.

    Only what could be too deep is read: a sub-message too short to hold the levels left
    below the limit is skipped whole, so a large but flat request (a long IN list, a wide
    projection) costs one step per field of its large messages, and a short one nothing.
    """
    if could_exceed(data, limit):
        try:
            _scan(data, _fields_of(descriptor), limit, prune=True)
        except IndexError:
            raise DecodeError("truncated message") from None


def nesting_depth(data: bytes, descriptor: Descriptor, limit: int = SPARK_RECURSION_LIMIT) -> int:
    """The deepest level of sub-message in `data` read as a `descriptor` message (0 when it
    has none), found with a loop and an explicit stack; NestedTooDeep as soon as a level
    passes `limit`, DecodeError when the bytes are not well-formed protobuf."""
    try:
        return _scan(data, _fields_of(descriptor), limit, prune=False)
    except IndexError:
        raise DecodeError("truncated message") from None


def _scan(data: bytes, fields: _Fields, limit: int, prune: bool) -> int:
    pos, end = 0, len(data)
    group = 0  # the field number of the group being read, 0 inside a length-delimited message
    depth = deepest = 0
    stack: list[tuple[int, _Fields, int]] = []
    while True:
        if pos >= end:
            if pos > end:
                raise DecodeError("a field runs past the end of its message")
            if group:
                raise DecodeError("a group is not closed")
            if not stack:
                return deepest
            end, fields, group = stack.pop()
            depth -= 1
            continue
        tag = data[pos]
        if tag < 0x80:  # the common one-byte case inline: this loop is the hot path
            pos += 1
        else:
            tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise DecodeError("field number 0")
        if wire_type == _LEN:
            length = data[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(data, pos)
            sub = fields.get(number)
            if sub is not None and not sub[1] and not (prune and depth + 1 + (length >> 1) <= limit):
                depth += 1
                if depth > limit:
                    raise NestedTooDeep(limit)
                deepest = max(deepest, depth)
                stack.append((end, fields, group))
                end, fields, group = pos + length, sub[0], 0
                if end > stack[-1][0]:
                    raise DecodeError("a message runs past the end of its parent")
            else:
                pos += length
        elif wire_type == _VARINT:
            _, pos = _varint(data, pos)
        elif wire_type == _START_GROUP:
            # upb decodes groups, known or not, by recursion too: they count as a level.
            sub = fields.get(number)
            depth += 1
            if depth > limit:
                raise NestedTooDeep(limit)
            deepest = max(deepest, depth)
            stack.append((end, fields, group))
            fields, group = (sub[0] if sub is not None and sub[1] else _UNKNOWN), number
        elif wire_type == _END_GROUP:
            if number != group:
                raise DecodeError("an end-group tag without its start")
            end, fields, group = stack.pop()
            depth -= 1
        elif wire_type == _FIXED64:
            pos += 8
        elif wire_type == _FIXED32:
            pos += 4
        else:
            raise DecodeError(f"invalid wire type {wire_type}")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    for i in range(pos + 1, pos + 10):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise DecodeError("a varint longer than 10 bytes")
