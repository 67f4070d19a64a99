"""The gRPC face of the proxy: decode, run the pipeline, forward or answer, relay.

Requests are decoded (the pipeline must see and may rewrite them); responses from the
upstream are relayed as the raw bytes they arrived as, one message at a time, so a large
result streams through without being re-encoded or buffered. Upstream errors come back with
their original status, message and trailing metadata (which carries the rich error details
pyspark turns into AnalysisException and friends).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import grpc
from google.protobuf.message import DecodeError, Message

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.pipeline.core import Call, Pipeline, Refusal
from rowgate.pipeline.dependency_errors import dependency_refusal, upstream_status
from rowgate.pipeline.operations.local import LocalOperations
from rowgate.responses.answer import Answer
from rowgate.responses.error_redaction import redact_status
from rowgate.responses.refusal_details import refusal_status
from rowgate.rewrite.plan.nesting import NestedTooDeep, check_nesting
from rowgate.transport.metadata import forwardable_metadata
from rowgate.transport.read_ahead import read_ahead
from rowgate.upstream.channel import Upstream
from rowgate.upstream.methods import METHODS, SERVICE_NAME, Method

log = logging.getLogger("rowgate.transport")

# Receives the raw (key, value) pairs of invocation metadata.
CallerResolver = Callable[[tuple], Caller]

# How often a client may ping a connection with no data in flight. pyspark 4.3 pings every
# 60 s, calls or not (ChannelBuilder's keepalive defaults: a blocked awaitTermination()
# notices a dead peer), and Spark Connect accepts that; gRPC's own server defaults (one ping
# per 5 minutes, none without calls) answer the third such ping with GOAWAY "too_many_pings"
# and drop the connection under the caller's open calls. 10 s leaves room for clients tuned
# below pyspark's default and still stops a ping flood.
MIN_CLIENT_PING_INTERVAL_MS = 10_000


def server_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """The options of the proxy's listening gRPC server."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
    ]


def _anonymous(_: tuple) -> Caller:
    return ANONYMOUS


class Observer:
    """Hooks for metrics and audit; the default does nothing."""

    def request_done(
        self, call: Call | None, method: Method, code: grpc.StatusCode, seconds: float, reason: str = "", rule: str = ""
    ) -> None:
        """The call is over; `reason` says why it failed ("" when it did not), `rule` which
        rule refused it ("" unless the proxy refused it)."""

    def inspected(self, call: Call, seconds: float) -> None:
        """The pipeline (identity to rewrite) took `seconds` for this call."""


