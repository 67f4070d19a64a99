"""A protected table's DROP and RENAME through the proxy are recorded in the policy history
with the caller who ran the statement as the author (pipeline/enforce/policy_lifecycle.py)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.unit.catalog.fakes import spark_rpc_error
from tests.unit.pipeline.enforce.test_session_effects import NEW, OLD, FakeCatalog, ScriptedUpstream, findings_of, make
from tests.unit.rewrite.fakes import ALICE


def history(policies):
    return [(e.via, e.author, e.action, e.table, e.policy_name, e.detail) for e in policies.store.history(after_version=1)]


def test_a_rename_is_recorded_as_one_copy_then_one_move(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream, FakeCatalog())
        await effects.apply(call, positions.state(call), policies.snapshot, findings_of(tables_renamed=((OLD, NEW),)))
        return policies

    policies = asyncio.run(go())
    assert history(policies) == [
        ("table_rename", ALICE.principal, "create", NEW, "p", f"{OLD} renamed to {NEW}: policies copied before Spark runs it"),
        ("table_rename", ALICE.principal, "drop", OLD, "p", f"{OLD} renamed to {NEW}: policies moved with the table"),
    ]
    [copy, move] = policies.store.history(after_version=1)
    assert copy.after.created_at == move.before.created_at  # the policy keeps its creation time
    assert (copy.version, move.version) == (2, 3)


def test_a_refused_rename_records_the_copies_removed(tmp_path):
    async def go():
        upstream = ScriptedUpstream(error=spark_rpc_error("TABLE_ALREADY_EXISTS", "exists"))
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream, FakeCatalog({OLD}))
        with pytest.raises(grpc.aio.AioRpcError):
            await effects.apply(call, positions.state(call), policies.snapshot, findings_of(tables_renamed=((OLD, NEW),)))
        return policies

    policies = asyncio.run(go())
    assert [(via, author, action, table) for via, author, action, table, _, _ in history(policies)] == [
        ("table_rename", ALICE.principal, "create", NEW),
        ("table_rename", ALICE.principal, "drop", NEW),
    ]
    assert history(policies)[1][5].endswith("refused by Spark: copies removed")


def test_a_drop_is_recorded_with_its_author(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream, FakeCatalog())
        await effects.apply(call, positions.state(call), policies.snapshot, findings_of(tables_dropped=frozenset({OLD})))
        return policies

    assert history(asyncio.run(go())) == [("table_drop", ALICE.principal, "drop", OLD, "p", f"table {OLD} dropped")]
