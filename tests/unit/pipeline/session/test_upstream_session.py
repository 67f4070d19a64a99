"""The proxy's memory of a session is bound to the upstream session it learnt it from."""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.pipeline.session.upstream import UpstreamSessions
from rowgate.upstream.methods import METHODS

USER, SESSION = "user:ann@example.com", "00000000-0000-4000-8000-000000000001"
KEY = (USER, SESSION)


def call(name: str, request) -> Call:
    request.session_id = SESSION
    request.user_context.user_id = USER
    return Call(method=METHODS[name], caller=Caller(principal=USER), request=request, upstream=None)


def setup():
    sessions = SessionRegistry()
    return sessions, UpstreamSessions(sessions)


def test_every_forwarded_request_carries_the_server_side_id_the_proxy_saw():
    sessions, steps = setup()

    async def scenario():
        first = call("ExecutePlan", base_pb2.ExecutePlanRequest())
        await steps.step(first)
        assert not first.request.HasField("client_observed_server_side_session_id")
        first.first_response(base_pb2.ExecutePlanResponse(server_side_session_id="srv-1").SerializeToString())
        # whatever the client claims, the proxy's own observation goes upstream
        for name, request in (
            ("ExecutePlan", base_pb2.ExecutePlanRequest(client_observed_server_side_session_id="srv-other")),
            ("AnalyzePlan", base_pb2.AnalyzePlanRequest()),
            ("Config", base_pb2.ConfigRequest()),
            ("ReattachExecute", base_pb2.ReattachExecuteRequest()),
        ):
            c = call(name, request)
            await steps.step(c)
            assert c.request.client_observed_server_side_session_id == "srv-1", name

    asyncio.run(scenario())


@pytest.mark.parametrize("error_class", ["INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_CLOSED"])
def test_a_session_the_upstream_no_longer_has_is_forgotten(error_class):
    sessions, steps = setup()

    async def scenario():
        state = sessions.get(KEY)
        state.current_schema, state.position_known = "mydb", True
        state.temp_views.add("orders")
        steps.learned(KEY, "srv-1")
        c = call("ExecutePlan", base_pb2.ExecutePlanRequest())
        await steps.step(c)
        c.upstream_error(f"[{error_class}] The handle is invalid. SQLSTATE: HY000")
        assert steps.server_side_id(KEY) is None
        fresh = sessions.get(KEY)
        assert fresh is not state and not fresh.position_known and not fresh.temp_views and not fresh.prepared

    asyncio.run(scenario())


def test_other_errors_keep_the_session():
    sessions, steps = setup()
    state = sessions.get(KEY)
    steps.learned(KEY, "srv-1")

    async def scenario():
        c = call("ExecutePlan", base_pb2.ExecutePlanRequest())
        await steps.step(c)
        c.upstream_error("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012")

    asyncio.run(scenario())
    assert sessions.get(KEY) is state and steps.server_side_id(KEY) == "srv-1"


def test_an_answer_from_another_upstream_session_drops_the_memory():
    sessions, steps = setup()
    state = sessions.get(KEY)
    steps.learned(KEY, "srv-1")
    steps.learned(KEY, "srv-1")
    assert sessions.get(KEY) is state
    steps.learned(KEY, "srv-2")
    assert sessions.get(KEY) is not state and steps.server_side_id(KEY) == "srv-2"


@pytest.mark.parametrize("raw", [b"\xff\xff\xff", base_pb2.ConfigResponse(session_id=SESSION).SerializeToString()])
def test_an_answer_without_a_server_side_id_teaches_nothing(raw):
    sessions, steps = setup()

    async def scenario():
        c = call("Config", base_pb2.ConfigRequest())
        await steps.step(c)
        c.first_response(raw)

    asyncio.run(scenario())
    assert steps.server_side_id(KEY) is None


def test_release_session_has_no_observed_id_and_is_left_alone():
    sessions, steps = setup()
    c = Call(
        method=METHODS["ReleaseSession"],
        caller=Caller(principal=USER),
        request=base_pb2.ReleaseSessionRequest(session_id=SESSION),
        upstream=None,
    )
    assert asyncio.run(steps.step(c)) is None and c.upstream_error is None
