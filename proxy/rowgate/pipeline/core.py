"""Types of the request pipeline; see the package docstring for the flow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import Message

from rowgate.identity.caller import Caller
from rowgate.upstream.methods import Method

if TYPE_CHECKING:
    from rowgate.upstream.channel import Upstream


class Refusal(Exception):
    """The proxy will not let this request through; becomes a gRPC status for the client."""

    def __init__(self, code: grpc.StatusCode, message: str, *, reason: str = "refused"):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason  # a short label for metrics and the audit log
        self.call: Call | None = None  # set by the transport when a pipeline step refused

    @classmethod
    def invalid(cls, message: str, reason: str = "invalid_argument") -> Refusal:
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message, reason=reason)

    @classmethod
    def denied(cls, message: str, reason: str = "permission_denied") -> Refusal:
        return cls(grpc.StatusCode.PERMISSION_DENIED, message, reason=reason)


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


@dataclass
class Call:
    method: Method
    caller: Caller
    request: Message
    upstream: Upstream
    metadata: tuple[tuple[str, str | bytes], ...] = ()
    # The request as the client sent it, before any step changed it.
    raw_request: bytes = b""
    # Facts steps learn for later steps, the transport and the audit log
    # (e.g. "row_filter_applied", "tables", "policies").
    notes: dict[str, Any] = field(default_factory=dict)
    # Run by the transport once the upstream completed the call successfully (e.g. drop a
    # table's policies only after Spark dropped the table).
    after_success: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Given the raw bytes of the first upstream response (of a stream: its first message),
    # e.g. to learn the upstream's server-side session id without decoding every message.
    first_response: Callable[[bytes], None] | None = None
    # Given the details of an error the upstream answered with.
    upstream_error: Callable[[str], None] | None = None
    # Applied to every raw upstream response of a stream before it is relayed; may return
    # other bytes (e.g. the row-filter metric added to the metrics message).
    response_hook: Callable[[bytes], bytes] | None = None
    # Run once when the call is over, however it ended (answered, refused, relayed, failed,
    # cancelled); e.g. release the session's state for a statement that waits on this one.
    on_finish: list[Callable[[], None]] = field(default_factory=list)

    def finish(self) -> None:
        actions, self.on_finish = self.on_finish, []
        for action in actions:
            action()

    @property
    def session_id(self) -> str:
        return getattr(self.request, "session_id", "")

    @property
    def user_id(self) -> str:
        """What the upstream keys sessions by; equal to the caller's principal after pinning."""
        ctx = getattr(self.request, "user_context", None)
        return ctx.user_id if ctx is not None else ""


Step = Callable[[Call], Awaitable[Answer | None]]


class Pipeline:
    """Runs the steps in order; the first answer wins, a refusal stops everything."""

    def __init__(self, steps: Sequence[Step] = ()):
        self.steps = tuple(steps)

    async def run(self, call: Call) -> Answer | None:
        for step in self.steps:
            answer = await step(call)
            if answer is not None:
                return answer
        return None
