"""Each session's current catalog and database, learned once and kept.

A one-part table name means a different table in a session that ran `USE sales`, so the
proxy must resolve names with the session's own position. It asks the upstream the first
time it needs the position of a session, and again only after a request that may have
moved it (`USE`, `SET CATALOG`, the Catalog API's setCurrent*), never per query.
"""

from __future__ import annotations

from rowgate.pipeline.core import Call
from rowgate.pipeline.sessions import SessionRegistry, SessionState


class SessionPositions:
    def __init__(self, sessions: SessionRegistry, catalog):
        self.sessions = sessions
        self.catalog = catalog

    def state(self, call: Call) -> SessionState:
        return self.sessions.get((call.user_id, call.session_id))

    async def of(self, call: Call) -> SessionState:
        state = self.state(call)
        if state.position_known:
            return state
        async with state.lock:
            if not state.position_known:
                rows = await self.catalog.run_sql_rows(
                    "SELECT current_catalog(), current_database()", session=(call.user_id, call.session_id)
                )
                state.current_catalog, state.current_schema = rows[0][0], rows[0][1]
                state.position_known = True
        return state

    def moved(self, call: Call) -> None:
        """The session may be elsewhere now: ask again before the next resolution."""
        self.state(call).position_known = False
