"""`python -m rowgate.probe --service readiness`: one gRPC health check, as an exit code.

For container health checks (Dockerfile HEALTHCHECK, compose `healthcheck`, Kubernetes
`exec` probes) where no grpc_health_probe binary is available: the image already has
Python and grpcio. Exit 0 when the service is SERVING, 1 when it is not or the proxy does
not answer, 2 for a bad command line. Services: see proxy/rowgate/health.py
(`liveness`, `readiness`).

The target defaults to the port of ROWGATE_LISTEN on the loopback address, the same
setting `rowgate serve` listens on. When the proxy serves TLS (ROWGATE_TLS_CERT), the probe
speaks TLS too, trusting --tls-root (default: that certificate, enough for a self-signed
one) and checking the name --server-name (default: localhost).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEFAULT_LISTEN = "127.0.0.1:15002"


def default_target(environ: dict[str, str]) -> str:
    """Loopback and the port `rowgate serve` listens on (a wildcard host is not dialable)."""
    listen = environ.get("ROWGATE_LISTEN") or DEFAULT_LISTEN
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::", "*"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def parse_args(argv: list[str] | None, environ: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rowgate.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--service", default="readiness", help="health service to check: liveness or readiness (default)")
    parser.add_argument("--target", default=None, help="HOST:PORT of the proxy (default: from ROWGATE_LISTEN, on loopback)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    parser.add_argument("--tls-root", default=None, help="PEM roots to trust (default: ROWGATE_TLS_CERT when set)")
    parser.add_argument("--server-name", default=None, help="name the TLS certificate must carry (default: localhost)")
    args = parser.parse_args(argv)
    args.target = args.target or default_target(environ)
    args.tls_root = args.tls_root or environ.get("ROWGATE_TLS_CERT") or None
    return args


def check(target: str, service: str, *, timeout: float, tls_root: str | None = None, server_name: str | None = None) -> int:
    """The service's status (health_pb2.HealthCheckResponse.ServingStatus) or raises grpc.RpcError."""
    if tls_root:
        creds = grpc.ssl_channel_credentials(root_certificates=Path(tls_root).read_bytes())
        options = [("grpc.ssl_target_name_override", server_name or "localhost")]
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return reply.status


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    args = parse_args(argv, dict(os.environ) if environ is None else environ)
    try:
        status = check(args.target, args.service, timeout=args.timeout, tls_root=args.tls_root, server_name=args.server_name)
    except grpc.RpcError as e:
        print(f"{args.service} at {args.target}: no answer ({e.code().name}: {e.details()})", file=sys.stderr)
        return 1
    except OSError as e:  # an unreadable --tls-root
        print(f"{args.service} at {args.target}: {e}", file=sys.stderr)
        return 1
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    print(f"{args.service} at {args.target}: {name}")
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
