"""Deep requests are refused before decoding, and what is accepted fits the main thread.

The main-thread cases run in a child process whose stack limit is held (soft and hard) to
the minimum the proxy starts with: the child decodes, re-encodes, copies, walks and rewrites
a request at Spark's depth limit on its main thread, as the event loop would, and decodes
requests of the other services at upb's own nesting cap. A crash there is a crash of the
child, reported here, not of the test run.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Refusal
from rowgate.rewrite.plan.compression import CompressedPlanError, decompress_plan
from rowgate.transport.protobuf_limits import MAIN_STACK_BYTES, MIN_MAIN_STACK_BYTES
from rowgate.transport.server import SparkConnectProxy
from rowgate.upstream.methods import METHODS
from tests.deep_plans import aliased_relations, execute_request, field, request_at_depth

EXECUTE = METHODS["ExecutePlan"]


def test_a_ten_thousand_level_request_is_refused_before_decoding():
    with pytest.raises(Refusal) as refused:
        SparkConnectProxy._decode(EXECUTE, execute_request(aliased_relations(10_000)))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.reason == "plan_too_deep"
    assert refused.value.message == (
        "plan nested deeper than 1024 levels, Spark's own spark.connect.grpc.marshallerRecursionLimit"
    )


def test_every_rpc_is_checked():
    """The check sits in the one decode every RPC goes through: a request type that cannot
    nest at all passes, one that can is refused when too deep."""
    with pytest.raises(Refusal, match="1024 levels"):
        SparkConnectProxy._decode(EXECUTE, request_at_depth(1025))
    analyze = METHODS["AnalyzePlan"]
    head = base_pb2.AnalyzePlanRequest(session_id="s").SerializeToString()
    # AnalyzePlanRequest.schema (field 4) > plan (1) > root (1): the relation at level 3
    deep = head + field(4, field(1, field(1, aliased_relations(600))))
    with pytest.raises(Refusal, match="1024 levels"):
        SparkConnectProxy._decode(analyze, deep)


def test_a_compressed_plan_is_checked_after_decompression():
    request = base_pb2.ExecutePlanRequest.FromString(execute_request(compressed=aliased_relations(10_000)))
    with pytest.raises(CompressedPlanError) as refused:
        decompress_plan(request.plan)
    assert refused.value.reason == "plan_too_deep"


CHILD = textwrap.dedent(
    """
    import resource, threading
    from rowgate.transport.protobuf_limits import allow_deep_plans
    allow_deep_plans()
    assert threading.current_thread() is threading.main_thread()
    print("stack", resource.getrlimit(resource.RLIMIT_STACK)[0], flush=True)

    from rowgate.rewrite.plan import rewrite_plan
    from rowgate.rewrite.plan.compression import compress_plan, decompress_plan
    from rowgate.upstream.methods import METHODS
    from rowgate.transport.server import SparkConnectProxy
    from tests.deep_plans import aliased_relations, execute_request, relation_at_depth, request_at_depth
    from tests.unit.rewrite.fakes import shop

    def walk(message):
        # one C call (ListFields) and one property per level, like the plan walkers
        class Node:
            def __init__(self, m):
                self.m = m
            @property
            def children(self):
                return [walk(v) for _, v in self.m.ListFields() if hasattr(v, "ListFields")]
        return Node(message).children

    at_limit = request_at_depth(1024)
    relation_1024 = relation_at_depth(1024)
    compressed = SparkConnectProxy._decode(METHODS["ExecutePlan"], execute_request(compressed=relation_1024))
    decompress_plan(compressed.plan)  # 1024 levels below the decompressed relation: accepted
    assert compressed.plan.root.SerializeToString() == relation_1024
    decoded = [SparkConnectProxy._decode(METHODS["ExecutePlan"], d) for d in (at_limit, execute_request(aliased_relations(510)))]
    for request in decoded + [compressed]:  # the decompressed one is 1026 levels deep
        data = request.SerializeToString()
        assert type(request).FromString(data) == request
        copy = type(request)()
        copy.CopyFrom(request)
        assert copy == request
        walk(request)
        rewrite_plan(request.plan, shop())
        compress_plan(request.plan)
        decompress_plan(request.plan)
    # gRPC decodes the other services' requests itself, on this thread: upb's own cap of
    # 65,535 levels (unknown groups count) must fit the stack.
    from grpc_health.v1 import health_pb2
    from rowgate.admin.v1 import policy_admin_pb2
    from tests.deep_plans import unknown_groups
    for cls in (health_pb2.HealthCheckRequest, policy_admin_pb2.ExplainAccessRequest):
        cls.FromString(unknown_groups(65_000))
    print("survived", flush=True)
    """
)


# Sets the stack limit, then becomes the child. Not `preexec_fn`: that runs Python in a fork
# of this process, whose gRPC threads (left by earlier tests) make the fork abort now and
# then (SIGABRT, "epoll_wait error: Bad file descriptor"), seen on a loaded machine.
LIMIT_STACK_THEN_EXEC = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_STACK, (int(sys.argv[1]), int(sys.argv[2]))); "
    "os.execv(sys.executable, [sys.executable, '-c', sys.argv[3]])"
)


def _with_stack(soft: int, hard: int, script: str, timeout: float) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", LIMIT_STACK_THEN_EXEC, str(soft), str(hard), script]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def _child(stack_bytes: int) -> subprocess.CompletedProcess:
    return _with_stack(stack_bytes, stack_bytes, CHILD, 300)


def test_requests_at_the_limits_fit_the_smallest_main_stack_the_proxy_accepts():
    done = _child(MIN_MAIN_STACK_BYTES)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert f"stack {MIN_MAIN_STACK_BYTES}" in done.stdout and "survived" in done.stdout


def test_the_proxy_refuses_to_start_on_a_smaller_stack():
    done = _child(MIN_MAIN_STACK_BYTES // 4)
    assert done.returncode != 0 and "StackTooSmall" in done.stderr and "ulimit -s" in done.stderr


def test_the_soft_stack_limit_is_raised_where_the_hard_limit_allows():
    script = "from rowgate.transport.protobuf_limits import ensure_main_stack; print(ensure_main_stack())"

    done = _with_stack(8 * 1024 * 1024, resource.RLIM_INFINITY, script, 60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == MAIN_STACK_BYTES
