"""The state version Spark holds, and every change of state moves.

A verdict of Spark's analysis (proxy/rowgate/pipeline/enforce/second_opinion.py), a remembered
rewrite (proxy/rowgate/rewrite/sql/memo.py) and the proxy's memory of a session's position
and temp views are all computed from state that can change behind them: the session's
settings, variables, SQL path, temp views and functions, and the catalog every session
shares. Changes may come through this connection, another connection of the same session,
or another replica. So the proxy keeps a *version* of that state in Spark, where every
replica reads what any replica wrote, and reuses a result only under the version it was
computed under.

Two records, each in a Spark session's own configuration (no caller may set, unset or
reset `rowgate.*` keys, admins included: proxy/rowgate/pipeline/statements/guard_config.py):

- the caller's session holds the version of the session's state;
- an internal session every replica shares (user `rowgate-internal`, a fixed id) holds the
  version of the shared catalog.

Each record is `rowgate.state.version` (a random token, never reused) and one
`rowgate.state.changing.<id>` marker per change under way, whose value is the time (Unix
seconds) its writer's lease ends. A replica relaying a request that may change state
(proxy/rowgate/policy/state_effects.py says which) marks the record(s) before it forwards
the request, keeps the lease fresh while it runs, and once Spark finished it writes a new
token and then removes its marker (`changing`). A reader (`read`) asks both records with
one Config call each (the session's is often skipped: below), and gets a `Version` only
when both are *settled*: a token is there and no live marker. Why that suffices: a result computed after a settled
read that saw tokens (s, c), and reused after another settled read that sees (s, c) again,
saw the same state as the reuse: a change applied in between would have shown its marker
at one of the reads or left a new token at the second.

One state read per request (issue 23, item 2). A reader asks the shared record first, with
one Config call, and the caller's session record only when the shared record cannot prove
that the session's token is still the one this replica holds (`SessionState.version_seen`).
For that, every change of a caller's session also leaves a trace in the shared record: a
change of everything marks it as above (and moves its token); a change of the session alone
marks it with `rowgate.state.touching.<replica>.<id>` (a lease like the others, which leaves
the catalog's token settled) and, once Spark finished, moves the relaying replica's *witness*
`rowgate.state.sessions.<replica>` (a new token) before removing the marker. A read may then
skip the session's record when all of these hold:

- the shared record is settled and was not just written (a lost shared session loses the
  witnesses too; its fresh token differs from the one remembered);
- no other replica's session-change marker is live or expired;
- the catalog's token and every other replica's witness are what they were at a read of the
  shared record made *before* the session's record was last read (or, for a change this
  replica relayed alone, before the read whose token that change replaced);
- this replica relayed no change of the session since then (`SessionState.local_epoch`, a
  count kept in memory: a change under way here never skips).

Why: a change of the session by another replica marks the shared record before Spark runs
it and moves that replica's witness after, so at any later read either its marker is there
or the witness moved; a change this replica relays is counted in memory. A session-change
marker whose lease ended (its writer died after, perhaps, the change ran) moves that
writer's witness when a reader removes it. A session that Spark lost or re-created without
any replica relaying a change (a restart, an idle expiry) is not caught here but by Spark
itself: the proxy pins the server-side session id on every forwarded request
(proxy/rowgate/pipeline/session/upstream.py), so nothing checked under the old session runs
in the new one. The cost moves to changes: a change of a session writes the shared record
three times more. A change through any other replica makes every replica ask each session's
record once more (the witness is per replica, not per session), which fails safe.

Witnesses are bounded. Each replica names itself afresh at every start, so a witness would
otherwise outlive its replica for the life of the Spark server, one key per restart, and
every read of the shared record would list them all. A witness's value is therefore
`<token>@<Unix seconds it was written>`, and a replica that reads the shared record (every
`KEEPALIVE_SECONDS` at least) retires every other replica's witness untouched for
`WITNESS_IDLE_SECONDS` (30 leases: an hour; a value without a time, written by a proxy from
before this rule, counts as untouched). So the shared record holds at most the witnesses
written in the last `WITNESS_IDLE_SECONDS` plus a keep-alive period. Retiring is fail-safe:
readers compare the whole witness set, pairs of replica and value (`read`:
`state.witness_seen == witness`), so a witness that goes makes every replica ask its
sessions' records again. Config has no compare-and-set, though: a retirement decided on an
old read may remove a witness its replica has just moved, hiding that move. So a retirement
is carried out like a change of a session: the retiring replica marks the shared record
(`touching`, with a lease), removes the idle witnesses, moves its own witness, then removes
its marker. A reader after it sees the marker or the retiring replica's moved witness, which
is newer than any read made before the hidden move began. A replica that relays no change of
a session for an hour loses its witness and costs one more read of each session's record
per replica when it is retired.

No read at all is not offered: that another replica changed nothing can only be learned by
asking, or taken on an operator's word that this process is the only gateway (not built).

Failing closed: a record without a token (a new session, a `RESET`, a shared session Spark
lost) or with an expired marker (its writer died) is given a new token and counts as
unsettled for that request; an unreadable record, or a shared session Spark closed, is
unsettled too. Unsettled means "analyse again, remember nothing", never "reuse".

The shared session is kept alive (a Config call every `KEEPALIVE_SECONDS` from every
replica), so Spark does not close it for idleness while any replica runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from rowgate.catalog.upstream_sql import spark_error
from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.pipeline.session.confirmed_run import run_to_end
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from rowgate.pipeline.session.state_gate import GateTimeout
from rowgate.policy import state_effects
from rowgate.policy.predicate_semantics import SEMANTIC_SETTINGS
from rowgate.upstream.channel import Upstream

log = logging.getLogger("rowgate.sessions")

RECORD_PREFIX = "rowgate.state."
VERSION_KEY = RECORD_PREFIX + "version"
CHANGING_PREFIX = RECORD_PREFIX + "changing."
# In the shared record only: a change of some caller's session under way (marker, with its
# lease), and each replica's witness token, moved after every change of a session it relayed.
TOUCHING_PREFIX = RECORD_PREFIX + "touching."
WITNESS_PREFIX = RECORD_PREFIX + "sessions."
# A change's marker lives this long unless its writer renews it (every quarter of it).
LEASE_SECONDS = 120.0
# Another replica's witness not written for this long is retired (module docstring).
WITNESS_IDLE_SECONDS = 30 * LEASE_SECONDS
KEEPALIVE_SECONDS = 60.0
SHARED_USER = "rowgate-internal"
SHARED_SESSION_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "urn:rowgate:shared-state:v1"))

T = TypeVar("T")


@dataclass(frozen=True)
class Version:
    """Settled tokens of the session's state and of the shared catalog."""

    session: str
    shared: str


