"""The floor of the stack: a grpc.aio relay of raw bytes with no pipeline at all.

Every Spark Connect RPC is forwarded to the upstream as the bytes it arrived as, with the
same streaming shape, metadata passed through, and responses relayed one message at a time.
It does what rowgate's transport does minus everything rowgate adds (identity, decoding,
rewriting, its own answers), so "rowgate / bare relay" in the benchmark is rowgate's own
cost, separated from the cost of gRPC's Python stack that any Python relay pays.

    .venv/bin/python benchmarks/bare_relay.py --listen 127.0.0.1:15010 --upstream 127.0.0.1:15003

Not a product: no TLS, no authentication, for benchmarks on loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))

from rowgate.upstream.methods import METHODS, SERVICE_NAME

MAX_MESSAGE = 256 * 1024 * 1024
# Calls relayed so far, reported on SIGUSR1 (see `_report`): the benchmark divides the
# relay's CPU by it, as it divides rowgate's by rowgate_requests_total.
CALLS = [0]
OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]


def _passed_metadata(context: grpc.aio.ServicerContext) -> tuple:
    return tuple((k, v) for k, v in (context.invocation_metadata() or ()) if not k.startswith(":"))


def handler(channel: grpc.aio.Channel) -> grpc.GenericRpcHandler:
    handlers = {}
    for method in METHODS.values():
        path = method.path
        if method.client_streaming and not method.server_streaming:
            upstream = channel.stream_unary(path)

            async def client_stream(requests, context, upstream=upstream):
                CALLS[0] += 1
                return await upstream(requests, metadata=_passed_metadata(context))

            handlers[method.name] = grpc.stream_unary_rpc_method_handler(client_stream)
        elif method.server_streaming and not method.client_streaming:
            upstream = channel.unary_stream(path)

            async def server_stream(request, context, upstream=upstream):
                CALLS[0] += 1
                call = upstream(request, metadata=_passed_metadata(context))
                try:
                    async for response in call:
                        yield response
                except grpc.aio.AioRpcError as e:
                    await context.abort(e.code(), e.details() or "")

            handlers[method.name] = grpc.unary_stream_rpc_method_handler(server_stream)
        elif not method.client_streaming:
            upstream = channel.unary_unary(path)

            async def unary(request, context, upstream=upstream):
                CALLS[0] += 1
                try:
                    return await upstream(request, metadata=_passed_metadata(context))
                except grpc.aio.AioRpcError as e:
                    await context.abort(e.code(), e.details() or "")

            handlers[method.name] = grpc.unary_unary_rpc_method_handler(unary)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _report(stats_file: str, seq: list[int]) -> None:
    """Writes `<seq> <calls>` to `stats_file` (replaced atomically): a reader that sent the
    signal waits for its sequence number, so it never reads a stale count."""
    seq[0] += 1
    tmp = stats_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{seq[0]} {CALLS[0]}\n")
    os.replace(tmp, stats_file)


async def serve(listen: str, upstream: str, stats_file: str | None = None) -> None:
    channel = grpc.aio.insecure_channel(upstream, options=OPTIONS)
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((handler(channel),))
    port = server.add_insecure_port(listen)
    await server.start()
    print(f"bare relay listening on port {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stats_file:
        loop.add_signal_handler(signal.SIGUSR1, _report, stats_file, [0])
    await stop.wait()
    await server.stop(1)
    await channel.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="raw-bytes grpc.aio relay for Spark Connect (benchmark floor)")
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--upstream", required=True, help="host:port of the Spark Connect server")
    p.add_argument("--stats-file", help="on SIGUSR1 write '<seq> <calls relayed>' to this file")
    p.add_argument("--event-loop", choices=["uvloop", "asyncio"], default="uvloop", help="as rowgate's --event-loop")
    args = p.parse_args(argv)
    if args.event_loop == "uvloop":
        import uvloop

        uvloop.run(serve(args.listen, args.upstream, args.stats_file))
    else:
        asyncio.run(serve(args.listen, args.upstream, args.stats_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
