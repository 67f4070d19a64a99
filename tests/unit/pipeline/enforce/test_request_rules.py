"""The rules of the RPCs that carry no plan, Config and AddArtifacts (issue 24, item 4):
listed in RULES, applied by one step per RPC (pipeline/enforce/request_rules.py), with the
statuses, messages and reasons their guards gave before."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.request_rules import RequestRules
from rowgate.pipeline.enforce.rules import RULES, RuleSettings, artifacts, config_settings
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.pipeline.statements.guard_config import ConfigGuard
from rowgate.pipeline.statements.shipped_code import CodeRules
from rowgate.policy.access_control import AccessControl
from rowgate.policy.snapshot import PolicySnapshot
from tests.unit.rewrite.fakes import ALICE, policy

PROTECTED = PolicySnapshot.build(7, [policy("sales.orders", "eu", ("allUsers",), "region = 'EU'")])
NOTHING = PolicySnapshot.build(1, [])
KEY = ("user:alice@example.com", "s1")


def config(*, set_pairs=(), unset=(), silent=False) -> base_pb2.ConfigRequest:
    if unset:
        op = base_pb2.ConfigRequest.Operation(unset=base_pb2.ConfigRequest.Unset(keys=list(unset)))
    else:
        pairs = [base_pb2.KeyValue(key=k, value=v) for k, v in set_pairs]
        op = base_pb2.ConfigRequest.Operation(set=base_pb2.ConfigRequest.Set(pairs=pairs, silent=silent))
    return base_pb2.ConfigRequest(session_id=KEY[1], operation=op)


def artifact_batch(*names: str) -> base_pb2.AddArtifactsRequest:
    batch = base_pb2.AddArtifactsRequest.Batch(
        artifacts=[base_pb2.AddArtifactsRequest.SingleChunkArtifact(name=n) for n in names]
    )
    return base_pb2.AddArtifactsRequest(session_id=KEY[1], batch=batch)


class World:
    def __init__(self, *, admin=False, snapshot=PROTECTED, allowed=()):
        self.sessions = SessionRegistry()
        self.access = AccessControl.deciding(lambda caller: admin)
        settings = RuleSettings(code_rules=CodeRules(frozenset(allowed)), catalog=None, sessions=self.sessions)  # type: ignore[arg-type]
        self.rules = RequestRules(self.access, SimpleNamespace(snapshot=snapshot), self.sessions, settings)  # type: ignore[arg-type]

    def call(self, rpc: str, request):
        return SimpleNamespace(
            method=SimpleNamespace(name=rpc), request=request, caller=ALICE, user_id=KEY[0], session_id=KEY[1], on_finish=[]
        )

    def run(self, rpc: str, request):
        call = self.call(rpc, request)
        asyncio.run(self.rules.step(call))  # type: ignore[arg-type]
        return call

    def refusal(self, rpc: str, request) -> Refusal:
        with pytest.raises(Refusal) as info:
            self.run(rpc, request)
        return info.value


def test_the_rules_name_their_rpcs():
    by_name = {rule.name: rule for rule in RULES}
    assert by_name["config_settings"].rpcs == {"Config"} and by_name["config_settings"].admins
    assert by_name["artifacts"].rpcs == {"AddArtifacts"} and not by_name["artifacts"].admins
    plan_rules = [r for r in RULES if r.name not in ("config_settings", "artifacts")]
    assert all(r.rpcs == {"ExecutePlan", "AnalyzePlan"} for r in plan_rules)


def test_a_non_admin_sets_only_listed_settings_through_config():
    world = World(snapshot=NOTHING)  # whether or not policies exist
    error = world.refusal("Config", config(set_pairs=[("spark.sql.catalog.x", "y")]))
    assert (error.code, error.reason, error.rule) == (grpc.StatusCode.PERMISSION_DENIED, "guarded_config", "config_settings")
    assert error.message.startswith("setting of spark.sql.catalog.x is reserved for rowgate admins (spark.sql.catalog.x: ")
    assert "unsetting of spark.sql.catalog.x" in world.refusal("Config", config(unset=["spark.sql.catalog.x"])).message
    world.run("Config", config(set_pairs=[("spark.sql.ansi.enabled", "false")]))
    assert world.sessions.find(KEY) is None  # deciding made no session


def test_a_silent_set_is_not_refused_but_loses_the_pairs_a_non_admin_may_not_change():
    world = World()
    call = world.run("Config", config(set_pairs=[("spark.sql.catalog.x", "y"), ("spark.sql.ansi.enabled", "false")], silent=True))
    asyncio.run(ConfigGuard(world.sessions, world.access).drop_unlisted_silent_pairs(call))  # type: ignore[arg-type]
    assert [p.key for p in call.request.operation.set.pairs] == ["spark.sql.ansi.enabled"]


@pytest.mark.parametrize("admin", [False, True])
def test_nobody_sets_the_proxys_own_keys_even_silently(admin):
    error = World(admin=admin).refusal("Config", config(set_pairs=[("rowgate.x", "1")], silent=True))
    assert "reserved for rowgate itself" in error.message and error.rule == "config_settings"


def test_an_admins_unset_of_a_forced_setting_applies_them_again_after():
    world = World(admin=True)
    world.run("Config", config(set_pairs=[("spark.sql.catalog.x", "y")]))  # admins set anything
    forced = "spark.sql.variable.substitute"
    call = world.run("Config", config(unset=[forced]))
    state = world.sessions.find(KEY)
    assert state is not None and not state.prepared and call.on_finish


def test_artifacts_need_the_operators_permission_while_tables_are_protected():
    error = World().refusal("AddArtifacts", artifact_batch("jars/a.jar"))
    assert (error.code, error.reason, error.rule) == (grpc.StatusCode.PERMISSION_DENIED, "user_code_artifacts", "artifacts")
    assert "--allow-artifacts" in error.message
    World().run("AddArtifacts", artifact_batch("cache/abc"))  # data, not code
    World(allowed={"artifacts"}).run("AddArtifacts", artifact_batch("jars/a.jar"))
    World(admin=True).run("AddArtifacts", artifact_batch("jars/a.jar"))
    World(snapshot=NOTHING).run("AddArtifacts", artifact_batch("pyfiles/x.py"))
    chunk = base_pb2.AddArtifactsRequest(session_id=KEY[1], chunk=base_pb2.AddArtifactsRequest.ArtifactChunk(data=b"x"))
    World().run("AddArtifacts", chunk)  # a later chunk of an artifact already checked


def test_a_plan_rule_does_not_decide_a_config_request():
    # allowed_kinds & co. read findings a Config request has none of; they are not asked.
    assert artifacts.RULE not in [r for r in RULES if "Config" in r.rpcs]
    assert [r.name for r in RULES if "Config" in r.rpcs] == [config_settings.RULE.name]