@dataclass(frozen=True)
class Reading:
    """What one read found: each record's token when no change is under way (else None), and
    whether a token was only just written (a new session, a RESET, a dead writer's marker):
    the proxy's memory of the session may be learned under it, but no result is remembered."""

    session: str | None
    shared: str | None
    fresh: bool = False
    # The other replicas' witness tokens, read before the session's record: remembered with
    # the session's token (SessionState.witness_seen); None: nothing may be skipped later.
    witness: tuple | None = None
    epoch: int = 0  # SessionState.local_epoch when the read began

    @property
    def version(self) -> Version | None:
        if self.session is None or self.shared is None or self.fresh:
            return None
        return Version(self.session, self.shared)


@dataclass(frozen=True)
class _Where:
    user_id: str
    session_id: str
    observed: str = ""  # client_observed_server_side_session_id, for a caller's session


@dataclass
class _Record:
    token: str | None
    live: frozenset[str]  # markers whose lease has not ended
    expired: tuple[str, ...]
    touching: frozenset[str] = frozenset()  # live session-change markers (shared record)
    touching_expired: tuple[str, ...] = ()
    witnesses: tuple[tuple[str, str], ...] = ()  # (replica, token), sorted (shared record)


def session_busy() -> Refusal:
    """The refusal of a change of a session's state whose writer's turn
    (session/state_gate.py) did not come within the wait: one condition, so one answer,
    whichever request (a Config call, a statement) asked for the turn."""
    return Refusal(
        grpc.StatusCode.UNAVAILABLE,
        "other requests of this session still run on the state this request changes; retry when they finished",
        reason="session_busy",
    )


