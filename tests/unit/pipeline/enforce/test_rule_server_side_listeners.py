"""Rule server_side_listeners: a JVM listener installed in the server is refused for
non-admins while tables are protected; client-side listeners and other commands pass."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules import RULES, Decision, RuleSettings, server_side_listeners
from rowgate.pipeline.session.registry import SessionState
from rowgate.pipeline.statements.shipped_code import CodeRules
from rowgate.policy.snapshot import PolicySnapshot
from tests.unit.rewrite.fakes import ALICE, policy

PROTECTED = PolicySnapshot.build(7, [policy("sales.orders", "eu", ("allUsers",), "region = 'EU'")])
NOTHING = PolicySnapshot.build(1, [])


def request(how: str) -> base_pb2.ExecutePlanRequest:
    req = base_pb2.ExecutePlanRequest(session_id="s")
    manager = req.plan.command.streaming_query_manager_command
    if how == "jvm":
        manager.add_listener.listener_payload = b"\xac\xed\x00\x05serialized"
    elif how == "remove":
        manager.remove_listener.id = "l1"
    elif how == "active":
        manager.active = True
    else:
        req.plan.command.streaming_query_listener_bus_command.add_listener_bus_listener = True
    return req


def decision(how: str, snapshot=PROTECTED) -> Decision:
    call = SimpleNamespace(method=SimpleNamespace(name="ExecutePlan"), request=request(how))
    settings = RuleSettings(code_rules=CodeRules(frozenset()), catalog=None)  # type: ignore[arg-type]
    return Decision(call, ALICE, False, snapshot, SessionState(), Findings(), settings)  # type: ignore[arg-type]


def test_the_rule_is_listed():
    assert server_side_listeners.RULE in RULES and not server_side_listeners.RULE.admins


def test_a_jvm_listener_is_refused_naming_why():
    with pytest.raises(Refusal) as info:
        asyncio.run(server_side_listeners.check(decision("jvm")))
    assert info.value.reason == "server_side_listener" and "JVM streaming query listener" in info.value.message


@pytest.mark.parametrize("how", ["remove", "active", "client-side bus"])
def test_other_streaming_commands_pass(how):
    asyncio.run(server_side_listeners.check(decision(how)))


def test_without_protected_tables_it_passes():
    asyncio.run(server_side_listeners.check(decision("jvm", NOTHING)))
