"""While a table is protected, nobody's plan is forwarded unanalysed, an admin's included.

A newer client's plan can hold fields a 4.1 proxy does not know: 4.2's `nearestByJoin` is
a relation whose inputs read tables. Forwarded as they are, they would reach a server that
knows them without the proxy's filter. Admins' reads are filtered like anyone's, so such a
plan is refused for them too, with a message naming the field
(proxy/rowgate/rewrite/plan/walker.py).
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from tests.conftest import remote_url, unique

pytestmark = pytest.mark.spark

ADMIN = "user:admin@example.com"


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    table = unique("unknown_fields")
    admin.sql(f"CREATE TABLE {table} (id INT, owner STRING) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (1, 'admin'), (2, 'other')")
    admin.sql(f"CREATE ROW ACCESS POLICY own ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (owner = 'admin')")
    return proxy, table


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
    # A Relation whose only content is a rel_type member 4.1 does not have (4.2 adds some).
    rel = relations_pb2.Relation.FromString(_field(250, _read(table).SerializeToString()))
    with pytest.raises(grpc.RpcError) as info:
        _rows(proxy, rel)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field 250 of spark.connect.Relation" in info.value.details()
