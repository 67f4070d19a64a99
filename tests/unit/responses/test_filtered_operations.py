"""Filtered operations: their reattaches are marked and redacted like their ExecutePlan."""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.filtered_operations import FilteredOperations
from rowgate.responses.row_filter_metrics import METRIC_NAME, METRIC_OBJECT, has_field, mark_row_filter_applied
from rowgate.transport.methods import METHODS

SECRETS = ErrorSecrets(frozenset({"apac"}))
CTX = base_pb2.UserContext(user_id="user:ann@example.com")


def call(name, request, notes=None):
    c = Call(method=METHODS[name], caller=Caller(principal="user:ann@example.com"), request=request, upstream=None)
    c.notes.update(notes or {})
    return c


def reattach(operation="op"):
    return call("ReattachExecute", base_pb2.ReattachExecuteRequest(session_id="s", operation_id=operation, user_context=CTX))


def test_reattaches_of_a_filtered_operation_are_marked_and_redacted():
    ops = FilteredOperations()

    async def scenario():
        execute = call(
            "ExecutePlan",
            base_pb2.ExecutePlanRequest(session_id="s", operation_id="op", user_context=CTX),
            {"row_filter_applied": True, "error_secrets": SECRETS},
        )
        await ops.step(execute)
        assert execute.response_hook is mark_row_filter_applied
        again = reattach()
        await ops.step(again)
        assert again.notes == {"error_secrets": SECRETS, "row_filter_applied": True}
        assert again.response_hook is mark_row_filter_applied
        other = reattach("op2")
        await ops.step(other)
        assert other.notes == {} and other.response_hook is None
        done = base_pb2.ReleaseExecuteRequest(session_id="s", operation_id="op", user_context=CTX)
        done.release_all.SetInParent()
        await ops.step(call("ReleaseExecute", done))
        late = reattach()
        await ops.step(late)
        assert late.notes == {}

    asyncio.run(scenario())


def test_an_unfiltered_or_admin_operation():
    ops = FilteredOperations()

    async def scenario():
        plain = call("ExecutePlan", base_pb2.ExecutePlanRequest(session_id="s", operation_id="a", user_context=CTX), {"row_filter_applied": False})
        await ops.step(plain)
        assert plain.response_hook is None
        admin = call("ExecutePlan", base_pb2.ExecutePlanRequest(session_id="s", operation_id="b", user_context=CTX), {"row_filter_applied": True})
        await ops.step(admin)
        r_a, r_b = reattach("a"), reattach("b")
        await ops.step(r_a)
        await ops.step(r_b)
        assert r_a.notes == {} and r_b.notes == {"row_filter_applied": True}  # admins: marked, not redacted

    asyncio.run(scenario())


def metrics_response() -> base_pb2.ExecutePlanResponse:
    r = base_pb2.ExecutePlanResponse(session_id="s", operation_id="op", response_id="r9", server_side_session_id="x")
    root = r.metrics.metrics.add(name="Project", plan_id=0, parent=0)
    root.execution_metrics["numOutputRows"].value = 2
    r.metrics.metrics.add(name="LocalTableScan", plan_id=3, parent=0)
    return r


def test_the_metrics_message_gets_the_row_filter_metric_and_keeps_the_rest():
    raw = metrics_response().SerializeToString()
    marked = base_pb2.ExecutePlanResponse.FromString(mark_row_filter_applied(raw))
    assert marked.response_id == "r9" and [m.name for m in marked.metrics.metrics][:2] == ["Project", "LocalTableScan"]
    ours = [m for m in marked.metrics.metrics if m.name == METRIC_OBJECT]
    assert len(ours) == 1 and ours[0].execution_metrics[METRIC_NAME].value == 1
    assert ours[0].parent == 0  # below Spark's root: pyspark wants exactly one root
    from pyspark.sql.metrics import CollectedMetrics, MetricValue, PlanMetrics

    plan = [
        PlanMetrics(m.name, m.plan_id, m.parent, [MetricValue(k, v.value, v.metric_type) for k, v in m.execution_metrics.items()])
        for m in marked.metrics.metrics
    ]
    assert METRIC_OBJECT in CollectedMetrics(plan).toText()
    assert mark_row_filter_applied(marked.SerializeToString()) == marked.SerializeToString()  # once only


@pytest.mark.parametrize(
    "response",
    [
        base_pb2.ExecutePlanResponse(session_id="s", arrow_batch=base_pb2.ExecutePlanResponse.ArrowBatch(data=b"\x04" * 300_000, row_count=7)),
        base_pb2.ExecutePlanResponse(session_id="s", result_complete=base_pb2.ExecutePlanResponse.ResultComplete()),
    ],
    ids=["arrow", "complete"],
)
def test_other_messages_pass_as_the_same_bytes(response):
    raw = response.SerializeToString()
    assert mark_row_filter_applied(raw) is raw


def test_the_wire_scanner_finds_fields_after_a_large_one_and_survives_garbage():
    r = metrics_response()
    r.arrow_batch.data = b"\x00" * 200_000
    raw = r.SerializeToString()
    assert has_field(raw, 4) and has_field(raw, 2) and not has_field(raw, 7)
    assert not has_field(b"\xff\xff\xff", 4) and not has_field(raw[:50], 4)
