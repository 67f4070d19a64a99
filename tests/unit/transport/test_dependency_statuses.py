"""A dependency's failure reaches the client as UNAVAILABLE or DEADLINE_EXCEEDED naming the
dependency, never as INTERNAL (proxy/rowgate/pipeline/dependency_errors.py).

Each dependency is provoked the way it fails in production where that is cheap (a closed
port, an upstream that rejects the proxy's token, a catalog question that hangs) and with a
stand-in raising the dependency's real exception types otherwise (PostgreSQL, SQLite). The
requests go through the real `SparkConnectProxy` on a loopback port, so the status is the
one a pyspark client would see. The integration tests add a real Spark whose catalog stops
answering (tests/integration/test_faults.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import threading
import uuid

import grpc
import psycopg
import pytest
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.catalog.upstream_catalog import CatalogUnavailable, UpstreamCatalog
from rowgate.catalog.upstream_sql import SessionRef, UpstreamSqlError, UpstreamUnavailable, sql_rows
from rowgate.embedded.spark import free_port
from rowgate.identity.caller import Caller
from rowgate.pipeline.core import EVERY_RPC, Pipeline, Refusal, step
from rowgate.pipeline.dependency_errors import dependency_refusal, upstream_status
from rowgate.pipeline.enforce.rewrite_context import SessionRewriteContext
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyStoreUnavailable
from rowgate.policy.store.base import PolicyExists, PolicyStoreError
from rowgate.policy.store.postgres import PostgresUnreachable
from rowgate.transport.server import SparkConnectProxy
from rowgate.upstream.channel import Upstream
from rowgate.upstream.url import parse_upstream_url

ORDERS = TableName("spark_catalog", "default", "orders")


def execute_request() -> base_pb2.ExecutePlanRequest:
    return base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="someone"),
        plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query="SELECT * FROM orders"))),
    )


class FakeSpark:
    """A Spark Connect stand-in on a loopback port whose ExecutePlan ends with `code`, or
    never answers when `code` is None (until the call is cancelled)."""

    def __init__(self, code: grpc.StatusCode | None, details: str = ""):
        self.code, self.details = code, details
        self.port = 0
        self.server: grpc.aio.Server | None = None

    async def start(self) -> FakeSpark:
        async def execute(raw: bytes, context):
            if self.code is None:
                await asyncio.Event().wait()
            await context.abort(self.code, self.details)
            yield b""  # a generator: ExecutePlan streams

        handler = grpc.method_handlers_generic_handler(
            "spark.connect.SparkConnectService", {"ExecutePlan": grpc.unary_stream_rpc_method_handler(execute)}
        )
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def stop(self) -> None:
        await self.server.stop(None)


def through_proxy(steps, upstream_url: str, request: base_pb2.ExecutePlanRequest | None = None, timeout: float = 20):
    """(status, details) a client gets for one ExecutePlan through a real SparkConnectProxy."""
    outcome: dict = {}

    async def main():
        upstream = Upstream(parse_upstream_url(upstream_url), max_message_bytes=1 << 20)
        upstream.open()
        proxy = SparkConnectProxy(upstream, Pipeline([step(s, EVERY_RPC) for s in steps]))
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((proxy.generic_handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_stream(
                    "/spark.connect.SparkConnectService/ExecutePlan",
                    request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
                    response_deserializer=base_pb2.ExecutePlanResponse.FromString,
                )((request or execute_request()), timeout=timeout)
                try:
                    async for _ in call:
                        pass
                    outcome["status"] = (grpc.StatusCode.OK, "")
                except grpc.aio.AioRpcError as e:
                    outcome["status"] = (e.code(), e.details() or "")
        finally:
            await server.stop(None)
            await upstream.close()

    asyncio.run(main())
    return outcome["status"]


def raising(error: BaseException):
    async def step(call):
        raise error

    return [step]


def with_fake_spark(code, details, steps_for):
    """Runs `steps_for(upstream)` against a FakeSpark; returns what the client got."""
    result: dict = {}

    async def start():
        return await FakeSpark(code, details).start()

    loop = asyncio.new_event_loop()
    spark = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        result["status"] = through_proxy(steps_for, f"sc://127.0.0.1:{spark.port}")
    finally:
        asyncio.run_coroutine_threadsafe(spark.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    return result["status"]


# -- the policy store ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        PolicyStoreUnavailable("the policy store has been unreachable since ..."),
        PostgresUnreachable("the PostgreSQL policy store at db:5432/rowgate is unreachable: connection refused"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.InterfaceError("the connection is closed"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
        sqlite3.OperationalError("database is locked"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_policy_store_failure_is_unavailable_naming_the_store(error):
    code, details = through_proxy(raising(error), "sc://127.0.0.1:1")
    assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
    assert "policy store" in details


# -- catalog lookups -------------------------------------------------------------------------


def test_a_catalog_lookup_that_fails_is_unavailable_naming_the_catalog():
    # e.g. CREATE ROW ACCESS POLICY looks the table up outside the enforcement step.
    error = CatalogUnavailable("upstream Spark Connect did not answer within 2s (DEADLINE_EXCEEDED: Deadline Exceeded)")
    code, details = through_proxy(raising(error), "sc://127.0.0.1:1")
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "catalog" in details and "did not answer within 2s" in details


def test_a_catalog_question_the_upstream_never_answers_times_out_naming_the_upstream():
    async def scenario():
        spark = await FakeSpark(None).start()
        upstream = Upstream(parse_upstream_url(f"sc://127.0.0.1:{spark.port}"), max_message_bytes=1 << 20)
        upstream.open()
        try:
            catalog = UpstreamCatalog(upstream, timeout_seconds=0.3)
            with pytest.raises(CatalogUnavailable) as caught:
                await catalog.lookup(ORDERS)
            return str(caught.value)
        finally:
            await upstream.close()
            await spark.stop()

    message = asyncio.run(scenario())
    assert "upstream Spark Connect did not answer within 0.3s" in message and "DEADLINE_EXCEEDED" in message


class HangingCatalog:
    timeout = 0.2

    def peek(self, name):
        from rowgate.catalog.upstream_catalog import NotCached

        raise NotCached(name)

    async def lookup(self, name):
        await asyncio.Event().wait()


def test_the_rewriters_wait_for_a_catalog_answer_ends_as_catalog_unavailable():
    """The rewriters run in a worker thread and wait for the event loop's lookup; that wait
    giving up must say "catalog" (it used to escape as a bare TimeoutError: INTERNAL)."""

    async def scenario():
        ctx = SessionRewriteContext(
            caller=Caller("user:reader@example.com"), is_admin=False, state=SessionState(), snapshot=None,
            catalog=HangingCatalog(), global_temp_views=set(), loop=asyncio.get_running_loop(),
        )  # fmt: skip
        assert ctx._lookup_timeout == pytest.approx(5.2)  # past the catalog's own deadline
        ctx._lookup_timeout = 0.2
        with pytest.raises(CatalogUnavailable) as caught:
            await asyncio.to_thread(ctx.lookup, ORDERS)
        return caught.value

    error = asyncio.run(scenario())
    assert not isinstance(error, concurrent.futures.TimeoutError)
    assert "catalog lookup of spark_catalog.default.orders" in str(error)
    refusal = dependency_refusal(error)
    assert refusal.code == grpc.StatusCode.UNAVAILABLE and "catalog" in refusal.message


# -- the upstream Spark Connect server ---------------------------------------------------------


def test_a_forwarded_call_to_an_upstream_that_is_down_is_unavailable_naming_it():
    port = free_port()
    code, details = through_proxy([], f"sc://127.0.0.1:{port}")
    assert code == grpc.StatusCode.UNAVAILABLE
    assert f"upstream Spark Connect at 127.0.0.1:{port} is unavailable" in details


def test_an_upstream_that_rejects_the_proxys_token_is_unavailable_not_unauthenticated():
    """The client's credentials never travel upstream: UNAUTHENTICATED there is about
    rowgate's token, and the client must not be told its own credential is bad."""
    code, details = with_fake_spark(grpc.StatusCode.UNAUTHENTICATED, "Invalid authentication token", [])
    assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
    assert "rejected rowgate's credentials" in details and "Invalid authentication token" in details


