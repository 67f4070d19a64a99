"""The orchestration of enforcement (pipeline/enforce/enforcement.py), without Spark.

Each phase is replaced by a recorder so these tests see only the order and the stops: the
policy snapshot first (an unreachable store refuses), the envelope (a field the proxy does
not know refuses everyone while tables are protected), then rewrite -> rules -> upstream
compatibility -> predicate settings -> facts noted -> second opinion -> effects -> plan
text; a refusal in any phase stops every later one, so nothing is run or forwarded.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce import enforcement as module
from rowgate.pipeline.enforce.enforcement import Enforcement
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.access_control import AccessControl
from rowgate.policy.snapshot import PolicyStoreUnavailable
from rowgate.rewrite.sql import errors as rewriter_refusal
from rowgate.upstream.methods import METHODS

STATE = SessionState()  # the session's state as positions hand it over


class Snapshot:
    def __init__(self, protected: bool):
        self.protected = protected

    def has_any(self) -> bool:
        return self.protected

    def policies_for(self, table):
        return ()


class Policies:
    def __init__(self, protected=True, unreachable=False):
        self.protected, self.unreachable = protected, unreachable

    def fresh_snapshot(self) -> Snapshot:
        if self.unreachable:
            raise PolicyStoreUnavailable("store down")
        return Snapshot(self.protected)


class Positions:
    versions = None
    recorder = None
    wait_seconds = 1.0

    def __init__(self, log: list[str], unavailable=False):
        self.log, self.unavailable = log, unavailable

    async def of(self, call):
        return await self._position()

    async def of_versioned(self, call):
        return await self._position(), 1

    async def _position(self):
        self.log.append("position")
        if self.unavailable:
            raise UpstreamUnavailable("upstream down")
        return STATE


class Effects:
    def __init__(self, log: list[str]):
        self.log = log

    async def apply(self, call, state, snapshot, findings):
        self.log.append("effects")
        return None


class SecondOpinion:
    def __init__(self, log: list[str]):
        self.log = log
        self.facts_seen = None

    async def check(self, call, ctx, snapshot, findings):
        self.log.append("second_opinion")
        self.facts_seen = (call.facts.row_filter_applied, call.facts.policy_snapshot)


def recording(log: list[str], name: str, result=None, refuse: Refusal | None = None):
    async def phase(*args, **kwargs):
        log.append(name)
        if refuse is not None:
            raise refuse
        return result

    return phase


@pytest.fixture
def world(monkeypatch):
    """An Enforcement whose phases append their names to `log`; `rewriter` says what the
    rewriter does (by default: marks the request filtered)."""
    log: list[str] = []
    rewriter = SimpleNamespace(action=lambda findings: setattr(findings, "filtered", True))

    def rewrite(plan, ctx, findings):
        log.append("rewrite")
        rewriter.action(findings)

    monkeypatch.setattr(module, "apply_rules", recording(log, "rules"))
    monkeypatch.setattr(module, "upstream_compat", recording(log, "upstream_compat"))
    monkeypatch.setattr(module, "reads_temp_view_namespace", recording(log, "temp_view_namespace", result=False))
    monkeypatch.setattr(module, "reads_protected_session_data", lambda call, state, snapshot: False)
    monkeypatch.setattr(module, "redacted_plan_text", lambda *a, **k: log.append("plan_text") or None)

    def build(policies=None, positions=None, admin=False):
        enforcement = Enforcement(
            policies or Policies(), None, positions or Positions(log), AccessControl.deciding(lambda caller: admin), rewrite, None
        )
        enforcement.effects = Effects(log)
        enforcement.predicate_settings = SimpleNamespace(check=recording(log, "predicate_settings"))
        enforcement.second_opinion = SecondOpinion(log)
        return enforcement

    return SimpleNamespace(log=log, rewriter=rewriter, build=build)


def execute(extra: bytes = b"", operation_id: str = "") -> Call:
    request = base_pb2.ExecutePlanRequest(session_id="s1", operation_id=operation_id)
    request.user_context.user_id = "user:a@x"
    request.plan.root.range.end = 3
    if extra:
        request = base_pb2.ExecutePlanRequest.FromString(request.SerializeToString() + extra)
    return Call(
        method=METHODS["ExecutePlan"],
        caller=Caller(principal="user:a@x"),
        request=request,
        upstream=None,
        raw_request=request.SerializeToString(),
    )


def run(enforcement: Enforcement, call: Call):
    return asyncio.run(enforcement.step(call))


def test_the_phases_run_in_order(world):
    enforcement = world.build()
    call = execute()
    assert run(enforcement, call) is None  # nothing to answer: forwarded as rewritten
    assert world.log == [
        "position",
        "temp_view_namespace",
        "rewrite",
        "rules",
        "upstream_compat",
        "predicate_settings",
        "second_opinion",
        "effects",
        "plan_text",
    ]


def test_facts_are_noted_before_the_second_opinion(world):
    """An analysis error Spark answers the second opinion with is relayed redacted: the
    request's facts (filtered, under which snapshot, error secrets) are set before it asks."""
    enforcement = world.build()
    call = execute()
    run(enforcement, call)
    filtered, snapshot = enforcement.second_opinion.facts_seen
    assert filtered is True and snapshot is not None
    assert call.facts.error_secrets is not None
    assert call.request.operation_id  # named, so its reattaches are known to be filtered


