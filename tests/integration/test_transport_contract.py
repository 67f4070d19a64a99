"""What the proxy promises at the gRPC level, checked against a recording upstream.

These tests need to see what reaches the upstream (which headers, which credentials,
whether a cancellation arrives), so the upstream here is a small recording gRPC server
rather than Spark. Nothing here claims row-level enforcement.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.embedded.spark import free_port


class RecordingUpstream:
    """Answers Config, streams ExecutePlan slowly until cancelled, records metadata."""

    def __init__(self):
        self.port = free_port()
        self.metadata: list[dict[str, str]] = []
        self.requests: list = []
        self.cancelled = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "Config": grpc.unary_unary_rpc_method_handler(
                self.config,
                request_deserializer=base_pb2.ConfigRequest.FromString,
                response_serializer=base_pb2.ConfigResponse.SerializeToString,
            ),
            "ExecutePlan": grpc.unary_stream_rpc_method_handler(
                self.execute,
                request_deserializer=base_pb2.ExecutePlanRequest.FromString,
                response_serializer=base_pb2.ExecutePlanResponse.SerializeToString,
            ),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("spark.connect.SparkConnectService", handlers),)
        )
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")

    def _record(self, request, context):
        if self._proxys_own(request):
            return
        self.metadata.append({k: v for k, v in context.invocation_metadata()})
        self.requests.append(request)

    @staticmethod
    def _proxys_own(request) -> bool:
        """The proxy's readiness probe and the settings it forces on each new session."""
        if request.user_context.user_id == "rowgate-health":
            return True
        return isinstance(request, base_pb2.ConfigRequest) and request.operation.WhichOneof("op_type") == "set"

    def config(self, request, context):
        self._record(request, context)
        if request.session_id == "fail-with-details":
            context.set_trailing_metadata((("x-upstream-detail", "kept"),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "upstream says no")
        return base_pb2.ConfigResponse(session_id=request.session_id, server_side_session_id="server-1")

    def execute(self, request, context):
        self._record(request, context)
        context.add_callback(self.cancelled.set)
        for i in range(600):
            if not context.is_active():
                return
            yield base_pb2.ExecutePlanResponse(session_id=request.session_id, response_id=str(i))
            time.sleep(0.05)


@pytest.fixture
def recording_upstream():
    upstream = RecordingUpstream()
    upstream.server.start()
    yield upstream
    upstream.server.stop(0)


def config_request(session_id="s-1", user_id="claimed-user"):
    return base_pb2.ConfigRequest(
        session_id=session_id,
        user_context=base_pb2.UserContext(user_id=user_id, user_name=user_id),
        operation=base_pb2.ConfigRequest.Operation(get_all=base_pb2.ConfigRequest.GetAll()),
    )


def unary(channel, name, request_cls, response_cls):
    return channel.unary_unary(
        f"/spark.connect.SparkConnectService/{name}",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )


def test_credentials_are_consumed_and_the_operator_token_is_sent(proxy_factory, recording_upstream, tmp_path):
    token_file = tmp_path / "tokens.yaml"
    token_file.write_text("- {token: client-credential, principal: 'user:ann@example.com'}\n")
    proxy = proxy_factory(
        "--identity",
        "token",
        "--token-file",
        str(token_file),
        upstream=f"sc://127.0.0.1:{recording_upstream.port}/;token=operator-secret;x-tenant=blue",
    )
    with grpc.insecure_channel(proxy.target) as channel:
        unary(channel, "Config", base_pb2.ConfigRequest, base_pb2.ConfigResponse)(
            config_request(),
            metadata=(
                ("authorization", "Bearer client-credential"),
                ("x-rowgate-debug", "not for the upstream"),
                ("x-custom", "passes"),
            ),
            timeout=10,
        )
    seen = recording_upstream.metadata[-1]
    assert seen["authorization"] == "Bearer operator-secret"
    assert seen["x-custom"] == "passes"
    assert seen["x-tenant"] == "blue"
    assert not any(k.startswith("x-rowgate-") for k in seen)
    assert "client-credential" not in repr(seen)
    # The session is pinned to the caller, whatever user_id the client typed.
    assert recording_upstream.requests[-1].user_context.user_id == "user:ann@example.com"


def test_upstream_errors_keep_status_message_and_trailers(proxy_factory, recording_upstream):
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{recording_upstream.port}")
    with grpc.insecure_channel(proxy.target) as channel:
        call = unary(channel, "Config", base_pb2.ConfigRequest, base_pb2.ConfigResponse)
        with pytest.raises(grpc.RpcError) as info:
            call(config_request(session_id="fail-with-details"), timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == "upstream says no"
    assert ("x-upstream-detail", "kept") in tuple(info.value.trailing_metadata())


def test_client_cancellation_reaches_the_upstream(proxy_factory, recording_upstream):
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{recording_upstream.port}")
    with grpc.insecure_channel(proxy.target) as channel:
        stream = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(
            base_pb2.ExecutePlanRequest(session_id="s-2", user_context=base_pb2.UserContext(user_id="u")),
            timeout=60,
        )
        first = next(stream)
        assert first.response_id == "0"
        stream.cancel()
    assert recording_upstream.cancelled.wait(10), "the upstream never saw the cancellation"


def test_client_deadline_reaches_the_upstream(proxy_factory, recording_upstream):
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{recording_upstream.port}")
    with grpc.insecure_channel(proxy.target) as channel:
        stream = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(base_pb2.ExecutePlanRequest(session_id="s-3", user_context=base_pb2.UserContext(user_id="u")), timeout=1.0)
        with pytest.raises(grpc.RpcError) as info:
            for _ in stream:
                pass
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert recording_upstream.cancelled.wait(10)


def test_unknown_method_is_unimplemented(proxy_factory, recording_upstream):
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{recording_upstream.port}")
    with grpc.insecure_channel(proxy.target) as channel:
        for path in ("/spark.connect.SparkConnectService/NoSuchRpc", "/other.Service/Config"):
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(path)(b"", timeout=10)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert not recording_upstream.requests


def test_malformed_protobuf_is_invalid_argument_and_the_proxy_keeps_serving(proxy_factory, recording_upstream):
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{recording_upstream.port}")
    with grpc.insecure_channel(proxy.target) as channel:
        raw = channel.unary_unary("/spark.connect.SparkConnectService/Config")
        with pytest.raises(grpc.RpcError) as info:
            raw(b"\xff\xff\xff\xff\x0f garbage", timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed ConfigRequest" in info.value.details()
        ok = unary(channel, "Config", base_pb2.ConfigRequest, base_pb2.ConfigResponse)(config_request(), timeout=10)
        assert ok.server_side_session_id == "server-1"
    assert len(recording_upstream.requests) == 1


def test_upstream_down_is_unavailable_with_a_clear_message(proxy_factory):
    dead_port = free_port()
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{dead_port}")
    with grpc.insecure_channel(proxy.target) as channel:
        call = unary(channel, "Config", base_pb2.ConfigRequest, base_pb2.ConfigResponse)
        with pytest.raises(grpc.RpcError) as info:
            call(config_request(), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"127.0.0.1:{dead_port}" in info.value.details()
    assert "unavailable" in info.value.details()
