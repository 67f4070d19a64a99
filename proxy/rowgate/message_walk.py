"""Every set field of every protobuf message reachable from some roots, without recursion.

Several questions about a request are walks over all of it by descriptor (which relation ids
it names, whether it mentions a session's temp views, which fields newer than a server it
sets). They share this one walk. It keeps its own stack instead of recursing, because a
request may nest as deep as Spark's own limit (1024 levels) and Python's stack would not
take that; callers stop early simply by leaving the loop.

>>> from google.protobuf import struct_pb2
>>> root = struct_pb2.Struct()
>>> root.fields["a"].list_value.values.add().string_value = "x"
>>> [field.name for field, _ in set_fields([root])]
['fields']
>>> [field.name for field, _ in set_fields([root], into_maps=True)]
['fields', 'list_value', 'values', 'string_value']
>>> [m.DESCRIPTOR.name for m in messages([root], into_maps=True)]
['Struct', 'Value', 'ListValue', 'Value']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


def set_fields(roots: Iterable[Message], *, into_maps: bool = False) -> Iterator[tuple[FieldDescriptor, Any]]:
    """(field, value) for each set field of each reachable message, depth first.

    Map fields are yielded but their message values are only walked with `into_maps`: the
    plan walks look at relations and expressions, which Spark never puts in a map, while a
    walk for field versions must see every message."""
    stack: list[Message] = list(roots)
    while stack:
        message = stack.pop()
        for field, value in message.ListFields():
            yield field, value
            stack.extend(_children(field, value, into_maps))


def messages(roots: Iterable[Message], *, into_maps: bool = False) -> Iterator[Message]:
    """Each reachable message (the roots included), before the messages inside it."""
    stack: list[Message] = list(roots)
    while stack:
        message = stack.pop()
        yield message
        for field, value in message.ListFields():
            stack.extend(_children(field, value, into_maps))


def _children(field: FieldDescriptor, value: Any, into_maps: bool) -> list[Message]:
    if field.message_type is None:
        return []
    if field.message_type.GetOptions().map_entry:
        if into_maps and field.message_type.fields_by_name["value"].message_type is not None:
            return list(value.values())
        return []
    if field.is_repeated:
        return list(value)
    return [value]
