"""Request shape, Arrow decoding and error classification of `sql_rows`."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from rowgate.catalog.upstream_sql import SessionRef, UpstreamSqlError, UpstreamUnavailable, arrow_rows, spark_error, sql_rows

from .fakes import FakeUpstream, arrow_ipc, spark_rpc_error, unavailable

SESSION = SessionRef("svc", "0b7f4e0e-3f0c-4d7e-9a34-5a8d1b0c2d11")


def run(coro):
    return asyncio.run(coro)


def test_request_is_a_plain_sql_root_in_the_given_session_and_not_reattachable():
    fake = FakeUpstream(lambda r: [("1", "2")])
    assert run(sql_rows(fake, "SELECT 1, 2", SESSION)) == [("1", "2")]
    request = fake.requests[0]
    assert request.plan.root.sql.query == "SELECT 1, 2"
    assert (request.session_id, request.user_context.user_id) == (SESSION.session_id, "svc")
    assert not request.request_options  # no reattach_options: the server never cuts the stream
    assert request.operation_id
    assert fake.metadata[0] == (("x-extra", "1"),)


def test_rows_keep_order_and_duplicate_names():
    data = arrow_ipc([("a", "b"), ("c", None)], ("x", "x"))
    assert arrow_rows(data) == [("a", "b"), ("c", None)]


def test_no_batches_means_no_rows():
    assert run(sql_rows(FakeUpstream(lambda r: []), "SELECT 1 LIMIT 0", SESSION)) == []


def test_spark_refusal_carries_error_class_state_and_parameters():
    err = spark_rpc_error(
        "UNRESOLVED_COLUMN.WITH_SUGGESTION",
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column ... `nme` ...",
        {"objectName": "`nme`", "proposal": "`name`"},
        sql_state="42703",
    )
    with pytest.raises(UpstreamSqlError) as caught:
        run(sql_rows(FakeUpstream(lambda r: err), "SELECT nme FROM t", SESSION))
    e = caught.value
    assert e.error_class == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    assert e.sql_state == "42703"
    assert e.parameters == {"objectName": "`nme`", "proposal": "`name`"}
    assert "nme" in e.message and str(e) == e.message


def test_error_class_from_message_when_no_details():
    err = grpc.aio.AioRpcError(
        grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details="[DIVIDE_BY_ZERO] Division by zero."
    )
    refusal = spark_error(err)
    assert refusal is not None and refusal.error_class == "DIVIDE_BY_ZERO"


@pytest.mark.parametrize(
    "code, details",
    [
        (grpc.StatusCode.UNAVAILABLE, "connection refused"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
        (grpc.StatusCode.UNAUTHENTICATED, "[UNAUTHENTICATED] bad token"),  # not Spark judging the SQL
        (grpc.StatusCode.INTERNAL, "stream reset"),
    ],
)
def test_no_verdict_is_unavailable(code, details):
    err = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)
    with pytest.raises(UpstreamUnavailable):
        run(sql_rows(FakeUpstream(lambda r: err), "SELECT 1", SESSION))


def test_unavailable_is_not_a_sql_error():
    with pytest.raises(UpstreamUnavailable) as caught:
        run(sql_rows(FakeUpstream(lambda r: unavailable()), "SELECT 1", SESSION))
    assert not isinstance(caught.value, UpstreamSqlError)