def session_changed() -> Refusal:
    """The refusal of a change of a session's state when another statement of the session
    changed that state between this request's check and its turn to write: the check no
    longer holds, so the client runs it again (whichever step asked for the turn)."""
    return Refusal(
        grpc.StatusCode.ABORTED,
        "another statement of this session changed its state while this one was checked; run it again",
        reason="session_changed",
    )


def new_token() -> str:
    return uuid.uuid4().hex


def witness_value(now: float) -> str:
    """A witness's value: a fresh token, and when it was written (for retiring it)."""
    return f"{new_token()}@{now!r}"


def witness_written(value: str) -> float | None:
    """When a witness was written; None for a value without a readable time.

    >>> witness_written("ab12@1000.5"), witness_written("ab12")
    (1000.5, None)
    """
    _, at, written = value.rpartition("@")
    try:
        return float(written) if at else None
    except ValueError:
        return None


def idle_witnesses(witnesses: Iterable[tuple[str, str]], mine: str, now: float) -> list[str]:
    """The other replicas whose witness nobody wrote for `WITNESS_IDLE_SECONDS` (or whose
    value carries no time), to retire.

    >>> idle_witnesses([("r1", "t@0.0"), ("r2", f"t@{3000.0!r}"), ("r3", "t"), ("me", "t@0.0")], "me", 4000.0)
    ['r1', 'r3']
    """
    idle = []
    for replica, value in witnesses:
        written = witness_written(value)
        if replica != mine and (written is None or written < now - WITNESS_IDLE_SECONDS):
            idle.append(replica)
    return idle


def parse_record(pairs: Iterable[tuple[str, str | None]], now: float) -> _Record:
    """A record from the pairs of a `get_all(prefix=RECORD_PREFIX)` answer.

    >>> r = parse_record([("rowgate.state.version", "t1"), ("rowgate.state.changing.a", "200"),
    ...                   ("rowgate.state.changing.b", "50"), ("rowgate.state.changing.c", "junk")], now=100.0)
    >>> r.token, sorted(r.live), r.expired
    ('t1', ['a', 'c'], ('b',))
    >>> r = parse_record([("rowgate.state.touching.r1.m", "200"), ("rowgate.state.touching.r2.n", "50"),
    ...                   ("rowgate.state.sessions.r2", "w2"), ("rowgate.state.sessions.r1", "w1")], now=100.0)
    >>> sorted(r.touching), r.touching_expired, r.witnesses
    (['r1.m'], ('r2.n',), (('r1', 'w1'), ('r2', 'w2')))
    """
    token = None
    markers: dict[str, tuple[set[str], list[str]]] = {CHANGING_PREFIX: (set(), []), TOUCHING_PREFIX: (set(), [])}
    witnesses: list[tuple[str, str]] = []
    for key, value in pairs:
        key = key if key.startswith(RECORD_PREFIX) else RECORD_PREFIX + key
        if key == VERSION_KEY:
            token = value or None
        elif key.startswith(WITNESS_PREFIX):
            witnesses.append((key[len(WITNESS_PREFIX) :], value or ""))
        elif key.startswith((CHANGING_PREFIX, TOUCHING_PREFIX)):
            prefix = CHANGING_PREFIX if key.startswith(CHANGING_PREFIX) else TOUCHING_PREFIX
            live, expired = markers[prefix]
            marker = key[len(prefix) :]
            try:
                deadline = float(value or "")
            except ValueError:
                live.add(marker)  # unreadable: taken as live (fails closed)
                continue
            (live.add(marker) if deadline > now else expired.append(marker))
    (live, expired), (touching, touching_expired) = markers[CHANGING_PREFIX], markers[TOUCHING_PREFIX]
    return _Record(
        token, frozenset(live), tuple(sorted(expired)),
        frozenset(touching), tuple(sorted(touching_expired)), tuple(sorted(witnesses)),
    )  # fmt: skip


