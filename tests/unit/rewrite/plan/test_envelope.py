"""Unknown fields around a request's plans (rewrite/plan/envelope.py)."""

from google.protobuf.unknown_fields import UnknownFieldSet
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.rewrite.plan.envelope import unknown_envelope_field


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _plan() -> base_pb2.Plan:
    return base_pb2.Plan(root=relations_pb2.Relation(range=relations_pb2.Range(end=3)))


def test_known_requests_pass():
    request = base_pb2.ExecutePlanRequest(session_id="s", plan=_plan())
    request.request_options.add().reattach_options.reattachable = True
    assert unknown_envelope_field(request) is None
    analyze = base_pb2.AnalyzePlanRequest(session_id="s")
    analyze.same_semantics.target_plan.CopyFrom(_plan())
    analyze.same_semantics.other_plan.CopyFrom(_plan())
    assert unknown_envelope_field(analyze) is None


def test_unknown_fields_anywhere_around_the_plan_are_named():
    plan = base_pb2.Plan.FromString(_plan().SerializeToString() + _field(9, b"\x08\x01"))
    request = base_pb2.ExecutePlanRequest(session_id="s", plan=plan)
    assert unknown_envelope_field(request) == "field 9 of spark.connect.Plan (at plan)"
    schema = base_pb2.AnalyzePlanRequest.Schema.FromString(
        base_pb2.AnalyzePlanRequest.Schema(plan=_plan()).SerializeToString() + _field(7, b"")
    )
    analyze = base_pb2.AnalyzePlanRequest(session_id="s", schema=schema)
    assert unknown_envelope_field(analyze) == "field 7 of spark.connect.AnalyzePlanRequest.Schema (at schema)"


def test_relations_are_left_to_the_walker():
    root = relations_pb2.Relation.FromString(_plan().root.SerializeToString() + _field(9999, b""))
    assert len(UnknownFieldSet(root)) == 1
    request = base_pb2.ExecutePlanRequest(session_id="s", plan=base_pb2.Plan(root=root))
    assert unknown_envelope_field(request) is None
