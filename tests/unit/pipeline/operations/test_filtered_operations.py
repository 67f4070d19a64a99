"""Filtered operations: their reattaches are marked and redacted like their ExecutePlan, and
no metric Spark computed over unfiltered rows reaches the caller."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call, Facts, Refusal
from rowgate.pipeline.operations.filtered import UNKNOWN_SECRETS, FilteredOperations, withhold_spark_metrics
from rowgate.pipeline.operations.steps import filtered_operations_steps
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.row_filter_metrics import METRIC_NAME, METRIC_OBJECT, has_field, relay_filtered
from rowgate.responses.sql_echo import EchoUnknown
from rowgate.upstream.methods import METHODS

SECRETS = ErrorSecrets(frozenset({"apac"}))
CTX = base_pb2.UserContext(user_id="user:ann@example.com")


def call(name, request, facts=None):
    c = Call(method=METHODS[name], caller=Caller(principal="user:ann@example.com"), request=request, upstream=None)
    c.facts = Facts(**(facts or {}))
    return c


async def step(ops: FilteredOperations, c: Call) -> None:
    """What the pipeline runs for `c`: the remembering step for an ExecutePlan, the other one after."""
    remember, cont = filtered_operations_steps(ops)
    assert await (remember if c.method.name == "ExecutePlan" else cont).run(c) is None


def is_filtering(hook) -> bool:
    """The hook of a filtered result: only the RowLevelSecurity metric is left."""
    if hook is None:
        return False
    out = base_pb2.ExecutePlanResponse.FromString(hook(metrics_response().SerializeToString()))
    return [m.name for m in out.metrics.metrics] == [METRIC_OBJECT]


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
        await step(ops, execute)
        assert is_filtering(execute.response_hook)
        again = reattach()
        await step(ops, again)
        assert again.facts == Facts(error_secrets=SECRETS, row_filter_applied=True)
        assert is_filtering(again.response_hook)
        other = reattach("op2")  # not remembered: Spark's metrics withheld, no marker, errors cut
        await step(ops, other)
        assert other.facts == Facts(error_secrets=UNKNOWN_SECRETS) and other.response_hook.__wrapped__ is withhold_spark_metrics
        done = base_pb2.ReleaseExecuteRequest(session_id="s", operation_id="op", user_context=CTX)
        done.release_all.SetInParent()
        await step(ops, call("ReleaseExecute", done))
        late = reattach()
        await step(ops, late)
        assert late.facts == Facts(error_secrets=UNKNOWN_SECRETS) and late.response_hook.__wrapped__ is withhold_spark_metrics

    asyncio.run(scenario())


def test_an_unfiltered_or_admin_operation():
    ops = FilteredOperations()

    async def scenario():
        plain = call(
            "ExecutePlan",
            base_pb2.ExecutePlanRequest(session_id="s", operation_id="a", user_context=CTX),
            {"row_filter_applied": False},
        )
        await step(ops, plain)
        assert plain.response_hook is None
        admin = call(
            "ExecutePlan",
            base_pb2.ExecutePlanRequest(session_id="s", operation_id="b", user_context=CTX),
            {"row_filter_applied": True},
        )
        await step(ops, admin)
        r_a, r_b = reattach("a"), reattach("b")
        await step(ops, r_a)
        await step(ops, r_b)
        assert r_a.facts == Facts() and r_b.facts == Facts(row_filter_applied=True)  # admins: marked, not redacted
        assert r_a.response_hook is None  # an unfiltered operation's metrics stay Spark's
        assert is_filtering(r_b.response_hook)  # admins' filtered results are stripped too

    asyncio.run(scenario())


def metrics_response() -> base_pb2.ExecutePlanResponse:
    r = base_pb2.ExecutePlanResponse(session_id="s", operation_id="op", response_id="r9", server_side_session_id="x")
    root = r.metrics.metrics.add(name="Project", plan_id=0, parent=0)
    root.execution_metrics["numOutputRows"].value = 2
    r.metrics.metrics.add(name="LocalTableScan", plan_id=3, parent=0)
    return r


def _plan_metrics(response):
    from pyspark.sql.metrics import CollectedMetrics, MetricValue, PlanMetrics

    plan = [
        PlanMetrics(m.name, m.plan_id, m.parent, [MetricValue(k, v.value, v.metric_type) for k, v in m.execution_metrics.items()])
        for m in response.metrics.metrics
    ]
    return CollectedMetrics(plan).toText() if plan else None


def test_the_metrics_message_holds_only_the_row_filter_metric():
    raw = metrics_response().SerializeToString()
    marked = base_pb2.ExecutePlanResponse.FromString(relay_filtered(raw))
    assert marked.response_id == "r9" and marked.operation_id == "op" and marked.server_side_session_id == "x"
    assert [m.name for m in marked.metrics.metrics] == [METRIC_OBJECT]  # Spark's numbers are gone
    ours = marked.metrics.metrics[0]
    assert ours.execution_metrics[METRIC_NAME].value == 1 and ours.parent == ours.plan_id  # the only root
    assert METRIC_OBJECT in _plan_metrics(marked)  # pyspark's own view of the tree works
    assert relay_filtered(marked.SerializeToString()) == marked.SerializeToString()  # once only


def test_unremembered_operations_lose_sparks_metrics_without_a_marker():
    raw = metrics_response().SerializeToString()
    stripped = base_pb2.ExecutePlanResponse.FromString(withhold_spark_metrics(raw))
    assert stripped.HasField("metrics") and list(stripped.metrics.metrics) == [] and stripped.response_id == "r9"
    assert _plan_metrics(stripped) is None


def test_progress_messages_are_emptied_but_stay_progress_messages():
    r = base_pb2.ExecutePlanResponse(session_id="s", operation_id="op", response_id="r3")
    r.execution_progress.stages.add(stage_id=1, num_tasks=7, num_completed_tasks=3, input_bytes_read=123_456)
    r.execution_progress.num_inflight_tasks = 4
    for relay in (relay_filtered, withhold_spark_metrics):
        out = base_pb2.ExecutePlanResponse.FromString(relay(r.SerializeToString()))
        assert out.WhichOneof("response_type") == "execution_progress" and out.response_id == "r3"
        assert out.execution_progress == base_pb2.ExecutePlanResponse.ExecutionProgress()


def test_observed_metrics_and_schema_stay():
    r = metrics_response()
    observed = r.observed_metrics.add(name="obs", keys=["n"], plan_id=5)
    observed.values.add().long = 3
    r.schema.string.SetInParent()
    out = base_pb2.ExecutePlanResponse.FromString(relay_filtered(r.SerializeToString()))
    assert list(out.observed_metrics) == list(r.observed_metrics) and out.schema == r.schema


@pytest.mark.parametrize(
    "response",
    [
        base_pb2.ExecutePlanResponse(
            session_id="s", arrow_batch=base_pb2.ExecutePlanResponse.ArrowBatch(data=b"\x04" * 300_000, row_count=7)
        ),
        base_pb2.ExecutePlanResponse(session_id="s", result_complete=base_pb2.ExecutePlanResponse.ResultComplete()),
    ],
    ids=["arrow", "complete"],
)
def test_other_messages_pass_as_the_same_bytes(response):
    raw = response.SerializeToString()
    assert relay_filtered(raw) is raw


def test_the_wire_scanner_finds_fields_after_a_large_one_and_survives_garbage():
    r = metrics_response()
    r.arrow_batch.data = b"\x00" * 200_000
    raw = r.SerializeToString()
    assert has_field(raw, 4) and has_field(raw, 2) and not has_field(raw, 7)
    assert not has_field(b"\xff\xff\xff", 4) and not has_field(raw[:50], 4)


# -- the echo of a `spark.sql` query ------------------------------------------------------

CLIENT_SQL = "SELECT * FROM orders WHERE amount > :x"
REWRITTEN = "SELECT * FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE owner = 'secret-team') AS orders"


def sql_execute(compressed: bool = False, legacy: bool = False):
    """A filtered `spark.sql` ExecutePlan: the client's bytes, then the pipeline's rewrite."""
    from rowgate.rewrite.plan.compression import compress_plan

    request = base_pb2.ExecutePlanRequest(session_id="s", operation_id="q", user_context=CTX)
    command = request.plan.command.sql_command
    if legacy:
        command.sql = CLIENT_SQL
        command.args["x"].integer = 5  # the older form: a map of literals
    else:
        command.input.sql.query = CLIENT_SQL
        command.input.sql.named_arguments["x"].literal.integer = 5
    client = base_pb2.ExecutePlanRequest()
    client.CopyFrom(request)
    if compressed:
        compress_plan(client.plan)
    request.plan.command.sql_command.input.sql.query = REWRITTEN  # what enforcement forwards
    c = call("ExecutePlan", request, {"row_filter_applied": True, "error_secrets": SECRETS})
    c.raw_request = client.SerializeToString()
    return c


def echo_response(relation) -> bytes:
    r = base_pb2.ExecutePlanResponse(session_id="s", operation_id="q", response_id="r1")
    r.sql_command_result.relation.CopyFrom(relation)
    return r.SerializeToString()


def rewritten_echo():
    from pyspark.sql.connect.proto import relations_pb2

    rel = relations_pb2.Relation()
    rel.sql.query = REWRITTEN
    rel.sql.named_arguments["x"].literal.integer = 5
    return rel


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
@pytest.mark.parametrize("legacy", [False, True], ids=["input", "legacy"])
def test_a_filtered_query_echoes_the_clients_text_not_the_policy(compressed, legacy):
    ops = FilteredOperations()
    execute = sql_execute(compressed, legacy)
    asyncio.run(step(ops, execute))
    for hook in (execute.response_hook, _reattach_hook(ops)):
        out = base_pb2.ExecutePlanResponse.FromString(hook(echo_response(rewritten_echo())))
        echoed = out.sql_command_result.relation.sql
        assert echoed.query == CLIENT_SQL and "secret-team" not in str(out)
        value = echoed.args["x"] if legacy else echoed.named_arguments["x"].literal
        assert value.integer == 5 and out.response_id == "r1"


def _reattach_hook(ops):
    again = call("ReattachExecute", base_pb2.ReattachExecuteRequest(session_id="s", operation_id="q", user_context=CTX))
    asyncio.run(step(ops, again))
    return again.response_hook


def test_a_commands_result_rows_are_no_echo_and_stay():
    from pyspark.sql.connect.proto import relations_pb2

    result = relations_pb2.Relation()
    result.local_relation.data = b"arrow bytes of SHOW TABLES"
    ops = FilteredOperations()
    execute = sql_execute()
    asyncio.run(step(ops, execute))
    raw = echo_response(result)
    assert base_pb2.ExecutePlanResponse.FromString(execute.response_hook(raw)).sql_command_result.relation == result


def test_an_echo_nobody_can_rebuild_is_not_relayed():
    with pytest.raises(EchoUnknown):
        withhold_spark_metrics(echo_response(rewritten_echo()))


def test_a_reattach_nobody_here_saw_start_ends_with_a_clear_refusal_at_the_echo():
    """Another replica started the `spark.sql` query: its echo is the rewrite, with the policy."""
    hook = _reattach_hook(FilteredOperations())
    with pytest.raises(Refusal) as refused:
        hook(echo_response(rewritten_echo()))
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION and "run the spark.sql call again" in refused.value.message
    assert "secret-team" not in refused.value.message
    rows = base_pb2.ExecutePlanResponse(session_id="s", operation_id="q", response_id="r2")
    rows.arrow_batch.data = b"rows"
    assert base_pb2.ExecutePlanResponse.FromString(hook(rows.SerializeToString())) == rows  # rows go on
