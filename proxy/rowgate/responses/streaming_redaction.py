"""What the answers about a streaming query may say when its plan reads protected tables.

A streaming query is started once (`write_stream_operation_start`, whose plan the proxy
filters like any read) and then asked about on separate calls: `query.lastProgress`,
`recentProgress`, `status`, `explain()`, `exception()`, `awaitTermination()`, and the events
a client-side listener receives (`spark.streams.addListener`, one long ExecutePlan stream of
the session's listener bus). Those answers describe the running query, and parts of them are
computed below the policy filter:

| answer | computed over | relayed for a query over protected tables |
|---|---|---|
| progress `numInputRows`, `inputRowsPerSecond`, `processedRowsPerSecond` (top level and per source) | the source's rows before the policy filter (with pushed predicates: row groups the statistics kept) | `-1` (withheld) |
| progress `sources[].metrics` | the source (e.g. offsets behind latest) | emptied |
| progress `sink` (`numOutputRows`), `stateOperators`, `eventTime`, `observedMetrics` | rows after the filter (every operator of the caller sits above the policy filter, which is placed at the read) | as is |
| progress ids, `batchId`, offsets, `durationMs`, `status` | micro-batches and time, not rows | as is (see the README's limitations) |
| `explain()` | the plan, policy predicates included | a note that a row filter applies, for admins too |
| `exception()`, listener `QueryTerminatedEvent.exception`, errors of `awaitTermination` | Spark's message quotes the logical plan and may quote values | the exception's Java class, error class and SQLSTATE only (error_redaction.withheld_message), for admins too; no stack trace |

Messages are relayed as raw bytes unless they carry one of these results (read from the
top-level field numbers), like proxy/rowgate/responses/row_filter_metrics.py does.

>>> out = redact_progress('{"numInputRows": 30, "sources": [{"numInputRows": 30, "metrics": {"x": "1"}}], "sink": {"numOutputRows": 2}}')
>>> json.loads(out)["sources"][0]["numInputRows"], json.loads(out)["sources"][0]["metrics"], json.loads(out)["sink"]
(-1, {}, {'numOutputRows': 2})
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.connect.proto import base_pb2, commands_pb2

from rowgate.responses.error_redaction import ErrorSecrets, withheld_message
from rowgate.responses.row_filter_metrics import top_fields

_FIELDS = base_pb2.ExecutePlanResponse.DESCRIPTOR.fields_by_name
START_RESULT = _FIELDS["write_stream_operation_start_result"].number
QUERY_RESULT = _FIELDS["streaming_query_command_result"].number
LISTENER_EVENTS = _FIELDS["streaming_query_listener_events_result"].number
_DECODED = frozenset({START_RESULT, QUERY_RESULT, LISTENER_EVENTS})
WITHHELD = -1  # what a withheld count or rate reads as
# Counts and rates Spark takes at the source, below the policy filter.
_SOURCE_NUMBERS = ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")
_JAVA_CLASS = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")
_PROGRESS_EVENT = 1
_TERMINATED_EVENT = 2


@dataclass(frozen=True)
class Protected:
    """How the answers about one query over protected tables are relayed.

    `secrets`: what its error messages must not print (the errors of its operations are
    rebuilt by the error allow list, for admins too); `note`: the text `explain()` gets
    instead of the plan.
    """

    secrets: ErrorSecrets | None
    note: str


# query id -> Protected, or None when the query reads no protected table
Verdict = Callable[[str], Protected | None]


def redact_progress(text: str) -> str:
    """A StreamingQueryProgress JSON without the numbers counted before the filter."""
    try:
        progress = json.loads(text)
    except ValueError:
        return "{}"
    if not isinstance(progress, dict):
        return "{}"
    for key in _SOURCE_NUMBERS:
        if key in progress:
            progress[key] = WITHHELD
    for source in progress.get("sources") or ():
        if isinstance(source, dict):
            for key in _SOURCE_NUMBERS:
                source[key] = WITHHELD
            source["metrics"] = {}
    return json.dumps(progress)


def redact_exception_text(text: str) -> str:
    """`<ExceptionClass>: <message>` with the message `withheld_message`'s: the error class
    and SQLSTATE only (pyspark splits the Java class off at the first `: `, so it stays
    when it is a class name).

    >>> redact_exception_text("org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] boom 42 SQLSTATE: XXKST")
    "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] rowgate withheld Spark's message for a read of a protected table (error class STREAM_FAILED). SQLSTATE: XXKST"
    """
    head, sep, message = text.partition(": ")
    if not sep or not _JAVA_CLASS.fullmatch(head):
        return withheld_message(text)
    return head + sep + withheld_message(message)


def started_query(raw: bytes) -> str | None:
    """The query id Spark answered a `write_stream_operation_start` with, if this is it."""
    instance = started_instance(raw)
    return instance[0] if instance is not None else None


def started_instance(raw: bytes) -> tuple[str, str] | None:
    """(query id, run id) of the query Spark started, if `raw` is that answer."""
    fields = top_fields(raw)
    if fields is not None and START_RESULT not in fields:
        return None
    response = base_pb2.ExecutePlanResponse.FromString(raw)
    if not response.HasField("write_stream_operation_start_result"):
        return None
    started = response.write_stream_operation_start_result.query_id
    return (started.id, started.run_id) if started.id else None


def relay_streaming(raw: bytes, verdict: Verdict, query_id: str | None = None) -> bytes:
    """One response as it may reach the caller. `query_id` is the query a
    `streaming_query_command` asked about (its result is judged by it); listener events are
    judged by the query each names."""
    fields = top_fields(raw)
    if fields is not None and not fields & _DECODED:
        return raw
    response = base_pb2.ExecutePlanResponse.FromString(raw)
    changed = False
    if response.HasField("streaming_query_command_result"):
        result = response.streaming_query_command_result
        protected = verdict(query_id or result.query_id.id)
        if protected is not None:
            _redact_query_result(result, protected)
            changed = True
    if response.HasField("streaming_query_listener_events_result"):
        for event in response.streaming_query_listener_events_result.events:
            changed |= _redact_event(event, verdict)
    return response.SerializeToString() if changed else raw


def _redact_query_result(result: commands_pb2.StreamingQueryCommandResult, protected: Protected) -> None:
    if result.HasField("recent_progress"):
        progress = [redact_progress(p) for p in result.recent_progress.recent_progress_json]
        del result.recent_progress.recent_progress_json[:]
        result.recent_progress.recent_progress_json.extend(progress)
    if result.HasField("explain"):
        result.explain.result = protected.note
    if result.HasField("exception"):  # by allow list, whatever the caller
        exception = result.exception
        if exception.HasField("exception_message"):
            exception.exception_message = redact_exception_text(exception.exception_message)
        exception.ClearField("stack_trace")


def _redact_event(event: commands_pb2.StreamingQueryListenerEvent, verdict: Verdict) -> bool:
    if event.event_type not in (_PROGRESS_EVENT, _TERMINATED_EVENT):
        return False  # started and idle events: ids, names and times
    try:
        body = json.loads(event.event_json)
    except ValueError:
        event.event_json = "{}"
        return True
    if not isinstance(body, dict):
        event.event_json = "{}"
        return True
    if event.event_type == _PROGRESS_EVENT:
        progress = body.get("progress")
        query_id = progress.get("id", "") if isinstance(progress, dict) else ""
        protected = verdict(str(query_id))
        if protected is None:
            return False
        body["progress"] = json.loads(redact_progress(json.dumps(progress)))
    else:
        protected = verdict(str(body.get("id", "")))
        if protected is None or not isinstance(body.get("exception"), str):
            return False
        body["exception"] = redact_exception_text(body["exception"])
    event.event_json = json.dumps(body)
    return True
