"""A response the proxy makes itself instead of asking the upstream.

It lives with the response builders (below the pipeline) so they can return one without
knowing the pipeline that decides when to answer; the transport sends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import Message


@dataclass
class Answer:
    """Responses the proxy makes itself instead of asking the upstream.

    Unary RPCs take exactly one message; ExecutePlan takes the whole (short) stream,
    which the transport also keeps so ReattachExecute/ReleaseExecute can be answered.
    """

    responses: Sequence[Message]
    # For an ExecutePlan answer: (user_id, session_id, operation_id) and the server-side
    # session id, so the transport can answer this operation's Reattach/Release later.
    operation_key: tuple[str, str, str] | None = None
    server_side_session_id: str = ""