def writer_of(marker: str) -> str:
    """The replica that wrote a marker (`<replica>.<token>`); '' for a marker of another form."""
    head, dot, _ = marker.partition(".")
    return head if dot else ""


class StateVersions:
    def __init__(
        self, upstream: Upstream, sessions: SessionRegistry | None = None, *, timeout: float = 30.0,
        clock: Callable[[], float] = time.time, wait_seconds: float = 120.0,
        observe: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self.upstream = upstream
        # This process's name in the shared record's witnesses and markers, never reused.
        self.replica = new_token()[:16]
        self.observe = observe  # called with "session" or "shared" for each record read
        self.sessions = sessions
        self.wait_seconds = wait_seconds  # for the session's writer gate (session/state_gate.py)
        self.timeout = timeout
        self.clock = clock
        self.shared = _Where(SHARED_USER, SHARED_SESSION_ID)
        self.shared_seen: str | None = None  # the shared token this replica last read
        self._shared_trouble = ""  # logged once per kind of trouble
        self._keepalive: asyncio.Task | None = None
        self.reads = 0
        self.changes = 0
        self.session_reads = 0  # reads that asked the session's record too

    # -- reading -------------------------------------------------------------------------
    async def read(self, call: Call, state: SessionState) -> Reading:
        """Both records' tokens, each when settled (see the module docstring): the shared
        record first, then the session's, unless the shared record proves that no other
        replica changed any session since this replica last read or wrote the session's."""
        self.reads += 1
        epoch = state.local_epoch  # before the reads: a change of this replica since shows
        shared, shared_fresh, witness = await self._settled_shared()
        if witness is not None and state.version_seen is not None and state.witness_seen == witness and state.seen_epoch == epoch:
            return Reading(state.version_seen, shared, shared_fresh, witness, epoch)
        self.session_reads += 1
        session, fresh = await self._settled(self._of(call, state))
        if self.observe is not None:
            self.observe("session")
        keep = witness if session is not None and not fresh else None
        if keep is not None and session == state.version_seen:
            # The memory is current (the record confirms it): from now on under this witness.
            state.witness_seen, state.seen_epoch = keep, epoch
        return Reading(session, shared, fresh or shared_fresh, keep, epoch)

    async def _settled(self, where: _Where) -> tuple[str | None, bool]:
        """(the token, or None while a change is under way; whether it was just written)."""
        token, fresh, _ = await self._settled_record(where)
        return token, fresh

    async def _settled_record(self, where: _Where) -> tuple[str | None, bool, _Record]:
        record = await self._get(where)
        if record.token is None or record.expired:
            # A new session, a RESET, or a writer that died: from now on a new state.
            token = new_token()
            await self._set(where, {VERSION_KEY: token})
            if record.expired:
                await self._unset(where, [CHANGING_PREFIX + m for m in record.expired])
            return (None if record.live else token), True, record
        return (None if record.live else record.token), False, record

    async def _settled_shared(self) -> tuple[str | None, bool, tuple | None]:
        """(the catalog's token as `_settled`; whether just written; the witness: the
        catalog's token and the other replicas' witness tokens, or None when a session
        change of another replica is under way or its writer died, or the record is not
        settled)."""
        try:
            token, fresh, record = await self._settled_record(self.shared)
            if record.touching_expired:
                await self._reap(record.touching_expired)
            retired = idle_witnesses(record.witnesses, self.replica, self.clock())
            if retired:
                await self._retire(retired)
        except grpc.aio.AioRpcError as e:
            if spark_error(e) is None:
                raise
            self._trouble(f"Spark refused the shared state session ({e.details()}); every plan is analysed again")
            return None, False, None
        finally:
            if self.observe is not None:
                self.observe("shared")
        if token is not None:
            self._shared_trouble = ""
            self.shared_seen = token
        mine = self.replica
        if token is None or fresh or record.touching_expired or retired or any(writer_of(m) != mine for m in record.touching):
            return token, fresh, None
        return token, fresh, (token, tuple(w for w in record.witnesses if w[0] != mine))

    async def _reap(self, markers: tuple[str, ...]) -> None:
        """Session-change markers whose writer died: the change may have happened, so each
        writer's witness moves (every replica asks its sessions' records again), then the
        markers go."""
        writers = {writer_of(m) or "unknown" for m in markers}
        await self._set(self.shared, {WITNESS_PREFIX + w: witness_value(self.clock()) for w in sorted(writers)})
        await self._unset(self.shared, [TOUCHING_PREFIX + m for m in markers])

    async def _retire(self, replicas: list[str]) -> None:
        """Removes idle witnesses inside a session-change marker, and moves this replica's
        witness before the marker goes (why: the module docstring). A failure part-way
        leaves the marker to its lease; a reader then reaps it and moves this witness."""
        marker = TOUCHING_PREFIX + f"{self.replica}.{new_token()}"
        await self._set(self.shared, {marker: repr(self.clock() + LEASE_SECONDS)})
        await self._unset(self.shared, [WITNESS_PREFIX + r for r in replicas])
        await self._set(self.shared, {WITNESS_PREFIX + self.replica: witness_value(self.clock())})
        await self._unset(self.shared, [marker])

    # -- changing ------------------------------------------------------------------------
    async def changing(self, call: Call, state: SessionState, scope: str, run: Callable[[], Awaitable[T]]) -> T:
        """Runs `run()` (which forwards the request and waits for Spark to finish it) inside a
        change of the records `scope` names (proxy/rowgate/policy/state_effects.py)."""
        if scope == state_effects.NONE:
            return await run()
        self.changes += 1
        records = [self._of(call, state)]
        shared = scope == state_effects.ALL
        mark = f"{self.replica}.{new_token()}"
        marker = CHANGING_PREFIX + mark
        # In the shared record: a catalog change unsettles the catalog's token; a change of the
        # session alone is a session-change marker, which only stops the skip of session reads.
        shared_marker = marker if shared else TOUCHING_PREFIX + mark
        seen = state.version_seen
        state.version_seen = None  # until this change is known to be the only one
        state.local_epoch += 1
        await self._mark(records, marker)
        task: asyncio.Future | None = None
        try:
            await self._mark_shared(shared_marker)
            renew = asyncio.ensure_future(self._renew(records, marker, shared_marker))
            task = asyncio.ensure_future(run())
            try:
                # Shielded: the change runs to its end even when the client goes away, and
                # the version moves only after it.
                return await asyncio.shield(task)
            finally:
                task.add_done_callback(lambda _: renew.cancel())
        finally:
            # Shielded: a client that goes away must not leave the marker behind.
            await asyncio.shield(self._finish_after(task, records, shared, marker, shared_marker, seen, state))

    async def _finish_after(
        self,
        task: asyncio.Future | None,
        records: list[_Where],
        shared: bool,
        marker: str,
        shared_marker: str,
        seen: str | None,
        state: SessionState,
    ) -> None:
        if task is not None:
            await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # retrieved here; the caller saw it already
        await self._finish(records, shared, marker, shared_marker, seen, state)

    async def _mark(self, records: list[_Where], marker: str) -> None:
        deadline = repr(self.clock() + LEASE_SECONDS)
        await asyncio.gather(*(self._set(where, {marker: deadline}) for where in records))

    async def _mark_shared(self, marker: str) -> None:
        try:
            await self._set(self.shared, {marker: repr(self.clock() + LEASE_SECONDS)})
        except grpc.aio.AioRpcError as e:
            if spark_error(e) is None:
                raise
            # Spark lost or closed the shared session: no replica can reuse a verdict now.
            self._trouble(f"Spark refused the shared state session ({e.details()}); every plan is analysed again")

    async def _renew(self, records: list[_Where], marker: str, shared_marker: str) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 4)
            try:
                await asyncio.gather(self._mark(records, marker), self._mark_shared(shared_marker))
            except (grpc.aio.AioRpcError, Refusal):
                pass  # the next renewal tries again; an expired marker fails closed anyway

    async def _finish(
        self, records: list[_Where], shared: bool, marker: str, shared_marker: str, seen: str | None, state: SessionState
    ) -> None:
        where = records[0]
        alone = False
        epoch = state.local_epoch  # another change of this replica from here on shows
        try:
            if seen is not None:
                record = await self._get(where)
                alone = record.token == seen and record.live <= {marker[len(CHANGING_PREFIX) :]}
            token = new_token()
            # The shared record's token (a catalog change) or this replica's witness (a change
            # of the session alone) moves before its marker goes: a reader who no longer sees
            # the marker sees the move. A write that fails leaves the marker to its lease.
            moved = {VERSION_KEY: new_token()} if shared else {WITNESS_PREFIX + self.replica: witness_value(self.clock())}
            results = await asyncio.gather(self._set(where, {VERSION_KEY: token}), self._quiet(self._set(self.shared, moved)))
            unsets: list[Awaitable[object]] = [self._unset(where, [marker])]
            if results[1]:
                unsets.append(self._quiet(self._unset(self.shared, [shared_marker])))
            await asyncio.gather(*unsets)
            if alone and state.local_epoch == epoch:
                state.version_seen = token  # nobody else changed the session meanwhile
                state.seen_epoch = epoch
        except (grpc.aio.AioRpcError, Refusal) as e:
            # The marker stays until its lease ends: until then every reader analyses again.
            log.warning("could not close a state change in Spark: %s", e)

    async def _quiet(self, write: Awaitable[None]) -> bool:
        try:
            await write
        except grpc.aio.AioRpcError as e:
            if spark_error(e) is None:
                raise
            return False
        return True

    # -- pipeline steps ------------------------------------------------------------------
    async def config_step(self, call: Call) -> Answer | None:
        """A Config call that sets or unsets settings, relayed inside a change of the session's version."""
        op = call.request.operation.WhichOneof("op_type") or ""
        scope = state_effects.scope_of(f"config:{op}")
        if scope == state_effects.NONE or not call.session_id or not _changes_semantics(call.request.operation):
            return await self._relay_unary(call, scope)
        # A change of the time zone or ANSI mode waits, as the session's writer, for the
        # requests that were checked under the old value until Spark analysed them
        # (proxy/rowgate/pipeline/enforce/predicate_settings.py), and holds new ones back meanwhile.
        assert self.sessions is not None
        state = self.sessions.get((call.user_id, call.session_id))
        try:
            await state.gate.enter_write(self.wait_seconds)
        except GateTimeout:
            raise session_busy() from None
        try:
            return await self._relay_unary(call, scope)
        finally:
            state.gate.leave_write(changed=False)

    async def analysis_step(self, call: Call) -> Answer | None:
        """An AnalyzePlan that changes state when Spark runs it: persist/unpersist (the shared
        cache), and, while no table is protected, catalog calls that change state (while one
        is, the second opinion refuses them in an analysis)."""
        kind = call.request.WhichOneof("analyze") or ""
        scope = state_effects.scope_of(f"analyze:{kind}")
        changing = state_effects.catalog_changes()
        if any(
            r.WhichOneof("rel_type") == "catalog" and r.catalog.WhichOneof("cat_type") in changing
            for r in _relations_of(call.request)
        ):
            scope = state_effects.ALL
        return await self._relay_unary(call, scope)

    async def statement_step(self, call: Call) -> Answer | None:
        """An ExecutePlan that changes settings, variables, functions or the catalog (but
        nothing the proxy remembers of the session: those are run by SessionEffects), run to
        its end inside a change of the version, as the session's writer (session/state_gate.py), with
        every response hook of the earlier steps applied."""
        scope = call.facts.state_scope
        if not scope or not call.session_id:
            return None
        # Shielded: the client going away must not leave the gate or the version half-way.
        return await asyncio.shield(asyncio.ensure_future(self._statement(call, scope)))

    async def _statement(self, call: Call, scope: str) -> Answer:
        assert self.sessions is not None
        state = self.sessions.get((call.user_id, call.session_id))
        ticket = call.facts.state_read
        seen = ticket.version if ticket is not None else state.gate.version
        try:
            # The read this request was checked under becomes the writer's hold: no writer
            # runs between the check and the run. Another upgrade under way: wait as a writer.
            upgraded = ticket is not None and await state.gate.upgrade(ticket, self.wait_seconds)
            if not upgraded:
                if ticket is not None:
                    ticket.release()  # this request's own read must not hold its write back
                await state.gate.enter_write(self.wait_seconds)
        except GateTimeout:
            raise session_busy() from None
        try:
            if state.gate.version != seen:
                raise session_changed()
            hook = call.response_hook
            outcome = await self.changing(call, state, scope, lambda: run_to_end(call, hook))
        finally:
            state.gate.leave_write(changed=False)  # nothing the proxy remembers changed
        return outcome.answer(call)

    async def _relay_unary(self, call: Call, scope: str) -> Answer | None:
        if scope == state_effects.NONE or not call.session_id:
            return None
        assert self.sessions is not None
        state = self.sessions.get((call.user_id, call.session_id))

        async def run() -> bytes:
            return await call.upstream.raw(call.method.name)(call.request.SerializeToString(), metadata=call.metadata)

        try:
            raw = await self.changing(call, state, scope, run)
        except grpc.aio.AioRpcError as e:
            e.call = call  # relayed as the upstream's error
            raise
        if call.first_response is not None:
            call.first_response(raw)
        return Answer([call.method.response_type.FromString(raw)])

    # -- keeping the shared session ------------------------------------------------------
    def start(self) -> None:
        if self._keepalive is None:
            self._keepalive = asyncio.ensure_future(self._keep_alive())

    async def stop(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    async def _keep_alive(self) -> None:
        # Sleeps first: the shared record is written by the first plan that reads it, and a
        # proxy that nobody asked anything yet has nothing upstream to keep alive (nor any
        # reason to talk to Spark before its first caller).
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            try:
                await self._settled_shared()
            except Exception as e:  # noqa: BLE001 - the upstream may be down; try again later
                log.debug("shared state session keep-alive failed: %s", e)

    def _trouble(self, message: str) -> None:
        if self._shared_trouble != message:
            self._shared_trouble = message
            log.error(message)

    # -- settings that change what a policy filter means --------------------------------
    async def settings(self, call: Call, state: SessionState, keys: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
        """`keys` as the caller's session holds them, and as the shared session holds them:
        the values Spark gives a session nobody changed (no caller reaches the shared
        session's settings; the proxy never sets these there). Both asked side by side, as
        options: a key an older Spark does not know (`spark.sql.timestampNanosTypes.enabled`
        before 4.3) is "" in both unless the caller set it."""
        op = base_pb2.ConfigRequest.Operation(get_option=base_pb2.ConfigRequest.GetOption(keys=list(keys)))
        mine, reference = await asyncio.gather(self._config(self._of(call, state), op), self._config(self.shared, op))
        return _pairs(mine), _pairs(reference)

    # -- Config calls --------------------------------------------------------------------
    @staticmethod
    def _of(call: Call, state: SessionState) -> _Where:
        return _Where(call.user_id, call.session_id, state.server_side_session_id)

    def _request(self, where: _Where, operation: base_pb2.ConfigRequest.Operation) -> base_pb2.ConfigRequest:
        request = base_pb2.ConfigRequest(
            session_id=where.session_id,
            user_context=base_pb2.UserContext(user_id=where.user_id, user_name=where.user_id),
            operation=operation,
        )
        if where.observed:
            request.client_observed_server_side_session_id = where.observed
        return request

    async def _get(self, where: _Where) -> _Record:
        op = base_pb2.ConfigRequest.Operation(get_all=base_pb2.ConfigRequest.GetAll(prefix=RECORD_PREFIX))
        response = await self._config(where, op)
        pairs = [(p.key, p.value if p.HasField("value") else "") for p in response.pairs]
        return parse_record(pairs, self.clock())

    async def _set(self, where: _Where, pairs: dict[str, str]) -> None:
        op = base_pb2.ConfigRequest.Operation(
            set=base_pb2.ConfigRequest.Set(pairs=[base_pb2.KeyValue(key=k, value=v) for k, v in pairs.items()])
        )
        await self._config(where, op)

    async def _unset(self, where: _Where, keys: list[str]) -> None:
        op = base_pb2.ConfigRequest.Operation(unset=base_pb2.ConfigRequest.Unset(keys=keys))
        await self._config(where, op)

    async def _config(self, where: _Where, op: base_pb2.ConfigRequest.Operation) -> base_pb2.ConfigResponse:
        try:
            return await self.upstream.call("Config", self._request(where, op), timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if spark_error(e) is not None:
                raise
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"upstream Spark Connect did not answer within {self.timeout:g}s rowgate's question of the"
                f" session's catalog and settings state ({e.code().name})",
                reason="upstream",
            ) from None


def _changes_semantics(operation: base_pb2.ConfigRequest.Operation) -> bool:
    """A Config set or unset of a setting that may change what a policy filter selects."""
    kind = operation.WhichOneof("op_type")
    keys = [p.key for p in operation.set.pairs] if kind == "set" else list(operation.unset.keys) if kind == "unset" else []
    wanted = {k.lower() for k in SEMANTIC_SETTINGS}
    return any(k.strip().lower() in wanted for k in keys)


def _pairs(response: base_pb2.ConfigResponse) -> dict[str, str]:
    return {p.key.lower(): (p.value if p.HasField("value") else "") for p in response.pairs}


class RequestKinds(Protocol):
    """What `request_scope` reads of a request's findings (enforce/findings.py's `Findings`),
    named here because sessions know nothing of the enforcement above them."""

    @property
    def kinds(self) -> Collection[str]: ...

    @property
    def analysed_roots(self) -> Collection[str]: ...


def request_scope(plan: base_pb2.Plan, findings: RequestKinds, query_roots: frozenset[str] = frozenset()) -> str:
    """What an ExecutePlan of `plan` may change (proxy/rowgate/policy/state_effects.py).

    Commands and catalog calls by their protobuf kind (the plan walker's `findings.kinds`,
    and the plan's own command); SQL statements by the widest of the rewriter's reading
    (`sql:<kind>`) and Spark's analysed root (`findings.analysed_roots`); SQL that neither
    classified counts as changing everything.
    """
    scopes = [state_effects.spark_root_scope(root, query_roots) for root in findings.analysed_roots]
    has_sql_kind = False
    for kind in findings.kinds:
        prefix = kind.split(":", 1)[0]
        if prefix == "sql":
            has_sql_kind = True
            scopes.append(state_effects.scope_of(kind))
        elif prefix == "catalog":
            scopes.append(state_effects.scope_of(kind))
        elif kind in ("relation:ml_relation", "command:ml_command"):
            scopes.append(state_effects.ALL)
    has_sql = "relation:sql" in findings.kinds
    if plan.WhichOneof("op_type") == "command":
        command = plan.command
        kind = command.WhichOneof("command_type") or ""
        if kind == "write_operation":
            write = command.write_operation
            method = None
            if write.WhichOneof("save_type") == "table":
                method = commands_pb2.WriteOperation.SaveTable.TableSaveMethod.Name(write.table.save_method)
            scopes.append(state_effects.write_scope(method, None))
        elif kind == "write_operation_v2":
            mode = commands_pb2.WriteOperationV2.Mode.Name(command.write_operation_v2.mode)
            scopes.append(state_effects.write_scope(None, mode))
        else:
            scopes.append(state_effects.scope_of(f"command:{kind}"))
        has_sql = has_sql or kind == "sql_command"
    elif plan.root.WhichOneof("rel_type") == "sql":
        has_sql = True
    if has_sql and not has_sql_kind and not findings.analysed_roots:
        scopes.append(state_effects.ALL)  # SQL nobody classified
    return state_effects.widest(scopes)


def _relations_of(msg: Message) -> Iterator[relations_pb2.Relation]:
    stack = [msg]
    while stack:
        current = stack.pop()
        if isinstance(current, relations_pb2.Relation):
            yield current
        for field, value in current.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                stack.extend(v for v in value.values() if hasattr(v, "ListFields"))
            elif field.is_repeated:
                stack.extend(value)
            else:
                stack.append(value)
