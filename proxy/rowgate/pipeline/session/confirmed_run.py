"""Runs a statement that changes state upstream to its end, and says what Spark answered.

A client's ExecutePlan stream says little about whether its statement happened: pyspark
stops reading at `result_complete`, the server cuts reattachable streams and the rest
arrives on ReattachExecute calls the proxy cannot tie to the statement, and a client may
go away at any moment. For the few statements whose outcome the proxy must know (they
change the session's temp views or position, the catalog, or which table a policy is on)
the proxy therefore runs the request itself, as one non-reattachable execution it reads
to the end, and answers the client with the responses afterwards. Their results are
command results (a few small messages), bounded by `MAX_RESPONSE_BYTES`; the run
continues to its end past the bound, so the outcome is still learned.

`Outcome.status` is "ok" (Spark finished it), "failed" (Spark answered with an error of its
own: the statement did not take effect) or "unknown" (the upstream went away, timed out or
was cancelled: the statement may or may not have taken effect).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Call, Refusal
from rowgate.responses.answer import Answer

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# Spark's own errors carry google.rpc.Status details (ErrorInfo with the error class).
SPARK_ERROR_DETAILS = "grpc-status-details-bin"
# Codes under which Spark may or may not have run the statement.
UNCERTAIN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


@dataclass
class Outcome:
    status: str  # "ok" | "failed" | "unknown"
    responses: list[Message] = field(default_factory=list)
    error: grpc.aio.AioRpcError | None = None
    too_large: bool = False

    def answer(self, call: Call) -> Answer:
        """What the client gets: the responses Spark sent, or Spark's error (relayed by the
        transport as the upstream's, redacted), or a refusal when the result was too large
        to hold."""
        if self.error is not None:
            self.error.call = call
            raise self.error
        if self.too_large:
            raise Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "the statement ran, but its result is too large for a statement that changes session state; "
                "run the query apart from the statement",
                reason="result_too_large",
            )
        first = self.responses[0]
        return Answer(
            self.responses,
            operation_key=(call.user_id, call.session_id, first.operation_id),
            server_side_session_id=first.server_side_session_id,
        )


def spark_answered(error: grpc.aio.AioRpcError) -> bool:
    """The error is Spark's verdict on the statement, not a lost connection."""
    if error.code() in UNCERTAIN:
        return False
    trailing = error.trailing_metadata() or ()
    return any(key == SPARK_ERROR_DETAILS for key, _ in trailing)


def not_reattachable(request: base_pb2.ExecutePlanRequest) -> base_pb2.ExecutePlanRequest:
    """A copy Spark runs as one stream that it does not cut (and ends with the statement)."""
    copy = base_pb2.ExecutePlanRequest()
    copy.CopyFrom(request)
    kept = [o for o in copy.request_options if o.WhichOneof("request_option") != "reattach_options"]
    del copy.request_options[:]
    copy.request_options.extend(kept)
    return copy


async def run_to_end(call: Call, hook: Callable[[bytes], bytes] | None = None) -> Outcome:
    """Sends the ExecutePlan `call.request` upstream and reads the whole answer; `hook`
    (raw bytes -> raw bytes, e.g. `call.response_hook`) is applied to every response."""
    try:
        return await _execute(call, hook)
    except grpc.aio.AioRpcError as e:
        return Outcome("failed" if spark_answered(e) else "unknown", error=e)


async def _execute(call: Call, hook: Callable[[bytes], bytes] | None = None) -> Outcome:
    request = not_reattachable(call.request)
    if not request.operation_id:
        request.operation_id = str(uuid.uuid4())
        call.request.operation_id = request.operation_id
    stream = call.upstream.raw("ExecutePlan")(request.SerializeToString(), metadata=call.metadata)
    responses: list[Message] = []
    size, too_large, first = 0, False, True
    async for raw in stream:
        if first and call.first_response is not None:
            call.first_response(raw)
        first = False
        if hook is not None:
            raw = hook(raw)
        size += len(raw)
        if size > MAX_RESPONSE_BYTES:
            too_large = True  # keep reading: the outcome matters more than the rows
            responses = []
            continue
        if not too_large:
            responses.append(base_pb2.ExecutePlanResponse.FromString(raw))
    if not too_large and not any(r.HasField("result_complete") for r in responses):
        # pyspark asked for a reattachable execution and waits for this marker.
        last = responses[-1] if responses else None
        responses.append(
            base_pb2.ExecutePlanResponse(
                session_id=request.session_id,
                server_side_session_id=last.server_side_session_id if last is not None else "",
                operation_id=request.operation_id,
                response_id=str(uuid.uuid4()),
                result_complete=base_pb2.ExecutePlanResponse.ResultComplete(),
            )
        )
    return Outcome("ok", responses, too_large=too_large)
