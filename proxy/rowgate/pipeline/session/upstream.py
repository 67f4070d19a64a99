"""What the proxy remembers about a session holds only for the upstream session it saw.

Name resolution uses the session's current database and temp views as the proxy last saw
them, and the forced settings are applied once per session. A restarted Spark Connect
server (or one that expired the session) starts a fresh session under the same id: back
in `default`, without the temp views, with Spark's default settings. Rewriting with the
old memory would be wrong in the dangerous direction: `orders` checked as `mydb.orders`
(unprotected) is read by Spark as `default.orders` (protected), a name the proxy took for
a temp view is read as the protected table of that name.

Spark has the check built in: a request that carries `client_observed_server_side_session_id`
is refused with INVALID_HANDLE.SESSION_CHANGED when the session behind its id is not that
one. The proxy learns each session's server-side id from the upstream's own answers and
puts it on every request it forwards, whatever the client sent; so a request rewritten
with old memory never runs on a new session. When Spark answers SESSION_CHANGED (or
SESSION_CLOSED) the proxy forgets the session, and the client's next request starts over.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError, Message

from rowgate.pipeline.core import Call
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.responses.answer import Answer

SessionKey = tuple[str, str]  # (user_id, session_id) after pinning
OBSERVED = "client_observed_server_side_session_id"
# Spark's answers when the session behind an id is not the one the request observed.
GONE = ("INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_CLOSED")


class UpstreamSessions:
    """Keeps `SessionState.server_side_session_id` and puts it on forwarded requests; the id
    lives in the session's state, so forgetting the session forgets it too."""

    def __init__(self, sessions: SessionRegistry):
        self.sessions = sessions

    def server_side_id(self, key: SessionKey) -> str | None:
        state = self.sessions.find(key)
        if state is None or not state.server_side_session_id:
            return None
        return state.server_side_session_id

    def learned(self, key: SessionKey, server_side: str) -> None:
        """An answer of the upstream for this session said `server_side`."""
        if not server_side:
            return
        state = self.sessions.find(key)
        if state is not None and state.server_side_session_id not in ("", server_side):
            # Only possible for an answer to a request sent without the observed id (the
            # proxy's own first questions): the memory may be of the old session.
            self.sessions.forget(key)
            state = None
        if state is None:
            state = self.sessions.get(key)
        state.server_side_session_id = server_side

    async def step(self, call: Call) -> Answer | None:
        request = call.request
        if OBSERVED not in request.DESCRIPTOR.fields_by_name:
            return None
        key = (call.user_id, request.session_id)
        known = self.server_side_id(key)
        if known is not None:
            setattr(request, OBSERVED, known)
        if not call.method.client_streaming:
            response_type = call.method.response_type
            if "server_side_session_id" in response_type.DESCRIPTOR.fields_by_name:
                call.add_hook("first_response", lambda raw: self._learn_from(key, response_type, raw))
        call.add_hook("upstream_error", lambda details: self._maybe_gone(key, details))
        return None

    def _learn_from(self, key: SessionKey, response_type: type[Message], raw: bytes) -> None:
        try:
            server_side = response_type.FromString(raw).server_side_session_id
        except DecodeError:
            return  # the client will complain about the same bytes
        self.learned(key, server_side)

    def _maybe_gone(self, key: SessionKey, details: str) -> None:
        if any(marker in details for marker in GONE):
            self.sessions.forget(key)
