"""Pins every request to its authenticated caller.

The Spark Connect server keys sessions by (user_id, session_id) and operations by
(user_id, session_id, operation_id), and `user_id` is whatever the client typed. Replacing
it on every message of every RPC with the caller's principal means a second caller who
sends the first caller's session_id lands in a session of their own: they cannot see its
temp views, cached relations or config, nor reattach to, release or interrupt its work.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message

from rowgate.pipeline.core import Call, Refusal
from rowgate.responses.answer import Answer


def pin(request: Message, principal: str) -> None:
    """Overwrite user_context in place; refuse a request type that has none."""
    if "user_context" not in request.DESCRIPTOR.fields_by_name:
        raise Refusal(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{request.DESCRIPTOR.name} carries no user_context; rowgate cannot pin it to the caller",
            reason="unpinnable_request",
        )
    ctx = request.user_context
    ctx.user_id = principal
    ctx.user_name = principal


async def pin_session(call: Call) -> Answer | None:
    pin(call.request, call.caller.principal)
    return None
