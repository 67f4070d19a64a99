"""Steps for operations the proxy remembers between the RPCs of one operation.

An ExecutePlan operation continues on ReattachExecute and ReleaseExecute calls; these steps
answer those the upstream never needs to see (operations the proxy answered itself,
release acknowledgements) and give the continuations of a row-filtered result the same
treatment as its start. The memories themselves are response builders in responses/.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from rowgate.pipeline.core import Answer, Call, Refusal, Step, step
from rowgate.pipeline.operations.filtered import Continued, FilteredOperations
from rowgate.pipeline.operations.local import LocalOperations
from rowgate.pipeline.operations.release_acks import ReleaseAcks
from rowgate.responses.sql_echo import EchoUnknown


def local_operations_step(operations: LocalOperations) -> Step:
    async def answer_local_operations(call: Call) -> Answer | None:
        return operations.answer(call.method.name, call.user_id, call.request)

    return step(answer_local_operations, ("ReattachExecute", "ReleaseExecute"))


def release_acks_step(acks: ReleaseAcks) -> Step:
    async def acknowledge_releases(call: Call) -> Answer | None:
        return acks.answer(call.user_id, call.request, call.metadata, call.upstream)

    return step(acknowledge_releases, ("ReleaseExecute",))


def filtered_operations_steps(operations: FilteredOperations) -> tuple[Step, Step]:
    """The step that remembers each ExecutePlan's verdict (after enforcement decided it) and
    the one that applies it to the operation's reattaches and releases."""

    async def remember_filtered(call: Call) -> Answer | None:
        req = call.request
        hook = operations.started(
            (call.user_id, req.session_id, req.operation_id),
            bool(call.facts.row_filter_applied),
            call.facts.error_secrets,
            req,
            call.raw_request,
        )
        if hook is not None:
            call.add_hook("response_as_sent", _refusing_unknown_echo(hook))
        return None

    async def continue_filtered(call: Call) -> Answer | None:
        req = call.request
        key = (call.user_id, req.session_id, req.operation_id)
        if call.method.name == "ReattachExecute":
            _apply(call, operations.reattached(key, call.caller))
        else:
            _apply(call, operations.released(key, req.HasField("release_all")))
        return None

    return (
        step(
            remember_filtered,
            ("ExecutePlan",),
            reads=("row_filter_applied", "error_secrets"),
            hooks=("response_as_sent",),
        ),
        step(
            continue_filtered,
            ("ReattachExecute", "ReleaseExecute"),
            writes=("row_filter_applied", "error_secrets"),
            hooks=("response_as_sent",),
        ),
    )


def _apply(call: Call, continued: Continued) -> None:
    if continued.row_filter_applied is not None:
        call.facts.row_filter_applied = continued.row_filter_applied
    if continued.error_secrets is not None:
        call.facts.error_secrets = continued.error_secrets
    if continued.response_hook is not None:
        call.add_hook("response_as_sent", _refusing_unknown_echo(continued.response_hook))


ECHO_UNKNOWN = (
    "this spark.sql answer continued on a rowgate replica that did not see it start (another replica, "
    "or before a restart), and only the replica that started it knows the query text to hand back in "
    "place of rowgate's rewrite; run the spark.sql call again"
)


def _refusing_unknown_echo(hook: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """`hook`, with an echo nobody here can rebuild (responses/sql_echo.py) ending the answer
    as FAILED_PRECONDITION (which pyspark does not retry) with the reason and what to do."""

    def relay(raw: bytes) -> bytes:
        try:
            return hook(raw)
        except EchoUnknown:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, ECHO_UNKNOWN, reason="echo_unknown") from None

    relay.__wrapped__ = hook  # type: ignore[attr-defined]
    return relay
