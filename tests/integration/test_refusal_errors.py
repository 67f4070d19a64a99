"""A refusal reaches a pyspark program as a readable exception with a rowgate error class.

Without status details pyspark prints its call object (`<_MultiThreadedRendezvous of RPC
that terminated with: ...>`). With the details the proxy now sends
(proxy/rowgate/responses/refusal_details.py) the program gets Spark's kind of exception:
`getCondition()`/`getErrorClass()` is `ROWGATE_*`, the message is the proxy's, and the gRPC
status is the same one a raw gRPC client sees.
"""

from __future__ import annotations

import warnings

import grpc
import pytest

from tests.conftest import execute_sql, remote_url
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    w = protected_world(
        proxy,
        module_sessions,
        Table("refusals", "id INT, owner STRING", rows=[values([(1, "reader"), (2, "other")])]),
        Policy("mine", "refusals", "owner = 'reader'"),
        spark_url=spark_server.url,
    )
    yield proxy, w.caller(READER), w.table("refusals")
    w.close()


def _raw_refusal(proxy, query: str, user: str) -> grpc.RpcError:
    """The same statement through a raw gRPC client: the proxy's own status and message."""
    with grpc.insecure_channel(proxy.target) as channel:
        with pytest.raises(grpc.RpcError) as info:
            for _ in execute_sql(channel, query, user=user):
                pass
    return info.value


def _condition(error) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated alias of getCondition in 4.x
        return error.getErrorClass()


@pytest.mark.parametrize(
    "statement, status, error_class",
    [
        ("CREATE ROW ACCESS POLICY everything ON {t} FILTER USING (TRUE)", "PERMISSION_DENIED", "ROWGATE_PERMISSION_DENIED"),
        ("SELECT 1; SELECT * FROM {t}", "INVALID_ARGUMENT", "ROWGATE_INVALID_REQUEST"),
    ],
    ids=["denied", "invalid"],
)
def test_a_refusal_is_an_exception_with_the_rowgate_error_class(world, statement, status, error_class):
    proxy, reader, table = world
    query = statement.format(t=table)
    raw = _raw_refusal(proxy, query, READER)
    assert raw.code().name == status and raw.details().startswith(f"[{error_class}] ")
    with pytest.raises(Exception) as info:
        reader.sql(query).collect()
    error = info.value
    assert _condition(error) == error_class and error.getCondition() == error_class
    assert str(error) == raw.details()  # the proxy's message, nothing around it
    assert "_MultiThreadedRendezvous" not in str(error) and "StatusCode." not in str(error)
    assert error.getGrpcStatusCode().name == status and grpc_status(error) == status
    if status == "PERMISSION_DENIED":
        from pyspark.errors import AnalysisException

        assert isinstance(error, AnalysisException)


def test_a_spark_error_keeps_sparks_class(world):
    _, reader, table = world
    with pytest.raises(Exception) as info:
        reader.sql(f"SELECT no_such_column FROM {table}").collect()
    assert info.value.getCondition().startswith("UNRESOLVED_COLUMN") and grpc_status(info.value) is None


def test_an_unauthenticated_caller_gets_the_rowgate_class(world, sessions):
    proxy, _, _ = world
    stranger = sessions(remote_url(proxy.url, user="no-kind-here"))
    with pytest.raises(Exception) as info:
        stranger.sql("SELECT 1").collect()
    error = info.value
    assert error.getCondition() == "ROWGATE_UNAUTHENTICATED", str(error)
    assert error.getGrpcStatusCode() == grpc.StatusCode.UNAUTHENTICATED
    assert str(error).startswith("[ROWGATE_UNAUTHENTICATED] ") and "_MultiThreadedRendezvous" not in str(error)
