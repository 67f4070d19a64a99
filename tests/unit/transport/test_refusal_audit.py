"""A refused request's audit line names the rule that refused it (issue 24, item 4).

The request goes through the real `SparkConnectProxy` with the auditing observer; its one
step applies the enforcement rules (pipeline/enforce/rules/) to a request that sets a
setting not on the allow list, which the rule `guarded_settings` refuses with the reason
`guarded_config`: the audit line must say both, the rule not only the reason. A rewriter's
refusal reaches the audit line the same way, naming the rewriter check that refused.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.embedded.spark import free_port
from rowgate.pipeline.core import EVERY_RPC, Call, Pipeline, Refusal, step
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules import Decision, RuleSettings, apply_rules
from rowgate.pipeline.session.registry import SessionState
from rowgate.pipeline.statements.shipped_code import CodeRules
from rowgate.policy.snapshot import PolicySnapshot
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.result import RewriteResult, SessionEffects
from rowgate.transport.audit_observer import AuditingObserver
from rowgate.transport.server import SparkConnectProxy
from rowgate.upstream.channel import Upstream
from rowgate.upstream.url import parse_upstream_url


async def apply_the_rules(call) -> None:
    findings = Findings()
    effects = SessionEffects(config_set=(("spark.sql.catalog.x", "y"),))
    findings.merge(RewriteResult(sql="SET spark.sql.catalog.x=y", statement_kind="set", session_effects=effects))
    settings = RuleSettings(code_rules=CodeRules(frozenset()), catalog=None)  # type: ignore[arg-type]
    await apply_rules(Decision(call, call.caller, False, PolicySnapshot.build(1, []), SessionState(), findings, settings))


def refused_through_proxy(refuse_step: Callable[[Call], Awaitable[None]] = apply_the_rules) -> grpc.StatusCode:
    outcome: dict = {}

    async def main():
        upstream = Upstream(parse_upstream_url(f"sc://127.0.0.1:{free_port()}"), max_message_bytes=1 << 20)
        upstream.open()
        proxy = SparkConnectProxy(upstream, Pipeline([step(refuse_step, EVERY_RPC)]), observer=AuditingObserver())
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((proxy.generic_handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        request = base_pb2.ExecutePlanRequest(
            session_id=str(uuid.uuid4()),
            user_context=base_pb2.UserContext(user_id="someone"),
            plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query="SET spark.sql.catalog.x=y"))),
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_stream(
                    "/spark.connect.SparkConnectService/ExecutePlan",
                    request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
                    response_deserializer=base_pb2.ExecutePlanResponse.FromString,
                )(request, timeout=20)
                try:
                    async for _ in call:
                        pass
                    outcome["code"] = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as e:
                    outcome["code"] = e.code()
        finally:
            await server.stop(None)
            await upstream.close()

    asyncio.run(main())
    return outcome["code"]


def test_a_refused_requests_audit_line_names_the_rule_that_refused_it(caplog):
    with caplog.at_level(logging.INFO, logger="rowgate.audit"):
        code = refused_through_proxy()
    assert code == grpc.StatusCode.PERMISSION_DENIED
    [line] = [r for r in caplog.records if r.name == "rowgate.audit"]
    assert (line.decision, line.reason, line.rule) == ("refused", "guarded_config", "guarded_settings")


def test_a_refusal_outside_the_rules_is_named_by_its_reason():
    assert Refusal.invalid("no", reason="plan_too_deep").rule == "plan_too_deep"


async def rewriter_refuses(call: Call) -> None:
    raise refuse.denied("write_needs_full_access", "writing to orders requires a FILTER USING (TRUE) grant")


def test_a_rewriter_refusals_audit_line_names_the_rewriter_check(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rowgate.audit"):
        code = refused_through_proxy(rewriter_refuses)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    [line] = [r for r in caplog.records if r.name == "rowgate.audit"]
    assert (line.decision, line.reason, line.rule) == ("refused", "rewrite_refused", "write_needs_full_access")