class SparkConnectProxy:
    def __init__(
        self,
        upstream: Upstream,
        pipeline: Pipeline,
        *,
        resolve_caller: CallerResolver = _anonymous,
        identity_errors: tuple[type[Exception], ...] = (),
        local_operations: LocalOperations | None = None,
        observer: Observer | None = None,
    ):
        self.upstream = upstream
        self.pipeline = pipeline
        self.resolve_caller = resolve_caller
        self.identity_errors = identity_errors
        self.local_operations = local_operations or LocalOperations()
        self.observer = observer or Observer()

    # -- building the generic handler -------------------------------------------------

    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers = {}
        for method in METHODS.values():
            if method.client_streaming and not method.server_streaming:
                handlers[method.name] = grpc.stream_unary_rpc_method_handler(self._client_stream(method))
            elif method.server_streaming and not method.client_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(self._server_stream(method))
            elif not method.client_streaming and not method.server_streaming:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(self._unary(method))
            # A bidirectional RPC would need its own relay; none exists in Spark Connect
            # today, and leaving it out makes gRPC answer UNIMPLEMENTED rather than guess.
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    # -- the common front half: who, what, and the pipeline ------------------------------

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        try:
            return self.resolve_caller(tuple(context.invocation_metadata() or ()))
        except self.identity_errors as e:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(e), reason="unauthenticated") from e

    @staticmethod
    def _decode(method: Method, raw: bytes) -> Message:
        try:
            # Before upb's recursive decoder (and every walker after it) sees the bytes:
            # a request nested deeper than Spark accepts must not reach the stack at all.
            check_nesting(raw, method.request_type.DESCRIPTOR)
            return method.request_type.FromString(raw)
        except NestedTooDeep as e:
            raise Refusal.invalid(str(e), reason="plan_too_deep") from e
        except (DecodeError, RuntimeError, ValueError) as e:
            raise Refusal.invalid(f"malformed {method.request_type.DESCRIPTOR.name}: {e}", reason="malformed_request") from e

    async def _prepare(
        self, method: Method, raw: bytes, context: grpc.aio.ServicerContext, caller: Caller | None = None
    ) -> tuple[Call, Answer | None]:
        if caller is None:
            caller = self._caller(context)
        call = Call(
            method=method,
            caller=caller,
            request=self._decode(method, raw),
            upstream=self.upstream,
            raw_request=raw,
            metadata=forwardable_metadata(context.invocation_metadata(), self.upstream.extra_metadata),
        )
        call.peer = context.peer()  # the connection (proxy/rowgate/pipeline/session/recall.py)
        started = time.perf_counter()
        try:
            answer = await self.pipeline.run(call)
        except Refusal as refusal:
            refusal.call = call  # so the refusal is audited with who asked for what
            call.finish()
            raise
        except BaseException as e:
            if isinstance(e, grpc.aio.AioRpcError) and getattr(e, "call", None) is None:
                # An upstream answer to one of the proxy's own questions for this call (the
                # state version, a lookup): its session hooks must see it too, e.g. to forget
                # a session Spark says is gone (pipeline/session/upstream.py).
                e.call = call
            call.finish()
            raise
        self.observer.inspected(call, time.perf_counter() - started)
        return call, answer

    async def _abort(
        self, context: grpc.aio.ServicerContext, method: Method, call: Call | None, err: Exception, started: float
    ) -> None:
        call = call or getattr(err, "call", None)
        rule = ""  # which rule refused: only the proxy's own refusals name one
        if isinstance(err, Refusal):
            code, details, trailing, reason, rule = err.code, err.message, (), err.reason, err.rule
        elif isinstance(err, grpc.aio.AioRpcError):
            code, details, reason = err.code(), err.details() or "", "upstream_error"
            trailing = tuple(err.trailing_metadata() or ())
            if call is not None and call.upstream_error is not None:
                call.upstream_error(details)
            secrets = call.facts.error_secrets if call is not None else None
            if secrets is not None:
                details, trailing = redact_status(details, trailing, secrets)
            mapped, details = upstream_status(code, details, self.upstream.url.target)
            code, trailing = mapped, (trailing if mapped == code else ())  # no details of another status
        elif (dependency := dependency_refusal(err)) is not None:  # a dependency failed: not a bug
            code, details, trailing, reason = dependency.code, dependency.message, (), dependency.reason
        else:
            log.exception("internal error in %s", method.name)
            code, details, trailing, reason = (
                grpc.StatusCode.INTERNAL,
                f"rowgate internal error: {type(err).__name__}",
                (),
                "internal",
            )
        if not isinstance(err, grpc.aio.AioRpcError) or code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            # The proxy's own words: rich details, so pyspark raises an exception with an error class.
            details, trailing = refusal_status(code, details, reason, trailing)
        self.observer.request_done(call, method, code, time.perf_counter() - started, reason, rule)
        await context.abort(code, details, trailing_metadata=_safe_trailing(trailing))

    def _timeout(self, context: grpc.aio.ServicerContext) -> float | None:
        remaining = context.time_remaining()
        return None if remaining is None or remaining > 1e8 else max(remaining, 0.001)

    # -- one handler factory per streaming shape ---------------------------------------

    def _unary(self, method: Method) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes | None]]:
        # `-> bytes | None`: after context.abort() (which raises) nothing is returned.
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> bytes | None:
            started = time.perf_counter()
            call = None
            try:
                call, answer = await self._prepare(method, raw, context)
                if answer is not None:
                    self.observer.request_done(call, method, grpc.StatusCode.OK, time.perf_counter() - started)
                    return answer.responses[0].SerializeToString()
                upstream_call = self.upstream.raw(method.name)(
                    call.request.SerializeToString(), metadata=call.metadata, timeout=self._timeout(context)
                )
                response = await upstream_call
                if call.first_response is not None:
                    call.first_response(response)
                trailing = await upstream_call.trailing_metadata()
                if trailing:
                    context.set_trailing_metadata(_safe_trailing(tuple(trailing)))
                await self._after_success(call)
                self.observer.request_done(call, method, grpc.StatusCode.OK, time.perf_counter() - started)
                return response
            except (Refusal, grpc.aio.AioRpcError) as e:
                await self._abort(context, method, call, e, started)
            except Exception as e:  # noqa: BLE001 - anything else is our bug; keep serving
                await self._abort(context, method, call, e, started)
            finally:
                if call is not None:
                    call.finish()
            return None  # reached only after context.abort()

        return handle

    def _server_stream(self, method: Method) -> Callable[[bytes, grpc.aio.ServicerContext], AsyncIterator[bytes]]:
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            started = time.perf_counter()
            call = None
            upstream_call = None
            try:
                call, answer = await self._prepare(method, raw, context)
                if answer is not None:
                    if answer.operation_key is not None:
                        self.local_operations.add(answer.operation_key, answer.server_side_session_id, list(answer.responses))
                    for response in answer.responses:
                        yield response.SerializeToString()
                    context.set_trailing_metadata(self._filter_trailer(call))
                    self.observer.request_done(call, method, grpc.StatusCode.OK, time.perf_counter() - started)
                    return
                upstream_call = self.upstream.raw(method.name)(
                    call.request.SerializeToString(), metadata=call.metadata, timeout=self._timeout(context)
                )
                learn, hook = call.first_response, call.response_hook
                async with aclosing(read_ahead(upstream_call)) as responses:
                    async for response in responses:
                        if learn is not None:
                            learn(response)
                            learn = None
                        yield response if hook is None else hook(response)
                trailing = await upstream_call.trailing_metadata()
                context.set_trailing_metadata(_safe_trailing(tuple(trailing or ())) + self._filter_trailer(call))
                await self._after_success(call)
                self.observer.request_done(call, method, grpc.StatusCode.OK, time.perf_counter() - started)
            except (Refusal, grpc.aio.AioRpcError) as e:
                await self._abort(context, method, call, e, started)
            except Exception as e:  # noqa: BLE001
                await self._abort(context, method, call, e, started)
            finally:
                # The client went away or the stream failed: stop the upstream work too.
                if upstream_call is not None and not upstream_call.done():
                    upstream_call.cancel()
                if call is not None:
                    call.finish()

        return handle

    def _client_stream(
        self, method: Method
    ) -> Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext], Awaitable[bytes | None]]:
        async def handle(request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes | None:
            started = time.perf_counter()
            refused: list[Exception] = []
            first_call: list[Call] = []
            caller = None
            try:
                caller = self._caller(context)
            except Refusal as e:
                await self._abort(context, method, None, e, started)

            upstream_call = None

            async def checked() -> AsyncIterator[bytes]:
                # Every message of the stream is pinned and inspected on its own, so an
                # artifact cannot slip through behind a harmless first chunk. A refusal
                # cancels the upstream call: raising inside this iterator would only end
                # the request stream and leave the upstream call waiting for ever.
                try:
                    async for raw in request_iterator:
                        call, answer = await self._prepare(method, raw, context, caller)
                        if answer is not None:
                            raise Refusal.invalid(f"{method.name} cannot be answered by the proxy mid-stream")
                        if not first_call:
                            first_call.append(call)
                        yield call.request.SerializeToString()
                except Exception as e:  # noqa: BLE001 - reported to the client below
                    refused.append(e)
                    if upstream_call is not None:
                        upstream_call.cancel()

            upstream_call = self.upstream.raw(method.name)(
                checked(),
                metadata=forwardable_metadata(context.invocation_metadata(), self.upstream.extra_metadata),
                timeout=self._timeout(context),
            )
            call = None
            try:
                response = await upstream_call
                if refused:
                    raise refused[0]
                call = first_call[0] if first_call else None
                self.observer.request_done(call, method, grpc.StatusCode.OK, time.perf_counter() - started)
                return response
            except (Exception, asyncio.CancelledError) as e:
                if isinstance(e, asyncio.CancelledError) and not refused:
                    raise  # the client went away
                call = first_call[0] if first_call else None
                error = refused[0] if refused else e
                assert isinstance(error, Exception)  # a CancelledError without a refusal was re-raised above
                await self._abort(context, method, call, error, started)
            finally:
                if not upstream_call.done():
                    upstream_call.cancel()
            return None  # reached only after context.abort()

        return handle

    @staticmethod
    async def _after_success(call: Call) -> None:
        for action in call.after_success:
            try:
                await action()
            except Exception:  # the upstream already acted; report, do not fail the call
                log.exception("follow-up action failed after %s", call.method.name)

    @staticmethod
    def _filter_trailer(call: Call) -> tuple:
        """Whether rows were filtered (BigQuery's rowLevelSecurityApplied), as a trailer on
        every result stream the proxy inspected: free to send, unlike extra headers."""
        if call.facts.row_filter_applied is None:
            return ()
        return (("x-rowgate-row-filter-applied", "true" if call.facts.row_filter_applied else "false"),)


def _safe_trailing(trailing: tuple) -> tuple:
    """Trailing metadata the server may set again: gRPC owns its reserved keys."""
    return tuple((k, v) for k, v in trailing if not k.startswith(":") and k not in ("grpc-status", "grpc-message"))
