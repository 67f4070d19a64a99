"""Shipped code (UDFs, UDTFs, data sources, foreach sinks, listeners) is reported, not judged.

Such code runs inside Spark with the server's rights and can open a protected table's files
directly; whether a caller may ship it is the pipeline's decision (admins only, while
protection is in force). The walk finds it by message type wherever it sits: a registration,
an expression, `mapInPandas`, `foreachBatch`, a streaming listener.
"""

from __future__ import annotations

from google.protobuf.message import Message

from rowgate.rewrite.facts import UserCode
from rowgate.rewrite.plan.classify import CODE_NAMES, USER_CODE
from rowgate.rewrite.plan.walker import Frame, Walk


def user_code(walk: Walk, msg: Message, frame: Frame) -> Frame | None:
    kind = USER_CODE[msg.DESCRIPTOR.full_name]
    name = frame.code_name or (frame.parent.field if frame.parent is not None else "")
    walk.found.add(user_code=(UserCode(kind, name, "register" if frame.register else "call"),))
    return None  # only types and bytes below


def code_name(walk: Walk, msg: Message, frame: Frame) -> Frame | None:
    return frame.but(code_name=getattr(msg, CODE_NAMES[msg.DESCRIPTOR.full_name]))
