"""Re-learning a session from Spark (proxy/rowgate/pipeline/session/recall.py), offline:
what is asked, what is believed afterwards, and who may touch the session's record."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules import config_settings, guarded_settings, stale_session_data
from rowgate.pipeline.session.recall import CHECKPOINT_PREFIX, LIST_TEMP_VIEWS, VIEW_PREFIX, SessionRecall, encode
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from tests.unit.pipeline.enforce.test_rules import ORDERS, PROTECTED, decision, refused, sql

KEY = ("user:alice@example.com", "s1")


class FakeCatalog:
    def __init__(self, rows):
        self.rows = rows
        self.asked: list[str] = []

    async def run_sql_rows(self, sql_text, *, session=None):
        self.asked.append(sql_text)
        return self.rows


class FakeUpstream:
    def __init__(self, pairs):
        self.pairs = pairs
        self.requests: list = []

    async def call(self, name, request, timeout=None):
        self.requests.append(request)
        response = base_pb2.ConfigResponse(session_id=request.session_id)
        for key, value in self.pairs.items():
            response.pairs.add(key=key, value=value)
        return response


def call(peer="ipv4:127.0.0.1:1", upstream=None):
    request = base_pb2.ExecutePlanRequest(session_id=KEY[1], user_context=base_pb2.UserContext(user_id=KEY[0]))
    return SimpleNamespace(request=request, session_id=KEY[1], user_id=KEY[0], peer=peer, upstream=upstream, caller=None)


def test_temp_views_come_from_spark_and_their_times_from_the_record():
    rows = [("", "v", True), ("", "loose", True), ("global_temp", "g", True), ("db", "persistent", False)]
    record = {
        VIEW_PREFIX + "v": encode(6, {ORDERS}),
        VIEW_PREFIX + "gone": encode(7, {ORDERS}),  # dropped meanwhile: Spark's list decides
        CHECKPOINT_PREFIX + "x": encode(5, {ORDERS}),
        VIEW_PREFIX + "loose": "not json",
    }
    catalog, upstream = FakeCatalog(rows), FakeUpstream(record)
    state = SessionState(temp_views={"old"})
    asyncio.run(SessionRecall(SessionRegistry(), catalog).recall(call(upstream=upstream), state))
    assert catalog.asked == [LIST_TEMP_VIEWS]
    assert state.temp_views == {"v", "loose"}
    assert state.temp_view_versions == {"v": (6, frozenset({ORDERS})), "loose": (-1, frozenset())}
    assert state.checkpoint_versions == [(5, frozenset({ORDERS}))]


def test_a_known_session_on_another_connection_is_learned_again():
    sessions = SessionRegistry()
    recall = SessionRecall(sessions, FakeCatalog([]))
    state = sessions.get(KEY)
    state.position_known = state.recalled = True
    asyncio.run(recall.connection_step(call(peer="ipv4:127.0.0.1:1")))
    assert state.recalled and state.position_known
    asyncio.run(recall.connection_step(call(peer="ipv4:127.0.0.1:1")))
    assert state.recalled and state.position_known
    asyncio.run(recall.connection_step(call(peer="ipv4:127.0.0.1:2")))
    assert not state.recalled and not state.position_known


def test_a_temp_view_no_record_explains_is_refused_while_policies_exist():
    state = SessionState()
    state.temp_view_versions["v"] = (-1, frozenset())
    error = refused(stale_session_data.RULE, decision(Findings(temp_views_read={"v"}), state=state))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "cannot tell" in error.message
    assert PROTECTED.version == 7


@pytest.mark.parametrize("admin", [False, True])
def test_nobody_sets_or_resets_the_record(admin):
    for findings in (sql(config_set=((VIEW_PREFIX + "v", "{}"),)), sql(config_reset=(CHECKPOINT_PREFIX + "x",))):
        assert "rowgate itself" in refused(guarded_settings.RULE, decision(findings, admin=admin)).message
    for op in (
        base_pb2.ConfigRequest.Operation(set=base_pb2.ConfigRequest.Set(pairs=[base_pb2.KeyValue(key="ROWGATE.x", value="1")])),
        base_pb2.ConfigRequest.Operation(unset=base_pb2.ConfigRequest.Unset(keys=[CHECKPOINT_PREFIX + "x"])),
    ):
        rpc = SimpleNamespace(method=SimpleNamespace(name="Config"), request=base_pb2.ConfigRequest(operation=op), caller=None)
        d = decision(admin=admin)
        d.call = rpc  # type: ignore[assignment]
        assert "rowgate itself" in refused(config_settings.RULE, d).message


def test_an_error_on_a_reattach_started_elsewhere_keeps_its_class_not_its_message():
    from rowgate.pipeline.operations.filtered import FilteredOperations
    from rowgate.responses.error_redaction import withheld_message

    ops = FilteredOperations()
    key = (KEY[0], KEY[1], "op-started-on-another-replica")
    secrets = ops.reattached(key, "alice").error_secrets
    message = "[DIVIDE_BY_ZERO] Division by zero where region = 'secret-team'. SQLSTATE: 22012"
    assert secrets is not None
    redacted = withheld_message(message)
    assert redacted.startswith("[DIVIDE_BY_ZERO]") and "SQLSTATE: 22012" in redacted and "secret-team" not in redacted
    assert ops.reattached(key, "admin").error_secrets is secrets  # admins are filtered like anyone
