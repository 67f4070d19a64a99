"""Each enforcement rule on its own: a request that trips it is refused, a neighbour passes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules import (
    RULES,
    Decision,
    Rule,
    RuleSettings,
    allowed_kinds,
    apply_rules,
    file_paths,
    guarded_settings,
    protected_lifecycle,
    shipped_code,
    stale_session_data,
)
from rowgate.pipeline.enforce.rules.file_paths import PathRules
from rowgate.pipeline.session.registry import SessionState
from rowgate.pipeline.statements.shipped_code import CodeRules
from rowgate.policy.path_allow_list import Forbidden, PathAllowList
from rowgate.policy.snapshot import PolicySnapshot
from rowgate.rewrite.sql.result import RewriteResult, SessionEffects
from tests.unit.rewrite.fakes import ALICE, policy, tn

ORDERS = tn("sales.orders")
PROTECTED = PolicySnapshot.build(7, [policy("sales.orders", "eu", ("allUsers",), "region = 'EU'")])
NOTHING = PolicySnapshot.build(1, [])


SPARK_SETTINGS = {"spark.sql.warehouse.dir": "file:/spark/warehouse", "spark.eventLog.dir": "<undefined>"}
JVM_FACTS = ("/spark/logs", None, "/spark", "/tmp", None)


class FakeCatalog:
    """Protected tables' locations, and Spark's answers about its own directories."""

    def __init__(self, locations):
        self.locations = locations
        self.questions: list[str] = []

    async def locations_of(self, tables):
        return {t: self.locations[t] for t in tables if t in self.locations}

    async def run_sql_rows(self, sql):
        self.questions.append(sql)
        if sql.startswith("SET "):
            key = sql[4:]
            return [(key, SPARK_SETTINGS.get(key, "<undefined>"))]
        return [JVM_FACTS]


def decision(findings=None, *, snapshot=PROTECTED, admin=False, state=None, allowed=(), locations=None, allow_path=()):
    settings = RuleSettings(
        code_rules=CodeRules(frozenset(allowed)),
        catalog=FakeCatalog(locations or {ORDERS: "file:/warehouse/sales.db/orders"}),
        paths=PathRules(PathAllowList(allow_path), (Forbidden("/srv/rowgate", "the proxy's data directory"),)),
    )
    call = SimpleNamespace(method=SimpleNamespace(name="ExecutePlan"))
    return Decision(call, ALICE, admin, snapshot, state or SessionState(), findings or Findings(), settings)


def refused(rule, d) -> Refusal:
    with pytest.raises(Refusal) as info:
        asyncio.run(rule.check(d))
    return info.value


def passes(rule, d) -> None:
    asyncio.run(rule.check(d))


def sql(**effects) -> Findings:
    findings = Findings()
    findings.merge(RewriteResult(sql="", statement_kind="ddl", session_effects=SessionEffects(**effects)))
    return findings


def test_rules_are_listed_once_each_in_order():
    names = [rule.name for rule in RULES]
    assert names == [
        "allowed_kinds",
        "shipped_code",
        "guarded_settings",
        "protected_lifecycle",
        "file_paths",
        "stale_session_data",
        "server_side_listeners",
        "unknown_relations",
        "config_settings",
        "artifacts",
    ]


def test_shipped_code_needs_the_operators_permission_while_tables_are_protected():
    findings = Findings(user_code={"python_udf"})
    assert "--allow-python-udfs" in refused(shipped_code.RULE, decision(findings)).message
    passes(shipped_code.RULE, decision(findings, allowed={"python_udf"}))
    passes(shipped_code.RULE, decision(findings, snapshot=NOTHING))


def test_settings_in_sql_text_pass_only_when_on_the_allow_list():
    assert refused(guarded_settings.RULE, decision(sql(config_set=(("spark.sql.catalog.x", "y"),)))).reason == "guarded_config"
    assert "spark.sql.legacy.x" in refused(guarded_settings.RULE, decision(sql(config_reset=("spark.sql.legacy.x",)))).message
    assert "RESET" in refused(guarded_settings.RULE, decision(sql(config_reset_all=True))).message
    passes(guarded_settings.RULE, decision(sql(config_set=(("spark.sql.shuffle.partitions", "4"),))))
    passes(guarded_settings.RULE, decision(sql(config_reset=("spark.sql.shuffle.partitions",))))
    passes(guarded_settings.RULE, decision(sql(config_set=(("spark.sql.path.enabled", None),))))  # SET k reads
    for snapshot in (PROTECTED, NOTHING):  # whether or not policies exist
        message = refused(guarded_settings.RULE, decision(sql(config_set=(("spark.sql.defaultPath", "x"),)), snapshot=snapshot))
        assert "spark.sql.defaultPath" in message.message and "SQL path" in message.message
        assert (
            "unheard.of"
            in refused(guarded_settings.RULE, decision(sql(config_set=(("unheard.of", "1"),)), snapshot=snapshot)).message
        )
        assert "RESET" in refused(guarded_settings.RULE, decision(sql(config_reset_all=True), snapshot=snapshot)).message
        assert (
            "collation"
            in refused(guarded_settings.RULE, decision(sql(config_set=(("collation", None),)), snapshot=snapshot)).message
        )


def test_an_admins_reset_makes_the_session_take_the_forced_settings_again():
    state = SessionState(prepared=True)
    d = decision(sql(config_reset_all=True), snapshot=NOTHING, admin=True, state=state)
    d.call.on_finish = []
    passes(guarded_settings.RULE, d)
    assert not state.prepared and d.call.on_finish
    state = SessionState(prepared=True)
    d = decision(sql(config_reset=("spark.sql.variable.substitute",)), admin=True, state=state)
    d.call.on_finish = []
    passes(guarded_settings.RULE, d)
    assert not state.prepared
    state = SessionState(prepared=True)
    passes(guarded_settings.RULE, decision(sql(config_reset=("spark.sql.shuffle.partitions",)), admin=True, state=state))
    assert state.prepared


def test_only_admins_drop_or_rename_a_protected_table_or_its_database():
    assert "drop or rename" in refused(protected_lifecycle.RULE, decision(sql(tables_dropped=frozenset({ORDERS})))).message
    renamed = sql(tables_renamed=((ORDERS, tn("sales.orders2")),))
    assert refused(protected_lifecycle.RULE, decision(renamed)).code == grpc.StatusCode.PERMISSION_DENIED
    dropped_db = sql(namespaces_dropped=frozenset({("spark_catalog", "sales")}))
    assert "database spark_catalog.sales" in refused(protected_lifecycle.RULE, decision(dropped_db)).message
    passes(protected_lifecycle.RULE, decision(sql(tables_dropped=frozenset({tn("sales.other")}))))
    passes(protected_lifecycle.RULE, decision(sql(namespaces_dropped=frozenset({("spark_catalog", "hr")}))))


@pytest.mark.parametrize(
    "path",
    [
        "/warehouse/sales.db/orders",
        "FILE:///warehouse/sales.db/orders/part-0.parquet",
        "/warehouse//sales.db/./orders",
        "/warehouse/*/orders",
        "/warehouse",
    ],
)
def test_paths_reaching_a_protected_tables_files_are_refused_even_under_an_allowed_prefix(path):
    message = refused(file_paths.RULE, decision(Findings(paths_read={path}), allow_path=("/",))).message
    assert "sales.orders, which is protected" in message and "never readable by path" in message


def test_paths_and_locations_are_refused_unless_under_an_allowed_prefix():
    for findings in (Findings(paths_read={"/data/landing/x.csv"}), Findings(locations={"/data/landing/t"})):
        refusal = refused(file_paths.RULE, decision(findings))
        assert refusal.code == grpc.StatusCode.PERMISSION_DENIED and "--allow-path" in refusal.message
        assert "/data/landing" in refusal.message
        passes(file_paths.RULE, decision(findings, allow_path=("/data/landing",)))
        passes(file_paths.RULE, decision(findings, snapshot=NOTHING))
    assert "naming the location" in refused(file_paths.RULE, decision(Findings(locations={"/x/t"}))).message
    assert "relative" in refused(file_paths.RULE, decision(Findings(paths_read={"x.csv"}), allow_path=("/",))).message
    passes(
        file_paths.RULE, decision(Findings(paths_read={"/data/landing/x.csv", "/warehouse/sales.db/orders2"}), allow_path=("/",))
    )


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/srv/rowgate/policies.db-wal", "the proxy's data directory"),
        ("/srv/rowgate", "the proxy's data directory"),
        ("/srv", "the proxy's data directory"),
        ("file:/spark/warehouse/t", "Spark's warehouse"),
        ("/spark/logs/spark.log", "Spark's log directory"),
        ("/spark/spark-connect.log", "Spark's working directory"),
        ("/tmp/blockmgr-1/0a/shuffle_0_0_0.data", "Spark's spill"),
        ("/tmp/*", "Spark's spill"),
    ],
)
def test_the_proxys_and_sparks_own_files_are_never_allowed(path, reason):
    message = refused(file_paths.RULE, decision(Findings(paths_read={path}), allow_path=("/",))).message
    assert reason in message and "never readable by path" in message


def test_sparks_directories_are_asked_once():
    d = decision(Findings(paths_read={"/tmp/landing/a.csv"}), allow_path=("/tmp",))
    passes(file_paths.RULE, d)
    asked = list(d.settings.catalog.questions)
    assert any("spark.sql.warehouse.dir" in q for q in asked) and any("java_method" in q for q in asked)
    passes(file_paths.RULE, d)
    assert d.settings.catalog.questions == asked


def test_no_question_to_spark_when_no_prefix_allows_the_path():
    d = decision(Findings(paths_read={"/data/x.csv"}))
    refused(file_paths.RULE, d)
    assert d.settings.catalog.questions == []


def test_kinds_off_the_allow_list_are_refused_naming_the_kind():
    for kind in ("relation:ml_relation", "command:execute_external_command", "sql:command", "relation:some_new_kind"):
        refusal = refused(allowed_kinds.RULE, decision(Findings(kinds={"relation:read", kind})))
        assert refusal.code == grpc.StatusCode.PERMISSION_DENIED and kind in refusal.message
    assert "not on the proxy's list" in refused(allowed_kinds.RULE, decision(Findings(kinds={"command:new_thing"}))).message
    passes(allowed_kinds.RULE, decision(Findings(kinds={"relation:read", "sql:query", "command:write_operation"})))
    passes(allowed_kinds.RULE, decision(Findings(kinds={"relation:ml_relation"}), snapshot=NOTHING))


def test_stale_temp_views_and_checkpoints_are_refused():
    state = SessionState()
    state.temp_view_versions["v"] = (6, frozenset({ORDERS}))
    state.temp_view_versions["w"] = (7, frozenset({ORDERS}))
    stale = refused(stale_session_data.RULE, decision(Findings(temp_views_read={"v"}), state=state))
    assert stale.code == grpc.StatusCode.FAILED_PRECONDITION and "temp view v" in stale.message
    passes(stale_session_data.RULE, decision(Findings(temp_views_read={"w"}), state=state))
    state.checkpoint_versions.append((5, frozenset({ORDERS})))
    assert "checkpointed" in refused(stale_session_data.RULE, decision(Findings(cached_relations_used=True), state=state)).message
    old_unprotected = SessionState(checkpoint_versions=[(5, frozenset({tn("sales.other")}))])
    passes(stale_session_data.RULE, decision(Findings(cached_relations_used=True), state=old_unprotected))


def test_admins_pass_every_rule_that_is_not_marked_for_admins():
    findings = Findings(user_code={"python_udf"}, paths_read={"/warehouse/sales.db/orders"}, kinds={"sql:command"})
    asyncio.run(apply_rules(decision(findings, admin=True)))
    with pytest.raises(Refusal):
        asyncio.run(apply_rules(decision(findings)))


@pytest.mark.parametrize(
    "kind, text",
    [
        ("command", "EXECUTE IMMEDIATE 'SET spark.sql.path.enabled=true'"),
        ("multiple", "BEGIN EXECUTE IMMEDIATE 'RESET'; END"),
        ("unparsed", "set spark.sql.defaultPath=x `"),
    ],
)
def test_a_text_the_proxy_cannot_read_that_may_change_settings_is_refused_before_any_policy(kind, text):
    findings = Findings()
    findings.merge(RewriteResult(sql=text, statement_kind=kind, analysed=False))
    assert "may change settings" in refused(guarded_settings.RULE, decision(findings, snapshot=NOTHING)).message
    passes(guarded_settings.RULE, decision(findings, snapshot=NOTHING, admin=True))
    harmless = Findings()
    harmless.merge(RewriteResult(sql="MSCK REPAIR TABLE t", statement_kind="command", analysed=False))
    passes(guarded_settings.RULE, decision(harmless, snapshot=NOTHING))


def test_a_refusal_is_stamped_with_the_rule_that_raised_it():
    async def refuse(d):
        raise Refusal.denied("no", reason="guarded_config")

    with pytest.raises(Refusal) as info:
        asyncio.run(apply_rules(decision(), (Rule("passes", passes_check), Rule("settings_rule", refuse))))
    assert (info.value.reason, info.value.rule) == ("guarded_config", "settings_rule")


async def passes_check(d) -> None:
    return None
