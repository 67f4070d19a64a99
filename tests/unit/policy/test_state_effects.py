"""Every kind the proxy knows says what it changes (proxy/rowgate/policy/state_effects.py)."""

from __future__ import annotations

from pyspark.sql.connect.proto import base_pb2, catalog_pb2

from rowgate.policy import kinds, state_effects


def _members(descriptor, oneof: str) -> set[str]:
    return {f.name for f in descriptor.oneofs_by_name[oneof].fields}


def test_every_catalog_call_is_classified_and_reads_are_a_subset():
    ops = _members(catalog_pb2.Catalog.DESCRIPTOR, "cat_type")
    classified = {k.split(":", 1)[1] for k in state_effects.SCOPES if k.startswith("catalog:")}
    assert ops == classified
    assert {k.split(":", 1)[1] for k in kinds.CATALOG} <= classified
    assert state_effects.CATALOG_READS <= ops
    assert state_effects.catalog_changes() == ops - state_effects.CATALOG_READS


def test_catalog_calls_that_change_state_include_every_setter_creator_and_cache():
    changes = state_effects.catalog_changes()
    for op in ("set_current_database", "set_current_catalog", "create_table", "drop_temp_view", "cache_table", "refresh_table"):
        assert op in changes


def test_every_sql_statement_kind_is_classified():
    sql = {k.split(":", 1)[1] for k in kinds.SQL}
    classified = {k.split(":", 1)[1] for k in state_effects.SCOPES if k.startswith("sql:")}
    unclassified = sql - classified
    # refused for everyone or not forwarded: they count as changing everything
    assert unclassified <= {"row_access_policy", "command", "unparsed", "multiple", "unknown"}


def test_every_command_a_caller_may_send_is_classified():
    allowed = {k.split(":", 1)[1] for k, spec in kinds.COMMANDS.items() if spec.admins}
    classified = {k.split(":", 1)[1] for k in state_effects.SCOPES if k.startswith("command:")}
    assert allowed - classified <= {"ml_command"}  # counts as ALL


def test_config_and_analysis_kinds_are_all_classified():
    config = _members(base_pb2.ConfigRequest.Operation.DESCRIPTOR, "op_type")
    analyze = _members(base_pb2.AnalyzePlanRequest.DESCRIPTOR, "analyze")
    assert {f"config:{k}" for k in config} <= set(state_effects.SCOPES)
    assert {f"analyze:{k}" for k in analyze} <= set(state_effects.SCOPES)
    assert state_effects.scope_of("config:set") == state_effects.scope_of("config:unset") == "session"
    assert state_effects.scope_of("analyze:persist") == "all"


def test_an_unknown_kind_changes_everything():
    assert state_effects.scope_of("command:something_new") == "all"
    assert state_effects.spark_root_scope("SomeNewCommand") == "all"
