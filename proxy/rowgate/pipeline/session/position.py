"""Each session's current catalog and database, learned once and kept.

A one-part table name means a different table in a session that ran `USE sales`, so the
proxy must resolve names with the session's own position. It asks the upstream the first
time it needs the position of a session, and again only after a request that may have
moved it (`USE`, `SET CATALOG`, the Catalog API's setCurrent*) was answered by Spark,
never per query.

Reading the state is entering the session's gate as a reader (proxy/rowgate/pipeline/
session/state_gate.py): the request waits for a statement of the same session that is changing
the state, and holds the state until Spark analysed it (its first upstream response).

`of_versioned` also reads the state version Spark holds (proxy/rowgate/pipeline/
session/epoch.py): when the session's version is not the one this memory was learned
under (another connection or replica changed the session), the memory is learned again;
when the shared catalog's version moved, cached catalog answers are dropped.
"""

from __future__ import annotations

import grpc

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.session.epoch import StateVersions, Version
from rowgate.pipeline.session.recall import SessionRecall
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from rowgate.pipeline.session.state_gate import GateTimeout, ReadTicket

# How long a request waits for a statement of its session that changes the session's state.
STATE_WAIT_SECONDS = 120.0
POSITION = "SELECT current_catalog(), current_database()"
# The same where the session's SQL path leaves out the built-in functions (Spark 4.3).
POSITION_QUALIFIED = "SELECT system.builtin.current_catalog(), system.builtin.current_database()"


def hold_until_analysed(call: Call, ticket: ReadTicket) -> None:
    """Release `ticket` at the request's first upstream response or at its end."""
    call.facts.state_read = ticket
    call.on_finish.append(ticket.release)
    call.add_hook("first_response", lambda raw: ticket.release())


class SessionPositions:
    def __init__(
        self, sessions: SessionRegistry, catalog: UpstreamCatalog, wait_seconds: float = STATE_WAIT_SECONDS,
        recorder: SessionRecall | None = None, versions: StateVersions | None = None,
    ) -> None:  # fmt: skip
        self.sessions = sessions
        self.catalog = catalog
        self.wait_seconds = wait_seconds
        # re-learns and records what else the session holds (proxy/rowgate/pipeline/session/recall.py)
        self.recorder = recorder
        # the state versions Spark holds (proxy/rowgate/pipeline/session/epoch.py); None: not kept
        self.versions = versions
        self._shared_seen: str | None = None  # the shared version the catalog's answers are from

    def state(self, call: Call) -> SessionState:
        return self.sessions.get((call.user_id, call.session_id))

    async def of(self, call: Call) -> SessionState:
        state, _ = await self._of(call, versioned=False)
        return state

    async def of_versioned(self, call: Call) -> tuple[SessionState, Version | None]:
        """The state and the version it is current under (None: unsettled, reuse nothing)."""
        return await self._of(call, versioned=self.versions is not None)

    async def _of(self, call: Call, versioned: bool) -> tuple[SessionState, Version | None]:
        state = self.state(call)
        try:
            ticket = await state.gate.enter_read(self.wait_seconds)
        except GateTimeout:
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"a statement of this session that changes its state ran longer than {self.wait_seconds:.0f}s; "
                "rowgate does not resolve names while it runs; retry when it finished",
                reason="session_busy",
            ) from None
        hold_until_analysed(call, ticket)
        version = session = reading = None
        if versioned:
            assert self.versions is not None
            reading = await self.versions.read(call, state)
            version, session = reading.version, reading.session
            if reading.shared is not None and reading.shared != self._shared_seen:
                self._shared_seen = reading.shared
                self.catalog.invalidate()  # another replica may have changed what names mean
            if session is None or session != state.version_seen:
                state.position_known = False  # changed through another connection or replica
                state.recalled = False
        if state.position_known and (state.recalled or self.recorder is None):
            return state, version
        async with state.lock:
            if not state.position_known:
                session_ref = (call.user_id, call.session_id)
                try:
                    rows = await self.catalog.run_sql_rows(POSITION, session=session_ref)
                except UpstreamSqlError as e:
                    if e.error_class != "UNRESOLVED_ROUTINE":
                        raise
                    rows = await self.catalog.run_sql_rows(POSITION_QUALIFIED, session=session_ref)
                state.current_catalog, state.current_schema = rows[0][0], rows[0][1]
                state.position_known = True
            if not state.recalled and self.recorder is not None:
                await self.recorder.recall(call, state)
                state.recalled = True
            if session is not None and reading is not None:
                # with what proves it current without asking again (session/epoch.py)
                state.version_seen, state.witness_seen, state.seen_epoch = session, reading.witness, reading.epoch
        return state, version

    def moved(self, call: Call) -> None:
        """The session may be elsewhere now: ask again before the next resolution."""
        self.state(call).position_known = False
