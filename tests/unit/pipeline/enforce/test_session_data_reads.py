"""Reads of temp views and checkpoints holding protected rows are marked row-filtered."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Facts
from rowgate.pipeline.enforce.session_data_reads import SessionDataReads, names_session_data
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.policy.snapshot import PolicySnapshot
from tests.unit.rewrite.fakes import policy, tn

ORDERS = tn("sales.orders")
PROTECTED = PolicySnapshot.build(7, [policy("sales.orders", "eu", ("allUsers",), "region = 'EU'")])


def request(build) -> base_pb2.ExecutePlanRequest:
    req = base_pb2.ExecutePlanRequest(session_id="s1", user_context=base_pb2.UserContext(user_id="user:ann@x"))
    build(req.plan.root)
    return req


def marked(req, views=(), checkpoints=(), snapshot=PROTECTED) -> bool:
    sessions = SessionRegistry()
    state = sessions.get(("user:ann@x", "s1"))
    for name, tables in views:
        state.temp_views.add(name)
        state.temp_view_versions[name] = (7, frozenset(tables))
    state.checkpoint_versions.extend(checkpoints)
    call = SimpleNamespace(request=req, facts=Facts(row_filter_applied=False), user_id="user:ann@x", session_id="s1")
    step = SessionDataReads(sessions, SimpleNamespace(fresh_snapshot=lambda: snapshot)).step()
    asyncio.run(step.run(call))
    return bool(call.facts.row_filter_applied)


def read_view(rel, name="v"):
    rel.read.named_table.unparsed_identifier = name


def test_a_view_over_a_protected_table_is_marked():
    assert marked(request(read_view), views=[("v", {ORDERS})])
    assert marked(request(lambda r: setattr(r.sql, "query", "SELECT * FROM `V` WHERE 1 = 1")), views=[("v", {ORDERS})])


def test_a_view_over_open_tables_and_other_names_are_not():
    assert not marked(request(read_view), views=[("v", {tn("sales.open")})])
    assert not marked(request(lambda r: read_view(r, "sales.v")), views=[("v", {ORDERS})])
    assert not marked(request(lambda r: setattr(r.sql, "query", "SELECT v2 FROM t")), views=[("v", {ORDERS})])


def test_a_checkpoint_over_protected_rows_is_marked():
    def cached(rel):
        rel.cached_remote_relation.relation_id = "r1"

    assert marked(request(cached), checkpoints=[(7, frozenset({ORDERS}))])
    assert not marked(request(cached), checkpoints=[(7, frozenset({tn("sales.open")}))])


def test_names_session_data_walks_nested_relations():
    req = request(lambda r: read_view(r.project.input.filter.input))
    assert names_session_data([req.plan], {"v"}, False)
