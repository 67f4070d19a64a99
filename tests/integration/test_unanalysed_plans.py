"""While a table is protected, nobody's plan is forwarded unanalysed, an admin's included.

A newer client's plan can hold fields the proxy's protocol does not know (to a proxy on 4.1's
protocol, 4.2's `nearestByJoin` was one: a relation whose inputs read tables). Forwarded as they are, they would reach a server that
knows them without the proxy's filter. Admins' reads are filtered like anyone's, so such a
plan is refused for them too, with a message naming the field
(proxy/rowgate/rewrite/plan/walker.py). The same holds for a field on the `Plan` itself, on
the request, or an analysis kind the proxy's protobuf lacks
(proxy/rowgate/rewrite/plan/envelope.py), and for kinds nobody can analyse (a plugin's `Any`
payload, a declarative pipeline, an external command; `admins` False in
proxy/rowgate/policy/kinds.py): admins' reads are filtered like anyone's, so they are refused
for admins too.
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from tests.harness.callers import ADMIN
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    w = protected_world(
        proxy,
        module_sessions,
        Table("unknown_fields", "id INT, owner STRING", rows=[values([(1, "admin"), (2, "other")])]),
        Policy("own", "unknown_fields", "owner = 'admin'"),
        spark_url=spark_server.url,
    )
    yield proxy, w.table("unknown_fields")
    w.close()


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, as a newer client would add it."""

    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    return varint((number << 3) | 2) + varint(len(payload)) + payload


def _read(table: str) -> relations_pb2.Relation:
    rel = relations_pb2.Relation()
    rel.read.named_table.unparsed_identifier = table
    return rel


def _limited(table: str, unknown: bytes = b"") -> relations_pb2.Relation:
    """A LIMIT over a read of `table`; `unknown` is appended to the Limit message."""
    rel = relations_pb2.Relation()
    rel.limit.input.CopyFrom(_read(table))
    rel.limit.limit = 10
    if unknown:
        rel.limit.CopyFrom(relations_pb2.Limit.FromString(rel.limit.SerializeToString() + unknown))
    return rel


def _rows(proxy, root: relations_pb2.Relation) -> int:
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(root=root),
    )
    with grpc.insecure_channel(proxy.target) as channel:
        stream = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(request, metadata=(("x-rowgate-user", ADMIN),), timeout=120)
        return sum(r.arrow_batch.row_count for r in stream if r.HasField("arrow_batch"))


def test_an_admins_plan_with_a_field_rowgate_does_not_know_is_refused(world):
    proxy, table = world
    assert _rows(proxy, _limited(table)) == 1  # the admin's read, filtered like anyone's
    # A relation hidden in a field the proxy cannot see into, reading the protected table.
    hidden = _field(99, _read(table).SerializeToString())
    with pytest.raises(grpc.RpcError) as info:
        _rows(proxy, _limited(table, hidden))
    error = info.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "field 99 of spark.connect.Limit" in error.details()
    assert "unknown to rowgate" in error.details() and "admins included" in error.details()


def test_an_unknown_relation_kind_is_refused_for_admins(world):
    proxy, table = world
    # A Relation whose only content is a rel_type member the proxy's protocol does not have.
    rel = relations_pb2.Relation.FromString(_field(250, _read(table).SerializeToString()))
    with pytest.raises(grpc.RpcError) as info:
        _rows(proxy, rel)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field 250 of spark.connect.Relation" in info.value.details()


def _with_unknown(message, number: int, payload: bytes):
    """`message` as a newer client would send it: with field `number` appended."""
    return type(message).FromString(message.SerializeToString() + _field(number, payload))


def _execute(proxy, request: base_pb2.ExecutePlanRequest) -> int:
    with grpc.insecure_channel(proxy.target) as channel:
        stream = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(request, metadata=(("x-rowgate-user", ADMIN),), timeout=120)
        return sum(r.arrow_batch.row_count for r in stream if r.HasField("arrow_batch"))


def _analyze(proxy, request: base_pb2.AnalyzePlanRequest) -> base_pb2.AnalyzePlanResponse:
    with grpc.insecure_channel(proxy.target) as channel:
        return channel.unary_unary(
            "/spark.connect.SparkConnectService/AnalyzePlan",
            request_serializer=base_pb2.AnalyzePlanRequest.SerializeToString,
            response_deserializer=base_pb2.AnalyzePlanResponse.FromString,
        )(request, metadata=(("x-rowgate-user", ADMIN),), timeout=120)


def _refused(action, where: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        action()
    error = info.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert where in error.details() and "admins included" in error.details(), error.details()


def test_an_unknown_field_on_the_plan_itself_is_refused_for_admins(world):
    """A newer client's `Plan` member (one more op_type, say) holding a read of the table."""
    proxy, table = world
    plan = base_pb2.Plan(root=_limited(table))
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=_with_unknown(plan, 77, _read(table).SerializeToString()),
    )
    _refused(lambda: _execute(proxy, request), "field 77 of spark.connect.Plan (at plan)")


def test_an_unknown_field_on_the_request_is_refused_for_admins(world):
    proxy, table = world
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(root=_limited(table)),
    )
    assert _execute(proxy, request) == 1
    hidden = base_pb2.Plan(root=_read(table)).SerializeToString()
    _refused(lambda: _execute(proxy, _with_unknown(request, 99, hidden)), "field 99 of spark.connect.ExecutePlanRequest")


def test_an_analysis_kind_rowgate_does_not_know_is_refused_for_admins(world):
    """An `AnalyzePlanRequest` whose analysis is a member this protobuf lacks: the plan it
    carries arrives as an unknown field, so the proxy sees no plan at all."""
    proxy, table = world
    request = base_pb2.AnalyzePlanRequest(session_id=str(uuid.uuid4()), user_context=base_pb2.UserContext(user_id="ignored"))
    inner = base_pb2.AnalyzePlanRequest.Schema(plan=base_pb2.Plan(root=_read(table))).SerializeToString()
    _refused(lambda: _analyze(proxy, _with_unknown(request, 120, inner)), "field 120 of spark.connect.AnalyzePlanRequest")


def _run_command(proxy, command: commands_pb2.Command) -> None:
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(command=command),
    )
    _execute(proxy, request)


def _refused_for_admins(action, kind: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        action()
    error = info.value
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert f"({kind})" in error.details() and "admins included" in error.details(), error.details()


def test_an_admins_extension_relation_is_refused(world):
    """An `Any` payload for a server plugin: the proxy cannot tell what it reads."""
    proxy, table = world
    rel = relations_pb2.Relation()
    rel.extension.Pack(_read(table))
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(root=rel),
    )
    _refused_for_admins(lambda: _execute(proxy, request), "relation:extension")


def test_an_admins_pipeline_and_external_commands_are_refused(world):
    proxy, table = world
    pipeline = commands_pb2.Command()
    pipeline.pipeline_command.define_sql_graph_elements.sql_text = f"CREATE MATERIALIZED VIEW m AS SELECT * FROM {table}"
    _refused_for_admins(lambda: _run_command(proxy, pipeline), "command:pipeline_command")
    external = commands_pb2.Command()
    external.execute_external_command.runner = "jdbc"
    external.execute_external_command.command = "SELECT 1"
    _refused_for_admins(lambda: _run_command(proxy, external), "command:execute_external_command")
