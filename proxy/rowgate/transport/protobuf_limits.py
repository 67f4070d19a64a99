"""Lets the proxy decode every plan Spark itself accepts.

The upb protobuf runtime refuses messages nested deeper than 100 levels by default, and a
DataFrame of about fifty chained operators is already that deep; Spark's server accepts
far deeper plans (`spark.connect.grpc.marshallerRecursionLimit`, 1024). Allowing "oversize"
protos lifts upb's depth limit; the Python walker then gets the recursion headroom (and
thread stacks) to follow such plans.
"""

from __future__ import annotations

import sys
import threading

RECURSION_LIMIT = 20_000
THREAD_STACK_BYTES = 256 * 1024 * 1024


def allow_deep_plans() -> None:
    try:
        from google._upb import _message as upb
    except ImportError:  # another protobuf runtime: keep its defaults
        return
    upb.SetAllowOversizeProtos(True)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    # Applies to threads started from now on, e.g. asyncio's worker threads for rewrites.
    threading.stack_size(THREAD_STACK_BYTES)
