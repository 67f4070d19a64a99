"""Each session's current catalog and database, learned once and kept.

A one-part table name means a different table in a session that ran `USE sales`, so the
proxy must resolve names with the session's own position. It asks the upstream the first
time it needs the position of a session, and again only after a request that may have
moved it (`USE`, `SET CATALOG`, the Catalog API's setCurrent*) was answered by Spark,
never per query.

Reading the state is entering the session's gate as a reader (proxy/rowgate/pipeline/
state_gate.py): the request waits for a statement of the same session that is changing
the state, and holds the state until Spark analysed it (its first upstream response).
"""

from __future__ import annotations

import grpc

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.sessions import SessionRegistry, SessionState
from rowgate.pipeline.state_gate import GateTimeout, ReadTicket

# How long a request waits for a statement of its session that changes the session's state.
STATE_WAIT_SECONDS = 120.0


def hold_until_analysed(call: Call, ticket: ReadTicket) -> None:
    """Release `ticket` at the request's first upstream response or at its end."""
    call.facts.state_read = ticket
    call.on_finish.append(ticket.release)
    previous = call.first_response

    def first(raw: bytes) -> None:
        ticket.release()
        if previous is not None:
            previous(raw)

    call.first_response = first


class SessionPositions:
    def __init__(self, sessions: SessionRegistry, catalog, wait_seconds: float = STATE_WAIT_SECONDS, recorder=None):
        self.sessions = sessions
        self.catalog = catalog
        self.wait_seconds = wait_seconds
        # re-learns and records what else the session holds (proxy/rowgate/pipeline/session_recall.py)
        self.recorder = recorder

    def state(self, call: Call) -> SessionState:
        return self.sessions.get((call.user_id, call.session_id))

    async def of(self, call: Call) -> SessionState:
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
        if state.position_known and (state.recalled or self.recorder is None):
            return state
        async with state.lock:
            if not state.position_known:
                rows = await self.catalog.run_sql_rows(
                    "SELECT current_catalog(), current_database()", session=(call.user_id, call.session_id)
                )
                state.current_catalog, state.current_schema = rows[0][0], rows[0][1]
                state.position_known = True
            if not state.recalled and self.recorder is not None:
                await self.recorder.recall(call, state)
                state.recalled = True
        return state

    def moved(self, call: Call) -> None:
        """The session may be elsewhere now: ask again before the next resolution."""
        self.state(call).position_known = False