def test_the_proxys_own_upstream_question_that_fails_is_unavailable_naming_the_upstream():
    """A step's own question to Spark (the session's position, here) with no verdict."""

    async def position(call):
        rows = await sql_rows(call.upstream, "SELECT current_catalog(), current_database()", SessionRef("u", "s"), timeout=5)
        return rows

    code, details = with_fake_spark(grpc.StatusCode.UNAVAILABLE, "connection reset", [position])
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "upstream Spark Connect" in details and "connection reset" in details


def test_an_upstream_spark_verdict_passes_unchanged():
    code, details = with_fake_spark(grpc.StatusCode.INVALID_ARGUMENT, "[PARSE_SYNTAX_ERROR] nope", [])
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "[PARSE_SYNTAX_ERROR] nope")


def test_an_interrupt_of_the_proxys_own_question_is_cancelled_not_internal():
    """interruptAll on a session also cancels rowgate's own questions running in it."""
    error = UpstreamSqlError("[OPERATION_CANCELED] Operation has been canceled.", "OPERATION_CANCELED")
    code, details = through_proxy(raising(error), "sc://127.0.0.1:1")
    assert code == grpc.StatusCode.CANCELLED
    assert "[ROWGATE_OPERATION_CANCELED]" in details and "[OPERATION_CANCELED]" in details


