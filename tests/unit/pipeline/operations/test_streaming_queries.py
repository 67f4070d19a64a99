"""Which streaming queries are over protected tables: learned from Spark's answers, per
session, unknown ids failing closed while any table is protected."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from rowgate.pipeline.operations.streaming_queries import UNKNOWN_NOTE, StreamingQueries
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.policy.snapshot import PolicySnapshot
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.streaming_redaction import WITHHELD
from tests.unit.pipeline.fake_call import FakeCall
from tests.unit.rewrite.fakes import policy

PROTECTED = PolicySnapshot.build(7, [policy("sales.orders", "eu", ("allUsers",), "region = 'zz-secret'")])
NOTHING = PolicySnapshot.build(1, [])
PROGRESS = json.dumps({"id": "q1", "numInputRows": 23, "sources": [{"numInputRows": 23}], "sink": {"numOutputRows": 2}})


class Policies:
    def __init__(self, snapshot):
        self.snapshot = snapshot

    def fresh_snapshot(self):
        return self.snapshot


def queries(snapshot=PROTECTED, sessions=None) -> StreamingQueries:
    return StreamingQueries(Policies(snapshot), sessions)


class Facts(SimpleNamespace):
    pass


def call(
    command: commands_pb2.Command | None = None,
    *,
    method="ExecutePlan",
    user="user:ann@x",
    session="s1",
    op="op1",
    filtered=False,
    request=None,
):
    if request is None:
        request = base_pb2.ExecutePlanRequest(
            session_id=session, operation_id=op, user_context=base_pb2.UserContext(user_id=user)
        )
        request.plan.command.CopyFrom(command)
    facts = Facts(
        row_filter_applied=filtered,
        error_secrets=ErrorSecrets(frozenset({"zz-secret"})) if filtered else None,
        tables=("spark_catalog.sales.orders",),
    )
    return FakeCall(
        method=SimpleNamespace(name=method),
        caller=SimpleNamespace(principal=user),
        request=request,
        raw_request=request.SerializeToString(),
        facts=facts,
        user_id=user,
        session_id=session,
    )


def start(table="sales.orders") -> commands_pb2.Command:
    cmd = commands_pb2.Command()
    cmd.write_stream_operation_start.input.read.named_table.unparsed_identifier = table
    cmd.write_stream_operation_start.input.read.is_streaming = True
    return cmd


def ask(**what) -> commands_pb2.Command:
    cmd = commands_pb2.Command()
    cmd.streaming_query_command.query_id.id = "q1"
    cmd.streaming_query_command.query_id.run_id = "r1"
    for key, value in what.items():
        setattr(cmd.streaming_query_command, key, value)
    return cmd


def started(query_id="q1") -> bytes:
    result = commands_pb2.WriteStreamOperationStartResult(
        query_id=commands_pb2.StreamingQueryInstanceId(id=query_id, run_id="r1")
    )
    return base_pb2.ExecutePlanResponse(write_stream_operation_start_result=result).SerializeToString()


def progress_answer(query_id="q1") -> bytes:
    result = commands_pb2.StreamingQueryCommandResult(query_id=commands_pb2.StreamingQueryInstanceId(id=query_id))
    result.recent_progress.recent_progress_json.append(PROGRESS)
    return base_pb2.ExecutePlanResponse(streaming_query_command_result=result).SerializeToString()


def run(memory: StreamingQueries, c) -> None:
    judge_commands, judge_continuations = memory.steps()
    step = judge_commands if c.method.name == "ExecutePlan" else judge_continuations
    asyncio.run(getattr(step, "run", step)(c))


def relayed_progress(c, raw=None) -> dict:
    out = base_pb2.ExecutePlanResponse.FromString(c.response_hook(raw or progress_answer()))
    return json.loads(out.streaming_query_command_result.recent_progress.recent_progress_json[0])


def test_a_filtered_start_is_recorded_from_sparks_answer_and_its_progress_redacted():
    memory = queries()
    begin = call(start(), filtered=True)
    run(memory, begin)
    assert memory.verdict(("user:ann@x", "s1"), "q1", None) is None  # nothing before Spark answered
    begin.response_hook(started())
    assert memory.verdict(("user:ann@x", "s1"), "q1", None) is not None
    later = call(ask(last_progress=True), op="op2")
    run(memory, later)
    assert relayed_progress(later)["numInputRows"] == WITHHELD
    assert later.facts.error_secrets is not None  # awaitTermination's errors are redacted too


def test_an_unfiltered_start_is_known_as_plain_and_relayed():
    memory = queries()
    begin = call(start("sales.mine"))
    run(memory, begin)
    begin.response_hook(started())
    later = call(ask(last_progress=True), op="op2")
    run(memory, later)
    assert relayed_progress(later)["numInputRows"] == 23
    assert later.facts.error_secrets is None


def test_unknown_ids_fail_closed_while_any_table_is_protected():
    memory = queries()
    later = call(ask(last_progress=True))
    run(memory, later)
    assert relayed_progress(later)["numInputRows"] == WITHHELD
    assert later.facts.error_secrets is not None and later.facts.error_secrets.found_in("zz-secret")
    explain = call(ask(), op="op3")
    explain.request.plan.command.streaming_query_command.explain.extended = True
    run(memory, explain)
    result = commands_pb2.StreamingQueryCommandResult(
        explain=commands_pb2.StreamingQueryCommandResult.ExplainResult(result="Filter zz-secret")
    )
    out = base_pb2.ExecutePlanResponse.FromString(
        explain.response_hook(base_pb2.ExecutePlanResponse(streaming_query_command_result=result).SerializeToString())
    )
    assert out.streaming_query_command_result.explain.result == UNKNOWN_NOTE


def test_without_protected_tables_nothing_is_withheld():
    memory = queries(NOTHING)
    later = call(ask(last_progress=True))
    run(memory, later)
    assert relayed_progress(later)["numInputRows"] == 23


def test_queries_are_remembered_per_session():
    memory = queries()
    begin = call(start("sales.mine"))
    run(memory, begin)
    begin.response_hook(started())
    other = call(ask(last_progress=True), session="s2", op="op2")  # another session: unknown there
    run(memory, other)
    assert relayed_progress(other)["numInputRows"] == WITHHELD


def test_admins_progress_and_errors_are_redacted_too():
    memory = queries()
    begin = call(start(), user="user:admin@x", filtered=True)
    begin.facts.error_secrets = None  # enforcement sets none for admins
    run(memory, begin)
    begin.response_hook(started())
    later = call(ask(last_progress=True), user="user:admin@x", op="op2")
    run(memory, later)
    assert relayed_progress(later)["numInputRows"] == WITHHELD
    assert later.facts.error_secrets is not None


def test_a_start_answered_on_a_reattach_is_recorded_and_its_continuations_judged():
    memory = queries()
    begin = call(start(), filtered=True)
    run(memory, begin)
    reattach = call(
        method="ReattachExecute",
        request=base_pb2.ReattachExecuteRequest(
            session_id="s1", operation_id="op1", user_context=base_pb2.UserContext(user_id="user:ann@x")
        ),
    )
    run(memory, reattach)
    reattach.response_hook(started())
    assert memory.verdict(("user:ann@x", "s1"), "q1", None) is not None
    assert reattach.facts.error_secrets is not None


def test_a_start_over_a_temp_view_counts_as_protected():
    sessions = SessionRegistry()
    sessions.get(("user:ann@x", "s1")).temp_views.add("v")
    memory = queries(sessions=sessions)
    begin = call(start("V"))  # no filter placed: the view holds it
    run(memory, begin)
    begin.response_hook(started())
    assert memory.verdict(("user:ann@x", "s1"), "q1", None) is not None
    sql = commands_pb2.Command()
    sql.write_stream_operation_start.input.sql.CopyFrom(relations_pb2.SQL(query="SELECT * FROM v WHERE 1 = 1"))
    begin = call(sql, op="op2")
    run(memory, begin)
    begin.response_hook(started("q2"))
    assert memory.verdict(("user:ann@x", "s1"), "q2", None) is not None


def reattach_of(op="op1", user="user:ann@x"):
    request = base_pb2.ReattachExecuteRequest(session_id="s1", operation_id=op, user_context=base_pb2.UserContext(user_id=user))
    return call(method="ReattachExecute", request=request)


def test_reattaches_of_ordinary_operations_are_left_alone():
    memory = queries()
    query = base_pb2.ExecutePlanRequest(
        session_id="s1", operation_id="op7", user_context=base_pb2.UserContext(user_id="user:ann@x")
    )
    query.plan.root.range.end = 3
    run(memory, call(request=query))
    reattach = reattach_of("op7")
    run(memory, reattach)
    assert reattach.response_hook is None and reattach.facts.error_secrets is None


def test_reattaches_of_forgotten_operations_are_judged_by_the_queries_they_name():
    memory = queries()
    reattach = reattach_of("op-nobody-saw")
    run(memory, reattach)
    assert relayed_progress(reattach)["numInputRows"] == WITHHELD


def test_a_long_listener_bus_follows_policy_changes_for_unknown_queries():
    policies = Policies(NOTHING)
    memory = StreamingQueries(policies)
    bus = commands_pb2.Command()
    bus.streaming_query_listener_bus_command.add_listener_bus_listener = True
    listening = call(bus)
    run(memory, listening)
    event = commands_pb2.StreamingQueryListenerEvent(
        event_type=commands_pb2.QUERY_PROGRESS_EVENT, event_json=json.dumps({"progress": json.loads(PROGRESS)})
    )
    raw = base_pb2.ExecutePlanResponse(
        streaming_query_listener_events_result=commands_pb2.StreamingQueryListenerEventsResult(events=[event])
    ).SerializeToString()
    assert listening.response_hook(raw) == raw  # no table protected yet: relayed
    policies.snapshot = PROTECTED  # a policy appears while the bus runs
    out = base_pb2.ExecutePlanResponse.FromString(listening.response_hook(raw))
    progress = json.loads(out.streaming_query_listener_events_result.events[0].event_json)["progress"]
    assert progress["numInputRows"] == WITHHELD
