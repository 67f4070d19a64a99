"""Streaming queries a policy change concerns are stopped (proxy/rowgate/pipeline/operations/stale_streams.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.operations.stale_streams import StaleStreams
from rowgate.policy.snapshot import PolicySnapshot
from tests.unit.pipeline.fake_call import FakeCall
from tests.unit.rewrite.fakes import policy

ORDERS = "spark_catalog.sales.orders"
OPEN = PolicySnapshot.build(1, [policy("sales.other", "x", ("allUsers",), "TRUE")])
PROTECTED = PolicySnapshot.build(2, [*OPEN.all(), policy("sales.orders", "eu", ("allUsers",), "region = 'eu'")])


class Policies:
    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.listeners = []

    def on_installed(self, listener):
        self.listeners.append(listener)

    def install(self, snapshot):
        self.snapshot = snapshot
        for listener in self.listeners:
            listener(snapshot)


class Upstream:
    """Records the stops rowgate sends; answers them with nothing."""

    extra_metadata = ()

    def __init__(self):
        self.sent: list[base_pb2.ExecutePlanRequest] = []

    def raw(self, name):
        assert name == "ExecutePlan"

        def send(data, metadata=None, timeout=None):
            self.sent.append(base_pb2.ExecutePlanRequest.FromString(data))

            async def nothing():
                return
                yield

            return nothing()

        return send


def command(kind: str) -> base_pb2.ExecutePlanRequest:
    request = base_pb2.ExecutePlanRequest(session_id="s1", user_context=base_pb2.UserContext(user_id="user:ann@x"))
    if kind == "start":
        request.plan.command.write_stream_operation_start.input.read.named_table.unparsed_identifier = "sales.orders"
    else:
        request.plan.command.streaming_query_command.query_id.id = "q1"
        request.plan.command.streaming_query_command.stop = True
    return request


def call(request, snapshot):
    return FakeCall(
        request=request,
        session_id=request.session_id,
        facts=SimpleNamespace(tables=(ORDERS,), policy_snapshot=snapshot),
    )


def start_answer() -> bytes:
    response = base_pb2.ExecutePlanResponse(session_id="s1")
    response.write_stream_operation_start_result.query_id.id = "q1"
    response.write_stream_operation_start_result.query_id.run_id = "r1"
    return response.SerializeToString()


def scenario(*changes, stop_first=False):
    """Starts query q1 over sales.orders under OPEN, then installs `changes`; the stops sent."""
    policies, upstream = Policies(OPEN), Upstream()
    stale = StaleStreams(policies, upstream)

    async def run():
        started = call(command("start"), OPEN)
        await stale.step().run(started)
        started.response_hook(start_answer())
        if stop_first:
            await stale.step().run(call(command("stop"), OPEN))
        for snapshot in changes:
            policies.install(snapshot)
        for _ in range(10):  # the stops run on this loop
            await asyncio.sleep(0)
        return stale.running()

    left = asyncio.run(run())
    return upstream.sent, left


def test_a_stream_over_a_table_protected_later_is_stopped_in_its_session():
    sent, left = scenario(PROTECTED)
    assert len(sent) == 1 and left == 0
    stop = sent[0].plan.command.streaming_query_command
    assert stop.stop and (stop.query_id.id, stop.query_id.run_id) == ("q1", "r1")
    assert sent[0].session_id == "s1" and sent[0].user_context.user_id == "user:ann@x"


def test_a_change_to_other_tables_leaves_it_running():
    other = PolicySnapshot.build(3, [policy("sales.other", "x", ("allUsers",), "FALSE")])
    sent, left = scenario(other, OPEN)
    assert sent == [] and left == 1


def test_a_stream_its_owner_stopped_is_forgotten():
    sent, left = scenario(PROTECTED, stop_first=True)
    assert sent == [] and left == 0
