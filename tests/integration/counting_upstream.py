"""A byte-for-byte gRPC relay in front of Spark Connect that counts what passes through it.

Put between a client (pyspark directly, or a rowgate proxy) and the suite's Spark server,
it tells how many upstream calls one query costs, and which of them are the proxy's state
reads (proxy/rowgate/pipeline/session/epoch.py): a Config `get_all` of the `rowgate.state.`
record, on the caller's session or on rowgate's shared internal session. Nothing is decoded
on the way; only Config requests are parsed (a copy) to label them.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.embedded.spark import free_port
from rowgate.upstream.methods import METHODS, SERVICE_NAME

STATE_PREFIX = "rowgate.state."
SHARED_USER = "rowgate-internal"


def label(name: str, raw: bytes) -> str:
    """`Config:state-read:session`, `Config:state-read:shared`, `Config:state-write`, `Config`,
    or the RPC's name."""
    if name != "Config":
        return name
    request = base_pb2.ConfigRequest.FromString(raw)
    op = request.operation
    kind = op.WhichOneof("op_type")
    where = "shared" if request.user_context.user_id == SHARED_USER else "session"
    if kind == "get_all" and op.get_all.prefix == STATE_PREFIX:
        return f"Config:state-read:{where}"
    keys = [p.key for p in op.set.pairs] if kind == "set" else list(op.unset.keys) if kind == "unset" else []
    if any(k.startswith(STATE_PREFIX) for k in keys):
        return f"Config:state-write:{where}"
    return "Config"


class CountingUpstream:
    def __init__(self, target: str):
        self.target = target  # host:port of the Spark Connect server
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(
            target,
            options=[("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)],
        )
        self.port = free_port()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32),
            options=[
                ("grpc.max_receive_message_length", 256 << 20),
                ("grpc.max_send_message_length", 256 << 20),
                # rowgate's upstream channel pings every 30 s, also between calls
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
                ("grpc.http2.max_ping_strikes", 0),
            ],
        )
        self._server.add_generic_rpc_handlers((_Handler(self),))
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        self._server.start()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def count(self, name: str, raw: bytes) -> None:
        tag = label(name, raw)
        with self._lock:
            self.counts[tag] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def delta(self, action) -> Counter[str]:
        """What `action()` sent upstream, by label."""
        before = self.snapshot()
        action()
        after = self.snapshot()
        after.subtract(before)
        return Counter({k: v for k, v in after.items() if v})

    def close(self) -> None:
        self._server.stop(0)
        self._channel.close()


def _metadata(context) -> list[tuple[str, str]]:
    return [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":") and k not in ("user-agent",)]


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, relay: CountingUpstream):
        self.relay = relay

    def service(self, details):
        prefix = f"/{SERVICE_NAME}/"
        if not details.method.startswith(prefix):
            return None
        name = details.method[len(prefix) :]
        method = METHODS.get(name)
        if method is None:
            return None
        relay, channel = self.relay, self.relay._channel
        if method.client_streaming and not method.server_streaming:
            out = channel.stream_unary(details.method)

            def stream_unary(requests, context):
                def counted():
                    for raw in requests:
                        relay.count(name, raw)
                        yield raw

                return _relay_errors(context, lambda: out(counted(), metadata=_metadata(context)))

            return grpc.stream_unary_rpc_method_handler(stream_unary)
        if method.server_streaming:
            out_stream = channel.unary_stream(details.method)

            def unary_stream(raw, context):
                relay.count(name, raw)
                try:
                    yield from out_stream(raw, metadata=_metadata(context))
                except grpc.RpcError as e:
                    context.set_trailing_metadata(e.trailing_metadata() or ())
                    context.abort(e.code(), e.details() or "")

            return grpc.unary_stream_rpc_method_handler(unary_stream)
        out_unary = channel.unary_unary(details.method)

        def unary_unary(raw, context):
            relay.count(name, raw)
            return _relay_errors(context, lambda: out_unary(raw, metadata=_metadata(context)))

        return grpc.unary_unary_rpc_method_handler(unary_unary)


def _relay_errors(context, send):
    try:
        return send()
    except grpc.RpcError as e:
        context.set_trailing_metadata(e.trailing_metadata() or ())
        context.abort(e.code(), e.details() or "")
