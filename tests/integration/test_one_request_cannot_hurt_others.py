"""One request cannot hurt others: a plan nested too deep is refused, and the proxy serves on.

An ExecutePlan nesting 10,000 relations (about 100 KB) used to overflow the event loop's
stack while the proxy decoded it, killing the proxy for every caller. The proxy now refuses
any request nested deeper than Spark's own limit (`spark.connect.grpc.marshallerRecursionLimit`,
1024 levels) before decoding it, compressed plans after decompression, counted as Spark
counts: a plan at exactly the limit that Spark runs directly runs through the proxy too.

The other services on the port (health, rowgate.v1.PolicyAdmin) are decoded by gRPC itself
on the event loop, where upb's own cap (65,535 levels, unknown groups included) applies: the
proxy's main thread has the stack for it (rowgate/transport/protobuf_limits.py).

The requests are raw bytes built without recursion (tests/deep_plans.py): pyspark could not
build them, and this test must not overflow its own stack either.
"""

from __future__ import annotations

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.rewrite.plan.nesting import nesting_depth
from tests.conftest import remote_url
from tests.deep_plans import aliased_relations, execute_request, relation_at_depth, request_at_depth, unknown_groups
from tests.harness.callers import ALICE, MALLORY

pytestmark = pytest.mark.spark

TOO_DEEP = "plan nested deeper than 1024 levels, Spark's own spark.connect.grpc.marshallerRecursionLimit"


def execute_raw(target: str, data: bytes, user: str | None = None, timeout: float = 120) -> list:
    """An ExecutePlan stream of request bytes exactly as given; the decoded responses."""
    metadata = (("x-rowgate-user", user),) if user else ()
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]) as channel:
        call = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=None,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )
        return list(call(data, metadata=metadata, timeout=timeout))


def runs_or_overflows_in_spark(target: str, data: bytes, user: str | None = None) -> None:
    """A plan at the limit passes the proxy. Spark then runs it (3 rows) or, now and then,
    overflows its own analyzer's stack on it: UNKNOWN with no details, as it does directly
    too. Never the proxy's depth refusal, and never a dead proxy."""
    try:
        assert rows(execute_raw(target, data, user)) == 3
    except grpc.RpcError as e:
        details = e.details() or ""
        overflowed = e.code() == grpc.StatusCode.UNKNOWN or (  # directly, or in rowgate's plan check
            e.code() == grpc.StatusCode.UNAVAILABLE and "plan check: UNKNOWN" in details
        )
        assert overflowed and TOO_DEEP not in details, (e.code(), details)


def rows(responses: list) -> int:
    return sum(r.arrow_batch.row_count for r in responses if r.HasField("arrow_batch"))


def refusal(target: str, data: bytes, user: str | None = None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        execute_raw(target, data, user)
    return raised.value


def others_still_served(proxy, sessions) -> None:
    assert proxy.proc is not None and proxy.proc.poll() is None, f"the proxy died:\n{proxy.log()[-3000:]}"
    spark = sessions(remote_url(proxy.url, user=ALICE))
    assert [tuple(r) for r in spark.sql("SELECT 1 AS one, 'still here' AS note").collect()] == [(1, "still here")]


@pytest.mark.parametrize("user", [None, MALLORY], ids=["anonymous", "named"])
def test_ten_thousand_nested_relations_are_refused_and_others_are_still_served(proxy, sessions, user):
    deep = execute_request(aliased_relations(10_000))
    assert 90_000 < len(deep) < 200_000  # the size of the attack: about 100 KB
    error = refusal(proxy.target, deep, user)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert TOO_DEEP in (error.details() or "")
    others_still_served(proxy, sessions)


def test_a_compressed_deep_plan_is_refused_after_decompression(proxy, sessions):
    """Compressed, the request itself is two levels deep: only the decompressed relation
    is deep, and the proxy checks it before decoding it."""
    deep = execute_request(compressed=aliased_relations(10_000))
    assert nesting_depth(deep, base_pb2.ExecutePlanRequest.DESCRIPTOR) == 2
    error = refusal(proxy.target, deep, MALLORY)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert TOO_DEEP in (error.details() or "")
    others_still_served(proxy, sessions)


def test_spark_s_own_limit_is_the_proxy_s(proxy, spark_server):
    """At exactly 1024 levels Spark runs the plan, directly and through the proxy; one level
    more and Spark refuses it directly, and the proxy refuses it before decoding."""
    direct = spark_server.url.removeprefix("sc://").split("/")[0]
    at_limit, over = request_at_depth(1024), request_at_depth(1025)
    assert rows(execute_raw(direct, at_limit)) == 3
    with pytest.raises(grpc.RpcError):
        execute_raw(direct, over)
    for user in (None, MALLORY):
        runs_or_overflows_in_spark(proxy.target, at_limit, user)
        error = refusal(proxy.target, over, user)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and TOO_DEEP in (error.details() or "")


def test_a_compressed_plan_at_the_limit_runs(proxy):
    """Spark counts a decompressed relation from its own top: 1024 levels inside pass."""
    compressed = execute_request(compressed=relation_at_depth(1024))
    runs_or_overflows_in_spark(proxy.target, compressed, MALLORY)


@pytest.mark.parametrize("levels", [65_000, 70_000], ids=["under-upb-cap", "over-upb-cap"])
def test_a_health_check_nesting_unknown_groups_does_not_take_the_proxy_down(proxy, sessions, levels):
    """gRPC decodes it on the event loop before any code of the proxy runs: 260 KB of nested
    groups of an unknown field used to overflow the default 8 MiB stack there."""
    with grpc.insecure_channel(proxy.target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
        try:
            check(unknown_groups(levels), timeout=60)
        except grpc.RpcError as e:  # over upb's cap: refused as undecodable, not a crash
            assert levels > 65_535 and e.code() != grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
    others_still_served(proxy, sessions)
