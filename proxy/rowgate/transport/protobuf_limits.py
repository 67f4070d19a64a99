"""Lets the proxy decode every plan Spark itself accepts, on a stack that can hold it.

The upb protobuf runtime refuses messages nested deeper than 100 levels by default, and a
DataFrame of about fifty chained operators is already that deep; Spark's server accepts
far deeper plans (`spark.connect.grpc.marshallerRecursionLimit`, 1024). Allowing "oversize"
protos lifts upb's depth limit to 65,535 levels, more than the default stack holds, so the
transport refuses anything nested deeper than Spark's own limit before decoding
(rowgate/rewrite/plan/nesting.py); the Python walker gets the recursion headroom (and
thread stacks) to follow such plans.

What is left runs on the main thread, the event loop's, and so does gRPC's own decoding of
the requests of every other service on the port (health, rowgate.v1.PolicyAdmin), which no
check of ours sees first. With oversize protos allowed upb still caps nesting at 65,535
levels, counting the groups of unknown fields, and its decoder needs about 0.6 KiB of stack a
level (measured on x86-64: 14,500 levels fit in 8 MiB), so the cap needs about 37 MiB: a
260 KB health check of nested unknown groups crashed a proxy on the default 8 MiB stack. The
main thread's stack grows on demand up to the soft RLIMIT_STACK, read when it grows: it is
raised here to MAIN_STACK_BYTES (where the hard limit allows), and a process whose limit
stays below MIN_MAIN_STACK_BYTES refuses to start rather than crash on the first deep
request. Spark Connect requests are held to Spark's 1,024 levels before decoding; at that
depth decoding, re-encoding, copying and walking one (a Python walker with a C call per
relation) needed under 1 MiB. tests/unit/transport/test_deep_requests.py runs both on a main
thread held to the minimum.
"""

from __future__ import annotations

import resource
import sys
import threading

RECURSION_LIMIT = 20_000
THREAD_STACK_BYTES = 256 * 1024 * 1024
MAIN_STACK_BYTES = 64 * 1024 * 1024
MIN_MAIN_STACK_BYTES = 48 * 1024 * 1024  # upb's cap of 65,535 levels, with room


class StackTooSmall(RuntimeError):
    pass


def allow_deep_plans() -> None:
    try:
        from google._upb import _message as upb
    except ImportError:  # another protobuf runtime: keep its defaults
        return
    ensure_main_stack()
    upb.SetAllowOversizeProtos(True)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    # Applies to threads started from now on, e.g. asyncio's worker threads for rewrites.
    threading.stack_size(THREAD_STACK_BYTES)


def ensure_main_stack(wanted: int = MAIN_STACK_BYTES, needed: int = MIN_MAIN_STACK_BYTES) -> int:
    """Raises the soft stack limit towards `wanted` (never lowers it); returns the limit in
    force, or raises StackTooSmall when even `needed` is out of reach."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
            soft = target
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise StackTooSmall(
            f"the stack limit is {soft // 1024} KiB (ulimit -s); rowgate needs at least {needed // 1024} KiB "
            f"to decode deeply nested requests without risking a crash (e.g. `ulimit -s unlimited`)"
        )
    return soft
