"""A real Spark Connect server that requires a token, and whose catalog stops answering.

- A proxy configured with the wrong upstream token is alive (liveness SERVING) but not
  ready (readiness NOT_SERVING), says why in its log, once; its clients get UNAVAILABLE
  naming the upstream, not UNAUTHENTICATED (their own credentials are fine). The same
  proxy with the right token is ready.
- Spark stops answering (SIGSTOP of its process group) while a session is warm: a query
  whose table the proxy must look up, and a policy statement that must look up its table,
  are refused within the catalog timeout with UNAVAILABLE naming the catalog, never
  INTERNAL; after SIGCONT the same proxy serves again.

The server here is private to this module (started with `spark.connect.authenticate.token`);
the session's shared server has no token.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rowgate.embedded.spark import EmbeddedSparkConnect
from rowgate.health import LIVENESS, READINESS
from tests.conftest import unique
from tests.deadlines import scaled, wait_until
from tests.harness.callers import ADMIN, READER

pytestmark = pytest.mark.spark

TOKEN = "s3cret-" + uuid.uuid4().hex[:8]
CATALOG_TIMEOUT = 2.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def token_spark(tmp_path_factory):
    server = EmbeddedSparkConnect(
        data_dir=tmp_path_factory.mktemp("token-spark"),
        driver_memory="512m",
        conf={"spark.connect.authenticate.token": TOKEN},
    ).start()
    try:
        yield server
    finally:
        _signal(server, signal.SIGCONT)  # a failed test must not leave it frozen
        server.stop()


def _signal(server: EmbeddedSparkConnect, sig: int) -> None:
    """To Spark's whole process group (spark-submit starts it in a session of its own)."""
    proc = server._proc
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, sig)


def health(proxy, service: str) -> int:
    with grpc.insecure_channel(proxy.target) as channel:
        return (
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=scaled(10)).status
        )


def execute(channel, query: str, user: str, session_id: str, timeout: float = 120) -> list:
    from pyspark.sql.connect.proto import base_pb2, relations_pb2

    request = base_pb2.ExecutePlanRequest(
        session_id=session_id,
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query=query))),
    )
    return list(
        channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(request, metadata=(("x-rowgate-user", user),), timeout=scaled(timeout))
    )


def until_answered(fn, timeout: float = 180):
    """`fn()` once the proxy's own upstream questions fit in the catalog timeout: on a busy
    machine a cold Spark may take longer than CATALOG_TIMEOUT for the first ones."""
    started, limit = time.monotonic(), scaled(timeout)
    while True:
        try:
            return fn()
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE and "did not answer within" in (e.details() or ""), e
            assert time.monotonic() - started < limit, f"no answer within {limit:.0f}s: {e.details()}"


def refusal(fn) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code(), info.value.details() or ""


def test_a_wrong_upstream_token_is_alive_not_ready_and_says_why(token_spark, proxy_factory):
    wrong = proxy_factory("--identity", "header", "--admin", ADMIN, upstream=f"{token_spark.url}/;token=not-{TOKEN}")
    reason = "rejects rowgate's credentials"
    wait_until(lambda: reason in wrong.log(), "the reason in the log", 60)
    assert health(wrong, READINESS) == NOT_SERVING
    assert health(wrong, "") == NOT_SERVING
    assert health(wrong, LIVENESS) == SERVING
    # Clients learn that the upstream is the problem, not their own credential.
    with grpc.insecure_channel(wrong.target) as channel:
        code, details = refusal(lambda: execute(channel, "SELECT 1 AS one", READER, str(uuid.uuid4())))
    assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
    assert "rejected rowgate's credentials" in details
    # Several more health rounds (every 2 s): the reason was logged once, not once per round.
    checks_later = time.monotonic() + 5
    wait_until(lambda: time.monotonic() > checks_later, "more health rounds", 10)
    assert health(wrong, READINESS) == NOT_SERVING and wrong.proc.poll() is None
    assert len(re.findall(r"readiness NOT_SERVING: .*rejects rowgate's credentials", wrong.log())) == 1, wrong.log()[-3000:]
    assert TOKEN not in wrong.log()  # neither token is written to the log

    right = proxy_factory("--identity", "header", "--admin", ADMIN, upstream=f"{token_spark.url}/;token={TOKEN}")
    wait_until(lambda: health(right, READINESS) == SERVING, "readiness SERVING with the right token", 60)


def test_a_catalog_that_stops_answering_is_unavailable_naming_the_catalog(token_spark, proxy_factory):
    proxy = proxy_factory(
        "--identity", "header", "--admin", ADMIN, "--catalog-timeout-seconds", str(CATALOG_TIMEOUT),
        upstream=f"{token_spark.url}/;token={TOKEN}",
    )  # fmt: skip
    table, never_seen = unique("dep_orders"), unique("dep_never_seen")
    admin_session, reader_session = str(uuid.uuid4()), str(uuid.uuid4())
    with grpc.insecure_channel(proxy.target) as channel:
        until_answered(lambda: execute(channel, f"CREATE TABLE {table} (id INT) USING parquet", ADMIN, admin_session))
        # A protected table: with none, the proxy has nothing to check and asks no catalog.
        policy = f"CREATE ROW ACCESS POLICY small ON {table} GRANT TO ('{READER}') FILTER USING (id < 2)"
        until_answered(lambda: execute(channel, policy, ADMIN, admin_session))
        # Warm sessions: settings applied, current database known. From here on the first
        # upstream question of a query on a new name is the catalog lookup.
        until_answered(lambda: execute(channel, "SELECT 1 AS one", ADMIN, admin_session))
        until_answered(lambda: execute(channel, "SELECT 1 AS one", READER, reader_session))

        _signal(token_spark, signal.SIGSTOP)
        try:
            started = time.monotonic()
            code, details = refusal(lambda: execute(channel, f"SELECT * FROM {never_seen}", READER, reader_session, timeout=60))
            took = time.monotonic() - started
            assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
            assert "catalog" in details and f"did not answer within {CATALOG_TIMEOUT:g}s" in details, details
            assert took < 30, f"refused after {took:.1f}s: the catalog timeout did not bound the wait"

            # A policy statement looks its table up too (outside the query enforcement).
            ddl = f"CREATE ROW ACCESS POLICY p ON {unique('dep_other')} GRANT TO ('{READER}') FILTER USING (TRUE)"
            code, details = refusal(lambda: execute(channel, ddl, ADMIN, admin_session, timeout=60))
            assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
            assert "catalog" in details and "Spark Connect" in details, details

            # The proxy stays alive; readiness follows the upstream.
            assert health(proxy, LIVENESS) == SERVING
            wait_until(lambda: health(proxy, READINESS) == NOT_SERVING, "readiness NOT_SERVING", 30)
        finally:
            _signal(token_spark, signal.SIGCONT)

        wait_until(lambda: health(proxy, READINESS) == SERVING, "readiness SERVING after Spark resumed", 60)
        until_answered(lambda: execute(channel, f"SELECT * FROM {table}", READER, reader_session))
    assert "internal error" not in proxy.log()
