"""Lets the proxy decode every plan Spark itself accepts, on a stack that can hold it.

The upb protobuf runtime refuses messages nested deeper than 100 levels by default, and a
DataFrame of about fifty chained operators is already that deep; Spark's server accepts
far deeper plans (`spark.connect.grpc.marshallerRecursionLimit`, 1024). Allowing "oversize"
protos lifts upb's depth limit to 65,535 levels, far more than any stack holds, so the
transport refuses anything nested deeper than Spark's own limit before decoding
(rowgate/rewrite/plan/nesting.py); the Python walker gets the recursion headroom (and
thread stacks) to follow such plans.

What is left runs on the main thread, the event loop's: decoding, encoding and copying a
request of the deepest accepted nesting, and any walker that follows it there. Measured with
pyspark's upb on x86-64: upb's decoder needs about 0.6 KiB of stack per level, a Python walker
that passes through one C call per relation about 1.3 KiB per level, so a request at the
limit needs under 1 MiB (1 MiB was enough in that test, 512 KiB was not). The main thread's stack grows on demand up to the soft
RLIMIT_STACK, read when it grows: it is raised here to MAIN_STACK_BYTES where the hard limit
allows, and a process whose limit stays below MIN_MAIN_STACK_BYTES refuses to start rather
than crash on the first deep plan (tests/unit/transport/test_deep_requests.py runs a request
at the limit on a main thread held to that minimum).
"""

from __future__ import annotations

import resource
import sys
import threading

RECURSION_LIMIT = 20_000
THREAD_STACK_BYTES = 256 * 1024 * 1024
MAIN_STACK_BYTES = 64 * 1024 * 1024
MIN_MAIN_STACK_BYTES = 4 * 1024 * 1024


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
            f"to decode plans nested as deep as Spark accepts without risking a crash"
        )
    return soft
