"""Answers about streaming queries over protected tables: counts before the filter, the plan
and error text are withheld; what is computed over the caller's rows stays."""

from __future__ import annotations

import json

from pyspark.sql.connect.proto import base_pb2, commands_pb2

from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.streaming_redaction import (
    WITHHELD,
    Protected,
    redact_progress,
    relay_streaming,
    started_query,
)

SECRET = "zz-team-secret"
PROTECTED = Protected(ErrorSecrets(frozenset({SECRET})), "== rowgate == a row filter applies")
ADMIN = Protected(None, "== rowgate == a row filter applies")
PROGRESS = {
    "id": "q1",
    "runId": "r1",
    "batchId": 3,
    "numInputRows": 23,
    "inputRowsPerSecond": 4.5,
    "processedRowsPerSecond": 9.0,
    "stateOperators": [{"operatorName": "agg", "numRowsTotal": 2}],
    "sources": [
        {
            "description": "FileStreamSource[file:/wh/t]",
            "endOffset": {"logOffset": 3},
            "numInputRows": 23,
            "inputRowsPerSecond": 4.5,
            "processedRowsPerSecond": 9.0,
            "metrics": {"avgOffsetsBehindLatest": "10"},
        }
    ],
    "sink": {"description": "MemorySink", "numOutputRows": 2},
    "observedMetrics": {"mine": {"n": 2}},
}
FAILURE = (
    "org.apache.spark.sql.streaming.StreamingQueryException: [DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012\n"
    f"== SQL ==\nSELECT * FROM t WHERE owner = '{SECRET}'\n=== Streaming Query ===\nLogical Plan:\nFilter (owner = {SECRET})"
)


def judge(verdicts):
    return lambda query_id: verdicts.get(query_id)


def response(**fields) -> bytes:
    return base_pb2.ExecutePlanResponse(session_id="s", operation_id="o", **fields).SerializeToString()


def query_result(**fields) -> bytes:
    result = commands_pb2.StreamingQueryCommandResult(query_id=commands_pb2.StreamingQueryInstanceId(id="q1"), **fields)
    return response(streaming_query_command_result=result)


def test_progress_keeps_the_callers_numbers_and_withholds_the_sources():
    out = json.loads(redact_progress(json.dumps(PROGRESS)))
    assert out["numInputRows"] == out["inputRowsPerSecond"] == out["processedRowsPerSecond"] == WITHHELD
    source = out["sources"][0]
    assert source["numInputRows"] == source["inputRowsPerSecond"] == source["processedRowsPerSecond"] == WITHHELD
    assert source["metrics"] == {}
    assert out["sink"] == PROGRESS["sink"] and out["stateOperators"] == PROGRESS["stateOperators"]
    assert out["observedMetrics"] == PROGRESS["observedMetrics"] and out["batchId"] == 3
    assert redact_progress("not json") == "{}"


def test_progress_of_a_protected_query_is_redacted_and_of_a_plain_one_relayed():
    raw = query_result(
        recent_progress=commands_pb2.StreamingQueryCommandResult.RecentProgressResult(recent_progress_json=[json.dumps(PROGRESS)])
    )
    out = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q1": PROTECTED}), "q1"))
    (progress,) = out.streaming_query_command_result.recent_progress.recent_progress_json
    assert json.loads(progress)["sources"][0]["numInputRows"] == WITHHELD
    assert relay_streaming(raw, judge({}), "q1") == raw  # a query over no protected table


def test_the_request_names_the_query_a_result_is_judged_by():
    raw = query_result(explain=commands_pb2.StreamingQueryCommandResult.ExplainResult(result=f"Filter (owner = {SECRET})"))
    # The result claims q1 (plain); the request asked about q2 (protected): the request wins.
    out = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q2": PROTECTED}), "q2"))
    assert out.streaming_query_command_result.explain.result == PROTECTED.note


def test_explain_is_a_note_for_admins_too():
    raw = query_result(explain=commands_pb2.StreamingQueryCommandResult.ExplainResult(result=f"Filter (owner = {SECRET})"))
    out = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q1": ADMIN})))
    assert SECRET not in str(out) and out.streaming_query_command_result.explain.result == ADMIN.note


def test_exception_keeps_its_classes_only_for_admins_too():
    exc = commands_pb2.StreamingQueryCommandResult.ExceptionResult(
        exception_message=FAILURE, error_class="DIVIDE_BY_ZERO", stack_trace="at x"
    )
    raw = query_result(exception=exc)
    out = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q1": PROTECTED}))).streaming_query_command_result
    assert SECRET not in str(out) and not out.exception.HasField("stack_trace")
    # pyspark splits the JVM class off at the first ": "
    head, message = out.exception.exception_message.split(": ", 1)
    assert head == FAILURE.split(": ", 1)[0]
    assert message.startswith("[DIVIDE_BY_ZERO] rowgate withheld") and "Division by zero" not in message
    assert out.exception.error_class == "DIVIDE_BY_ZERO"
    admin = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q1": ADMIN}))).streaming_query_command_result
    assert admin.exception.exception_message == out.exception.exception_message


def event(kind: int, body: dict) -> commands_pb2.StreamingQueryListenerEvent:
    return commands_pb2.StreamingQueryListenerEvent(event_type=kind, event_json=json.dumps(body))


def test_listener_events_are_judged_by_the_query_each_names():
    plain = dict(PROGRESS, id="q9")
    events = commands_pb2.StreamingQueryListenerEventsResult(
        events=[
            event(commands_pb2.QUERY_PROGRESS_EVENT, {"progress": PROGRESS}),
            event(commands_pb2.QUERY_PROGRESS_EVENT, {"progress": plain}),
            event(
                commands_pb2.QUERY_TERMINATED_EVENT,
                {"id": "q1", "runId": "r1", "exception": FAILURE, "errorClassOnException": "DIVIDE_BY_ZERO"},
            ),
            event(commands_pb2.QUERY_IDLE_EVENT, {"id": "q1", "runId": "r1", "timestamp": "t"}),
        ]
    )
    raw = response(streaming_query_listener_events_result=events)
    out = base_pb2.ExecutePlanResponse.FromString(relay_streaming(raw, judge({"q1": PROTECTED})))
    progress, other, terminated, idle = (json.loads(e.event_json) for e in out.streaming_query_listener_events_result.events)
    assert progress["progress"]["numInputRows"] == WITHHELD and progress["progress"]["sink"]["numOutputRows"] == 2
    assert other["progress"]["numInputRows"] == 23  # a query over no protected table
    assert SECRET not in terminated["exception"] and terminated["errorClassOnException"] == "DIVIDE_BY_ZERO"
    assert idle == {"id": "q1", "runId": "r1", "timestamp": "t"}


def test_the_started_query_is_read_from_sparks_answer_only():
    start = commands_pb2.WriteStreamOperationStartResult(query_id=commands_pb2.StreamingQueryInstanceId(id="q1", run_id="r1"))
    assert started_query(response(write_stream_operation_start_result=start)) == "q1"
    assert started_query(response(result_complete=base_pb2.ExecutePlanResponse.ResultComplete())) is None


def test_other_messages_pass_as_the_same_bytes():
    raw = response(arrow_batch=base_pb2.ExecutePlanResponse.ArrowBatch(row_count=1, data=b"\x00" * 64))
    assert relay_streaming(raw, judge({"": PROTECTED})) is raw