def test_another_rejection_of_the_proxys_own_question_is_still_internal():
    code, _ = through_proxy(raising(UpstreamSqlError("[PARSE_SYNTAX_ERROR] x", "PARSE_SYNTAX_ERROR")), "sc://127.0.0.1:1")
    assert code == grpc.StatusCode.INTERNAL


# -- what is not a dependency's failure ----------------------------------------------------------


def test_an_unnamed_timeout_is_deadline_exceeded_not_internal():
    code, details = through_proxy(raising(TimeoutError()), "sc://127.0.0.1:1")
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "waiting for a dependency" in details


def test_a_bug_is_still_internal():
    code, details = through_proxy(raising(KeyError("oops")), "sc://127.0.0.1:1")
    assert (code, details) == (grpc.StatusCode.INTERNAL, "[ROWGATE_INTERNAL_ERROR] rowgate internal error: KeyError")


@pytest.mark.parametrize(
    "error",
    [
        PolicyExists(ORDERS, "p"),
        psycopg.ProgrammingError("syntax error at or near"),
        sqlite3.ProgrammingError("x"),
        ValueError("x"),
        grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, None, None, details="[X] y"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_answers_and_bugs_are_no_dependency_failures(error):
    assert dependency_refusal(error) is None


def test_a_refusal_stays_itself():
    refusal = Refusal.denied("no")
    assert dependency_refusal(refusal) is refusal


@pytest.mark.parametrize(
    "code, mapped, words",
    [
        (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, "is unavailable"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.DEADLINE_EXCEEDED, "did not answer before the call's deadline"),
        (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE, "rejected rowgate's credentials"),
    ],
)
def test_upstream_transport_failures_name_the_upstream(code, mapped, words):
    got, details = upstream_status(code, "x", "spark:15002")
    assert got == mapped and words in details and "upstream Spark Connect at spark:15002" in details


def test_upstream_unavailable_and_store_errors_map_to_unavailable():
    for error, words in ((UpstreamUnavailable("gone"), "upstream Spark Connect"), (PolicyStoreError("down"), "policy store")):
        refusal = dependency_refusal(error)
        assert refusal.code == grpc.StatusCode.UNAVAILABLE and words in refusal.message
