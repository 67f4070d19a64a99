"""Session effects are recorded from Spark's answer, and the bookkeeping survives the client.

A scripted upstream stands in for Spark; the policy store is a real SQLite store.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.session_effects import SessionEffects
from rowgate.pipeline.session.position import SessionPositions
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store import open_store
from rowgate.rewrite.sql.result import RewriteResult
from rowgate.rewrite.sql.result import SessionEffects as SqlEffects
from rowgate.upstream.methods import METHODS
from tests.unit.catalog.fakes import spark_rpc_error, unavailable
from tests.unit.rewrite.fakes import ALICE, policy, tn

OLD, NEW = tn("sales.orders"), tn("sales.orders2")


class ScriptedUpstream:
    """ExecutePlan answers one response after `gate` opens, or raises `error`."""

    def __init__(self, error=None):
        self.gate = asyncio.Event()
        self.error = error
        self.requests: list[base_pb2.ExecutePlanRequest] = []

    def raw(self, name):
        async def stream(data, metadata=None, timeout=None):
            request = base_pb2.ExecutePlanRequest.FromString(data)
            self.requests.append(request)
            await self.gate.wait()
            if self.error is not None:
                raise self.error
            yield base_pb2.ExecutePlanResponse(
                session_id=request.session_id, server_side_session_id="srv", operation_id=request.operation_id, response_id="r1"
            ).SerializeToString()

        return stream


class FakeCatalog:
    def __init__(self, existing=()):
        self.existing = set(existing)
        self.ddl = []

    def begin_ddl(self):
        self.ddl.append("begin")

    def end_ddl(self):
        self.ddl.append("end")

    def invalidate(self, name=None):
        pass

    async def exists(self, name):
        return name in self.existing


def make(tmp_path, upstream, catalog=None):
    store = open_store(f"sqlite:///{tmp_path}/policies.db")
    store.create(policy("sales.orders", "p", ("user:alice@example.com",), "region = 'EU'"))
    policies = PolicyCache(store)
    catalog = catalog or FakeCatalog()
    positions = SessionPositions(SessionRegistry(), catalog, wait_seconds=5)
    effects = SessionEffects(policies, catalog, positions, set(), {})
    request = base_pb2.ExecutePlanRequest(session_id="s1", operation_id="op1", user_context=base_pb2.UserContext(user_id="u"))
    request.request_options.add().reattach_options.reattachable = True
    call = Call(method=METHODS["ExecutePlan"], caller=ALICE, request=request, upstream=upstream)
    return effects, policies, positions, call


def findings_of(**effects) -> Findings:
    findings = Findings()
    findings.merge(RewriteResult(sql="", statement_kind="ddl", session_effects=SqlEffects(**effects)))
    return findings


def names(policies, table):
    return [p.name for p in policies.store.list(table)]


def test_a_temp_view_is_remembered_only_once_spark_made_it(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        effects, policies, positions, call = make(tmp_path, upstream)
        state = positions.state(call)
        task = asyncio.ensure_future(
            effects.apply(call, state, policies.snapshot, findings_of(temp_views_created=frozenset({"orders"})))
        )
        await asyncio.sleep(0.01)
        assert "orders" not in state.temp_views  # Spark has not answered yet
        upstream.gate.set()
        answer = await task
        assert "orders" in state.temp_views
        # answered with Spark's responses and the completion pyspark waits for
        assert answer.responses[-1].HasField("result_complete")
        assert not upstream.requests[0].request_options  # run as one stream Spark does not cut

    asyncio.run(go())


def test_a_temp_view_spark_refused_is_not_remembered(tmp_path):
    async def go():
        upstream = ScriptedUpstream(error=spark_rpc_error("TABLE_OR_VIEW_NOT_FOUND", "no such table"))
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream)
        state = positions.state(call)
        with pytest.raises(grpc.aio.AioRpcError):
            await effects.apply(call, state, policies.snapshot, findings_of(temp_views_created=frozenset({"orders"})))
        assert "orders" not in state.temp_views

    asyncio.run(go())


def test_the_bookkeeping_finishes_when_the_client_goes_away(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        effects, policies, positions, call = make(tmp_path, upstream)
        state = positions.state(call)
        handler = asyncio.ensure_future(effects.apply(call, state, policies.snapshot, findings_of(tables_renamed=((OLD, NEW),))))
        await asyncio.sleep(0.01)
        assert names(policies, NEW) == ["p"] and names(policies, OLD) == ["p"]  # both protected meanwhile
        handler.cancel()  # the client's stream broke
        upstream.gate.set()
        for _ in range(200):
            if not state.gate.writing:
                break
            await asyncio.sleep(0.01)
        assert names(policies, OLD) == [] and names(policies, NEW) == ["p"]
        assert not state.gate.writing

    asyncio.run(go())


@pytest.mark.parametrize(
    "error, existing, old_after, new_after",
    [
        (spark_rpc_error("TABLE_ALREADY_EXISTS", "exists"), {OLD}, ["p"], []),  # Spark refused
        (unavailable(), {NEW}, [], ["p"]),  # unknown; Spark says it happened
        (unavailable(), {OLD}, ["p"], []),  # unknown; Spark says it did not
        (unavailable(), {OLD, NEW}, ["p"], ["p"]),  # cannot tell: both stay protected
    ],
    ids=["refused", "unknown-done", "unknown-not-done", "unknown-unclear"],
)
def test_a_rename_moves_the_policies_by_what_spark_did(tmp_path, error, existing, old_after, new_after):
    async def go():
        upstream = ScriptedUpstream(error=error)
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream, FakeCatalog(existing))
        with pytest.raises(grpc.aio.AioRpcError):
            await effects.apply(call, positions.state(call), policies.snapshot, findings_of(tables_renamed=((OLD, NEW),)))
        assert names(policies, OLD) == old_after and names(policies, NEW) == new_after

    asyncio.run(go())


@pytest.mark.parametrize("error, existing, left", [(None, set(), []), (unavailable(), {OLD}, ["p"]), (unavailable(), set(), [])])
def test_a_drop_drops_the_policies_once_spark_dropped_the_table(tmp_path, error, existing, left):
    async def go():
        upstream = ScriptedUpstream(error=error)
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream, FakeCatalog(existing))
        try:
            await effects.apply(call, positions.state(call), policies.snapshot, findings_of(tables_dropped=frozenset({OLD})))
        except grpc.aio.AioRpcError:
            assert error is not None
        assert names(policies, OLD) == left

    asyncio.run(go())


def test_catalog_answers_are_not_cached_while_a_ddl_runs(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        catalog = FakeCatalog()
        effects, policies, positions, call = make(tmp_path, upstream, catalog)
        task = asyncio.ensure_future(
            effects.apply(call, positions.state(call), policies.snapshot, findings_of(views_created=frozenset({NEW})))
        )
        await asyncio.sleep(0.01)
        assert catalog.ddl == ["begin"]
        upstream.gate.set()
        await task
        assert catalog.ddl == ["begin", "end"]

    asyncio.run(go())


def test_a_statement_checked_under_a_state_another_statement_changed_is_refused(tmp_path):
    async def go():
        upstream = ScriptedUpstream()
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream)
        state = positions.state(call)
        state.position_known = True
        await positions.of(call)  # this request read the state (version 0) ...
        call.facts.state_read.release()  # (Spark analysed it)
        await state.gate.enter_write(1)  # ... and another statement changed it meanwhile
        state.gate.leave_write()
        with pytest.raises(Refusal) as info:
            await effects.apply(call, state, policies.snapshot, findings_of(use_target=("db",)))
        assert info.value.code == grpc.StatusCode.ABORTED

    asyncio.run(go())


def test_an_analyzeplan_of_a_statement_records_nothing(tmp_path):
    """Spark analyses an AnalyzePlan's CREATE TEMP VIEW without running it."""

    async def go():
        upstream = ScriptedUpstream()
        upstream.gate.set()
        effects, policies, positions, call = make(tmp_path, upstream)
        call.method = METHODS["AnalyzePlan"]
        state = positions.state(call)
        found = findings_of(temp_views_created=frozenset({"orders"}))
        assert await effects.apply(call, state, policies.snapshot, found) is None
        assert "orders" not in state.temp_views and not upstream.requests

    asyncio.run(go())