def test_an_unfiltered_request_keeps_its_operation_id_unset(world):
    world.rewriter.action = lambda findings: None
    call = execute()
    run(world.build(), call)
    assert call.facts.row_filter_applied is False and call.facts.error_secrets is None
    assert call.request.operation_id == ""


def test_an_unreachable_policy_store_refuses_before_anything_else(world):
    with pytest.raises(Refusal) as refused:
        run(world.build(policies=Policies(unreachable=True)), execute())
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE and refused.value.reason == "policy_store_unavailable"
    assert world.log == []


@pytest.mark.parametrize("admin", [False, True])
def test_an_unknown_envelope_field_is_refused_for_everyone_while_tables_are_protected(world, admin):
    unknown = bytes([0xB8, 0x3E, 0x01])  # field 999, varint 1
    with pytest.raises(Refusal) as refused:
        run(world.build(admin=admin), execute(extra=unknown))
    assert refused.value.reason == "unknown_field" and "field 999" in refused.value.message
    assert world.log == []


def test_an_unknown_envelope_field_passes_when_nothing_is_protected(world):
    run(world.build(policies=Policies(protected=False)), execute(extra=bytes([0xB8, 0x3E, 0x01])))
    assert "rewrite" in world.log


def test_a_request_without_plans_is_left_alone(world):
    call = Call(
        method=METHODS["ExecutePlan"],
        caller=Caller(principal="user:a@x"),
        request=base_pb2.ExecutePlanRequest(session_id="s1"),
        upstream=None,
    )
    assert run(world.build(), call) is None
    assert world.log == []


def test_an_unreachable_upstream_while_reading_the_position_is_unavailable(world):
    log = world.log
    with pytest.raises(Refusal) as refused:
        run(world.build(positions=Positions(log, unavailable=True)), execute())
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE and refused.value.reason == "upstream"
    assert log == ["position"]


@pytest.mark.parametrize(
    ("raised", "code", "reason"),
    [
        (rewriter_refusal.denied("write_needs_full_access", "no"), grpc.StatusCode.PERMISSION_DENIED, "rewrite_refused"),
        (rewriter_refusal.invalid("unanalysable_sql", "no"), grpc.StatusCode.INVALID_ARGUMENT, "rewrite_refused"),
        (UpstreamUnavailable("down"), grpc.StatusCode.UNAVAILABLE, "catalog_unavailable"),
        (RecursionError(), grpc.StatusCode.INVALID_ARGUMENT, "plan_too_deep"),
    ],
)
def test_a_rewrite_that_fails_is_refused_and_nothing_runs(world, raised, code, reason):
    def fail(findings):
        raise raised

    world.rewriter.action = fail
    with pytest.raises(Refusal) as refused:
        run(world.build(), execute())
    assert (refused.value.code, refused.value.reason) == (code, reason)
    assert world.log == ["position", "temp_view_namespace", "rewrite"]


def test_a_rewriter_refusal_reaches_the_client_as_it_was_raised(world: SimpleNamespace) -> None:
    """One refusal type: the rewriter's refusal is not converted, so the check that refused
    (its rule) reaches the audit log."""
    raised = rewriter_refusal.denied("write_needs_full_access", "writing to orders requires a FILTER USING (TRUE) grant")

    def fail(findings: object) -> None:
        raise raised

    world.rewriter.action = fail
    with pytest.raises(Refusal) as refused:
        run(world.build(), execute())
    assert refused.value is raised
    assert (refused.value.reason, refused.value.rule) == ("rewrite_refused", "write_needs_full_access")


@pytest.mark.parametrize("phase", ["rules", "upstream_compat", "predicate_settings"])
def test_a_refusing_phase_stops_every_later_one(world, monkeypatch, phase):
    """A rule, an upstream too old or a changed setting refuses before Spark is asked for
    a second opinion and before a statement is run (effects)."""
    refusal = Refusal.denied("refused", reason=phase)
    enforcement = world.build()
    if phase == "predicate_settings":
        enforcement.predicate_settings = SimpleNamespace(check=recording(world.log, phase, refuse=refusal))
    else:
        monkeypatch.setattr(module, phase if phase != "rules" else "apply_rules", recording(world.log, phase, refuse=refusal))
    with pytest.raises(Refusal) as refused:
        run(enforcement, execute())
    assert refused.value is refusal
    assert world.log[-1] == phase
    assert "second_opinion" not in world.log and "effects" not in world.log


def test_a_statement_answered_by_its_effects_is_not_given_plan_text(world):
    enforcement = world.build()
    answer = object()

    async def ran(call, state, snapshot, findings):
        world.log.append("effects")
        return answer

    enforcement.effects = SimpleNamespace(apply=ran)
    assert run(enforcement, execute()) is answer
    assert world.log[-1] == "effects"
