"""The state versions Spark holds (proxy/rowgate/pipeline/session/epoch.py), against a fake
upstream that keeps each session's configuration the way Spark's Config RPC does."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.session.epoch import (
    CHANGING_PREFIX,
    SHARED_SESSION_ID,
    SHARED_USER,
    TOUCHING_PREFIX,
    VERSION_KEY,
    WITNESS_IDLE_SECONDS,
    WITNESS_PREFIX,
    StateVersions,
    request_scope,
    witness_value,
)
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.policy import state_effects
from rowgate.upstream.methods import METHODS
from tests.unit.catalog.fakes import spark_rpc_error


class ConfUpstream:
    """Config calls against one dict per (user, session); `fail[(user, session)]` raises instead."""

    def __init__(self):
        self.confs: dict[tuple[str, str], dict[str, str]] = {}
        self.fail: dict[tuple[str, str], grpc.aio.AioRpcError] = {}
        self.calls: list[tuple[tuple[str, str], str]] = []
        self.applied: list[str] = []  # what the relayed client requests did, in order

    async def call(self, name, request, *, timeout=None):
        assert name == "Config"
        key = (request.user_context.user_id, request.session_id)
        op = request.operation.WhichOneof("op_type")
        self.calls.append((key, op))
        if key in self.fail:
            raise self.fail[key]
        conf = self.confs.setdefault(key, {})
        response = base_pb2.ConfigResponse(session_id=request.session_id, server_side_session_id="srv")
        if op == "set":
            conf.update({p.key: p.value for p in request.operation.set.pairs})
        elif op == "unset":
            for k in request.operation.unset.keys:
                conf.pop(k, None)
        elif op == "get_all":
            prefix = request.operation.get_all.prefix
            response.pairs.extend(base_pb2.KeyValue(key=k, value=v) for k, v in conf.items() if k.startswith(prefix))
        return response

    def raw(self, name):
        async def relay(data, metadata=None, timeout=None):
            request = base_pb2.ConfigRequest.FromString(data)
            self.applied.append(request.operation.WhichOneof("op_type"))
            response = await self.call("Config", request)
            return response.SerializeToString()

        return relay


CALLER = Caller(principal="user:ann@example.com", groups=frozenset(), authenticated=True)
SESSION = ("user:ann@example.com", "s1")


def _call(request=None, upstream=None) -> Call:
    if request is None:
        request = base_pb2.ConfigRequest(
            session_id="s1",
            user_context=base_pb2.UserContext(user_id="user:ann@example.com"),
            operation=base_pb2.ConfigRequest.Operation(
                set=base_pb2.ConfigRequest.Set(pairs=[base_pb2.KeyValue(key="spark.sql.defaultPath", value="x")])
            ),
        )
    return Call(method=METHODS["Config"], caller=CALLER, request=request, upstream=upstream)


def _versions(clock=None):
    upstream = ConfUpstream()
    sessions = SessionRegistry()
    versions = StateVersions(upstream, sessions, clock=clock or (lambda: 1000.0))
    return upstream, sessions, versions


def run(coro):
    return asyncio.run(coro)


def test_a_new_session_gets_a_token_and_is_settled_from_the_next_read():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    first = run(versions.read(_call(), state))
    assert first.version is None and first.fresh  # the tokens were just written: nothing is remembered yet
    assert first.session == upstream.confs[SESSION][VERSION_KEY]  # but the memory may be learned under it
    assert VERSION_KEY in upstream.confs[SESSION] and VERSION_KEY in upstream.confs[(SHARED_USER, SHARED_SESSION_ID)]
    second = run(versions.read(_call(), state))
    assert second.version is not None
    assert second.session == upstream.confs[SESSION][VERSION_KEY]
    assert run(versions.read(_call(), state)) == second


def test_a_change_moves_the_token_only_after_it_ran_and_readers_meanwhile_are_unsettled():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    run(versions.read(_call(), state))
    before = run(versions.read(_call(), state))
    seen_inside = {}

    async def change():
        seen_inside["reading"] = await versions.read(_call(), state)
        seen_inside["token"] = upstream.confs[SESSION][VERSION_KEY]
        return "done"

    assert run(versions.changing(_call(), state, state_effects.SESSION, change)) == "done"
    assert seen_inside["reading"].session is None  # a marker was there
    assert seen_inside["token"] == before.session  # the token moves after the change, not before
    after = run(versions.read(_call(), state))
    assert after.session not in (None, before.session)
    assert after.shared == before.shared  # a session-only change leaves the catalog's version
    assert not [k for k in upstream.confs[SESSION] if k.startswith(CHANGING_PREFIX)]


def test_a_change_of_everything_moves_the_shared_version_too():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    run(versions.read(_call(), state))
    before = run(versions.read(_call(), state))

    async def change():
        return None

    run(versions.changing(_call(), state, state_effects.ALL, change))
    after = run(versions.read(_call(), state))
    assert after.shared not in (None, before.shared) and after.session != before.session


def test_a_failed_change_still_moves_the_token_and_removes_its_marker():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    run(versions.read(_call(), state))
    before = run(versions.read(_call(), state))

    async def change():
        raise RuntimeError("Spark failed it half-way")

    with pytest.raises(RuntimeError):
        run(versions.changing(_call(), state, state_effects.SESSION, change))
    after = run(versions.read(_call(), state))
    assert after.session not in (None, before.session)


def test_another_writers_live_marker_keeps_readers_unsettled_until_its_lease_ends():
    now = [1000.0]
    upstream, sessions, versions = _versions(clock=lambda: now[0])
    state = sessions.get(SESSION)
    run(versions.read(_call(), state))
    token = run(versions.read(_call(), state)).session
    upstream.confs[SESSION][CHANGING_PREFIX + "other"] = repr(now[0] + 60)  # another replica, mid-change
    assert run(versions.read(_call(), state)).session is None
    now[0] += 61  # its writer died: the lease ended
    reading = run(versions.read(_call(), state))
    assert reading.fresh and reading.version is None  # taken as a change: a new token, nothing reused
    fresh = run(versions.read(_call(), state)).session
    assert fresh not in (None, token)
    assert CHANGING_PREFIX + "other" not in upstream.confs[SESSION]


def test_the_only_changer_keeps_its_memory_of_the_session():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    run(versions.read(_call(), state))
    state.version_seen = run(versions.read(_call(), state)).session

    async def noop():
        return None

    run(versions.changing(_call(), state, state_effects.SESSION, noop))
    assert state.version_seen == upstream.confs[SESSION][VERSION_KEY]
    # a change by someone else in between: the memory must be learned again
    state.version_seen = upstream.confs[SESSION][VERSION_KEY]

    async def with_company():
        upstream.confs[SESSION][VERSION_KEY] = "written by another replica"

    run(versions.changing(_call(), state, state_effects.SESSION, with_company))
    assert state.version_seen is None


def test_a_shared_session_spark_refuses_leaves_every_reading_unsettled():
    upstream, sessions, versions = _versions()
    state = sessions.get(SESSION)
    upstream.fail[(SHARED_USER, SHARED_SESSION_ID)] = spark_rpc_error("INVALID_HANDLE.SESSION_CLOSED", "closed")
    run(versions.read(_call(), state))
    reading = run(versions.read(_call(), state))
    assert reading.session is not None and reading.shared is None and reading.version is None

    async def noop():
        return "ran"

    # a change still runs (no replica can reuse anything meanwhile)
    assert run(versions.changing(_call(), state, state_effects.ALL, noop)) == "ran"


def test_config_calls_that_set_or_unset_are_relayed_inside_a_change():
    upstream, sessions, versions = _versions()
    call = _call(upstream=upstream)
    answer = run(versions.config_step(call))
    assert answer is not None and upstream.applied == ["set"]
    ops = [op for key, op in upstream.calls if key == SESSION]
    assert ops[0] == "set" and ops[-1] == "unset"  # marker first, marker removed last
    get = _call(
        base_pb2.ConfigRequest(
            session_id="s1",
            user_context=base_pb2.UserContext(user_id="user:ann@example.com"),
            operation=base_pb2.ConfigRequest.Operation(get=base_pb2.ConfigRequest.Get(keys=["a"])),
        )
    )
    assert run(versions.config_step(get)) is None  # reads are relayed as they are


def test_a_change_that_waits_too_long_for_its_turn_is_refused_alike_for_every_request():
    """A Config call and a statement that change a session's state give up the same way
    when other requests of the session keep the writer's turn (D6): one status, one message,
    one reason."""
    upstream, sessions, versions = _versions()
    versions.wait_seconds = 0.01
    state = sessions.get(SESSION)
    time_zone = _call(
        base_pb2.ConfigRequest(
            session_id="s1",
            user_context=base_pb2.UserContext(user_id="user:ann@example.com"),
            operation=base_pb2.ConfigRequest.Operation(
                set=base_pb2.ConfigRequest.Set(pairs=[base_pb2.KeyValue(key="spark.sql.session.timeZone", value="UTC")])
            ),
        ),
        upstream=upstream,
    )
    statement = _call(upstream=upstream)
    statement.facts.state_scope = state_effects.SESSION

    async def refusals():
        await state.gate.enter_read(1.0)  # another request of the session still runs
        found = []
        for step in (versions.config_step(time_zone), versions.statement_step(statement)):
            with pytest.raises(Refusal) as refused:
                await step
            found.append((refused.value.code, refused.value.message, refused.value.reason))
        return found

    config, statement_refusal = run(refusals())
    assert config == statement_refusal
    assert config[0] == grpc.StatusCode.UNAVAILABLE and config[2] == "session_busy"


def _plan_sql(kind: str, text: str = "x") -> tuple[base_pb2.Plan, Findings]:
    plan = base_pb2.Plan(command=commands_pb2.Command(sql_command=commands_pb2.SqlCommand(sql=text)))
    findings = Findings()
    findings.kinds |= {"command:sql_command", f"sql:{kind}"}
    return plan, findings


@pytest.mark.parametrize(
    ("kind", "roots", "scope"),
    [
        ("query", [], "none"),
        ("insert", ["InsertIntoHadoopFsRelationCommand"], "none"),
        ("set", ["SetCommand"], "session"),
        ("query", ["SetPathCommand"], "session"),  # Spark's reading wins over a wrong parse
        ("query", ["CreateViewCommand"], "all"),
        ("drop", [], "all"),
    ],
)
def test_a_statement_changes_the_widest_of_the_rewriters_and_sparks_reading(kind, roots, scope):
    plan, findings = _plan_sql(kind)
    findings.analysed_roots.extend(roots)
    assert request_scope(plan, findings, frozenset({"Project"})) == scope


def test_sql_nobody_classified_changes_everything():
    plan = base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query="SET x = 1")))
    assert request_scope(plan, Findings()) == "all"


def test_writes_change_names_only_when_they_may_create_a_table():
    insert = base_pb2.Plan(command=commands_pb2.Command(write_operation=commands_pb2.WriteOperation()))
    insert.command.write_operation.table.save_method = commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_INSERT_INTO
    save = base_pb2.Plan(command=commands_pb2.Command(write_operation=commands_pb2.WriteOperation()))
    save.command.write_operation.table.save_method = commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE
    assert request_scope(insert, Findings()) == "none"
    assert request_scope(save, Findings()) == "all"


def test_catalog_calls_by_what_they_do():
    plan = base_pb2.Plan(root=relations_pb2.Relation())
    reads, moves = Findings(), Findings()
    reads.kinds.add("catalog:list_tables")
    moves.kinds.add("catalog:set_current_database")
    assert request_scope(plan, reads) == "none"
    assert request_scope(plan, moves) == "session"


# -- one state read per request: the session's record is skipped while no other replica changed a session


def _learn(state, reading) -> None:
    """What SessionPositions does after a read: the memory is learned under its session token."""
    if reading.session is not None:
        state.version_seen, state.witness_seen, state.seen_epoch = reading.session, reading.witness, reading.epoch


def _session_reads(upstream, since: int) -> int:
    return sum(1 for key, op in upstream.calls[since:] if key == SESSION and op == "get_all")


def _replicas():
    """Two replicas (StateVersions of their own, each with its own memory) over one Spark."""
    upstream, sessions_a, a = _versions()
    sessions_b = SessionRegistry()
    b = StateVersions(upstream, sessions_b, clock=lambda: 1000.0)
    return upstream, (a, sessions_a.get(SESSION)), (b, sessions_b.get(SESSION))


def _settle(versions, state) -> None:
    for _ in range(2):  # a new record is written at the first read, settled from the second
        _learn(state, run(versions.read(_call(), state)))


def test_a_settled_session_costs_one_read_of_the_shared_record():
    upstream, (a, state), _ = _replicas()
    _settle(a, state)
    since = len(upstream.calls)
    reading = run(a.read(_call(), state))
    assert reading.version is not None and reading.session == upstream.confs[SESSION][VERSION_KEY]
    assert upstream.calls[since:] == [((SHARED_USER, SHARED_SESSION_ID), "get_all")]


def test_a_change_through_another_replica_makes_the_session_record_asked_again():
    upstream, (a, state_a), (b, state_b) = _replicas()
    _settle(a, state_a)
    before = state_a.version_seen

    async def change():
        inside = await a.read(_call(), state_a)  # B's change under way: A sees it
        assert inside.session is None and inside.version is None
        return "set"

    assert run(b.changing(_call(), state_b, state_effects.SESSION, change)) == "set"
    since = len(upstream.calls)
    after = run(a.read(_call(), state_a))
    assert _session_reads(upstream, since) == 1
    assert after.session not in (None, before)


def test_a_change_of_this_replica_alone_keeps_the_skip():
    upstream, (a, state), _ = _replicas()
    _settle(a, state)

    async def change():
        since = len(upstream.calls)
        inside = await a.read(_call(), state)  # its own change under way: the record is asked
        assert _session_reads(upstream, since) == 1 and inside.session is None
        return None

    run(a.changing(_call(), state, state_effects.SESSION, change))
    assert state.version_seen == upstream.confs[SESSION][VERSION_KEY]
    since = len(upstream.calls)
    reading = run(a.read(_call(), state))
    assert _session_reads(upstream, since) == 0 and reading.session == state.version_seen


def test_a_catalog_change_through_another_replica_makes_the_session_record_asked_again():
    upstream, (a, state_a), (b, state_b) = _replicas()
    _settle(a, state_a)

    async def noop():
        return None

    run(b.changing(_call(), state_b, state_effects.ALL, noop))
    since = len(upstream.calls)
    run(a.read(_call(), state_a))
    assert _session_reads(upstream, since) == 1


def test_a_replica_that_died_mid_change_of_a_session_ends_every_skip():
    now = [1000.0]
    upstream, sessions, a = _versions(clock=lambda: now[0])
    state = sessions.get(SESSION)
    _settle(a, state)
    shared = upstream.confs[(SHARED_USER, SHARED_SESSION_ID)]
    # another replica marked a change of some session, then died before moving its witness
    shared["rowgate.state.touching.dead.m1"] = repr(now[0] + 60)
    since = len(upstream.calls)
    run(a.read(_call(), state))
    assert _session_reads(upstream, since) == 1  # a session change may be under way
    _learn(state, run(a.read(_call(), state)))
    now[0] += 61  # its lease ended: the change may have happened, unseen
    since = len(upstream.calls)
    run(a.read(_call(), state))
    assert _session_reads(upstream, since) == 1
    assert "rowgate.state.touching.dead.m1" not in shared and "rowgate.state.sessions.dead" in shared


def test_a_lost_shared_record_ends_every_skip():
    upstream, (a, state), _ = _replicas()
    _settle(a, state)
    upstream.confs.pop((SHARED_USER, SHARED_SESSION_ID))  # Spark lost the shared session
    for _ in range(2):
        since = len(upstream.calls)
        _learn(state, run(a.read(_call(), state)))
        assert _session_reads(upstream, since) == 1


def test_a_memory_the_session_record_confirms_is_skipped_from_then_on():
    """SessionPositions learns its memory once (`_learn` at the first read only); the next
    settled read that confirms the token is enough to skip from then on."""
    upstream, (a, state), _ = _replicas()
    _learn(state, run(a.read(_call(), state)))  # a fresh record: learned, nothing to skip under
    run(a.read(_call(), state))  # settled and the same token: confirmed
    since = len(upstream.calls)
    run(a.read(_call(), state))
    assert _session_reads(upstream, since) == 0


def test_witnesses_of_replicas_gone_for_longer_than_the_idle_bound_are_retired():
    """Every start of a replica names it afresh: the witnesses of replicas that stopped are
    removed once idle for WITNESS_IDLE_SECONDS, so the shared record stays bounded."""
    now = [1000.0]
    upstream = ConfUpstream()
    sessions_a, sessions_b = SessionRegistry(), SessionRegistry()
    a = StateVersions(upstream, sessions_a, clock=lambda: now[0])
    b = StateVersions(upstream, sessions_b, clock=lambda: now[0])
    state_a, state_b = sessions_a.get(SESSION), sessions_b.get(SESSION)
    shared = upstream.confs.setdefault((SHARED_USER, SHARED_SESSION_ID), {})
    for restart in range(20):  # replicas that stopped, one of them from before witnesses had a time
        shared[f"{WITNESS_PREFIX}old{restart}"] = witness_value(now[0]) if restart else "token-without-time"
    _settle(a, state_a)
    _settle(b, state_b)
    # b changes a session now and then: its witness stays fresh
    now[0] += WITNESS_IDLE_SECONDS / 2
    run(b.changing(_call(), state_b, state_effects.SESSION, lambda: asyncio.sleep(0)))
    assert not run(a.read(_call(), state_a)).fresh
    # the untimed one was retired at once (and a's witness moved then); the others are not idle yet
    assert len([k for k in shared if k.startswith(WITNESS_PREFIX)]) == 19 + 2
    assert WITNESS_PREFIX + "old0" not in shared
    _learn(state_a, run(a.read(_call(), state_a)))
    _learn(state_b, run(b.read(_call(), state_b)))
    now[0] += WITNESS_IDLE_SECONDS / 2 + 1
    since = len(upstream.calls)
    run(a.read(_call(), state_a))  # the keep-alive read would do the same
    # gone: every stopped replica's witness; kept: b's (fresh) and a's (moved by the retirement)
    assert sorted(k for k in shared if k.startswith(WITNESS_PREFIX)) == sorted(WITNESS_PREFIX + r for r in (a.replica, b.replica))
    assert not [k for k in shared if k.startswith(TOUCHING_PREFIX)]  # the retirement's marker is gone
    assert _session_reads(upstream, since) == 1  # the witness set changed: nothing skipped
    # b, which settled under the old witness set, asks its session's record again too (fails safe)
    since = len(upstream.calls)
    run(b.read(_call(), state_b))
    assert _session_reads(upstream, since) == 1


def test_a_retirement_is_marked_before_and_moves_the_retirers_witness_after():
    """Config has no compare-and-set: a retirement decided on an old read may remove a
    witness just moved. So it runs like a change of a session: marker, removal, the
    retiring replica's own witness moved, marker removed."""
    now = [1000.0]
    upstream, sessions, a = _versions(clock=lambda: now[0])
    shared = upstream.confs.setdefault((SHARED_USER, SHARED_SESSION_ID), {})
    shared[WITNESS_PREFIX + "gone"] = witness_value(now[0])
    _settle(a, sessions.get(SESSION))
    now[0] += WITNESS_IDLE_SECONDS + 1
    writes: list[tuple[str, list[str]]] = []
    record = upstream.call

    async def spy(name, request, *, timeout=None):
        op = request.operation
        if request.session_id == SHARED_SESSION_ID and op.WhichOneof("op_type") in ("set", "unset"):
            keys = [p.key for p in op.set.pairs] if op.WhichOneof("op_type") == "set" else list(op.unset.keys)
            writes.append((op.WhichOneof("op_type"), [k.rsplit(".", 1)[0] if k.startswith(TOUCHING_PREFIX) else k for k in keys]))
        return await record(name, request, timeout=timeout)

    upstream.call = spy
    run(a.read(_call(), sessions.get(SESSION)))
    touching = TOUCHING_PREFIX + a.replica
    assert writes == [
        ("set", [touching]),
        ("unset", [WITNESS_PREFIX + "gone"]),
        ("set", [WITNESS_PREFIX + a.replica]),
        ("unset", [touching]),
    ]
