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

from collections import OrderedDict

from google.protobuf.message import DecodeError

from proxy.pipeline.core import Answer, Call
from proxy.pipeline.sessions import SessionRegistry

SessionKey = tuple[str, str]  # (user_id, session_id) after pinning
OBSERVED = "client_observed_server_side_session_id"
# Spark's answers when the session behind an id is not the one the request observed.
GONE = ("INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_CLOSED")


class ServerSessionIds:
    """The upstream's server-side session id of each session, as its own answers said."""

    def __init__(self, max_sessions: int = 50_000):
        self._ids: OrderedDict[SessionKey, str] = OrderedDict()
        self.max_sessions = max_sessions

    def get(self, key: SessionKey) -> str | None:
        return self._ids.get(key)

    def record(self, key: SessionKey, server_side: str) -> str | None:
        """Remember `server_side`; returns the id it replaces when that was another one."""
        if not server_side:
            return None
        before = self._ids.get(key)
        self._ids[key] = server_side
        self._ids.move_to_end(key)
        while len(self._ids) > self.max_sessions:
            self._ids.popitem(last=False)
        return before if before not in (None, server_side) else None

    def forget(self, key: SessionKey) -> None:
        self._ids.pop(key, None)


class UpstreamSessions:
    def __init__(self, sessions: SessionRegistry, ids: ServerSessionIds):
        self.sessions = sessions
        self.ids = ids

    def learned(self, key: SessionKey, server_side: str) -> None:
        """An answer of the upstream for this session said `server_side`."""
        if self.ids.record(key, server_side) is not None:
            # Only possible for an answer to a request sent without the observed id (the
            # proxy's own first questions): the memory may be of the old session.
            self.sessions.forget(key)

    async def step(self, call: Call) -> Answer | None:
        request = call.request
        if OBSERVED not in request.DESCRIPTOR.fields_by_name:
            return None
        key = (call.user_id, request.session_id)
        known = self.ids.get(key)
        if known is not None:
            setattr(request, OBSERVED, known)
        if not call.method.client_streaming:
            response_type = call.method.response_type
            if "server_side_session_id" in response_type.DESCRIPTOR.fields_by_name:
                call.first_response = lambda raw: self._learn_from(key, response_type, raw)
        call.upstream_error = lambda details: self._maybe_gone(key, details)
        return None

    def _learn_from(self, key: SessionKey, response_type, raw: bytes) -> None:
        try:
            server_side = response_type.FromString(raw).server_side_session_id
        except DecodeError:
            return  # the client will complain about the same bytes
        self.learned(key, server_side)

    def _maybe_gone(self, key: SessionKey, details: str) -> None:
        if any(marker in details for marker in GONE):
            self.sessions.forget(key)
            self.ids.forget(key)
