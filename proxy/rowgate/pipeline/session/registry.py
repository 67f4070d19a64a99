"""What the proxy knows about each caller's Spark session, without asking Spark per query.

Name resolution depends on the session's current catalog and database, and on its temp
views; both change only through requests that pass the proxy. The proxy asks the upstream
once when it first meets a session (or after a statement that may have changed them) and
keeps the answer; every other query resolves names from memory. The memory changes only
after Spark confirmed the statement that changed it (proxy/rowgate/pipeline/enforce/session_effects.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from rowgate.pipeline.session.state_gate import StateGate

SessionKey = tuple[str, str]  # (principal, session_id): how the upstream keys sessions too


@dataclass
class SessionState:
    current_catalog: str = "spark_catalog"
    current_schema: str = "default"
    position_known: bool = False  # current catalog/schema read from the upstream
    # temp views and the record of when they were made read from the upstream
    # (proxy/rowgate/pipeline/session/recall.py), and the connection that was last seen
    recalled: bool = False
    peer: str = ""
    # The session's state version (proxy/rowgate/pipeline/session/epoch.py) under which the
    # position and temp views above were learned or last changed by this replica alone;
    # None: unknown, learn them again before trusting them.
    version_seen: str | None = None
    # What makes asking the session's record again unnecessary (session_epoch.StateVersions.read):
    # the shared record's witness read before `version_seen` was, and this replica's count of
    # changes of the session it relayed (`local_epoch`) at that read.
    witness_seen: tuple | None = None
    seen_epoch: int = -1
    local_epoch: int = 0
    prepared: bool = False  # the forced session settings were applied upstream
    # The upstream's id for the session this memory is of (proxy/rowgate/pipeline/session/upstream.py).
    server_side_session_id: str = ""
    temp_views: set[str] = field(default_factory=set)
    # temp view -> (policy snapshot version at creation, tables its plan read): a view made
    # before a policy changed holds rows the new policy may hide.
    temp_view_versions: dict[str, tuple[int, frozenset]] = field(default_factory=dict)
    cached_relations: set[str] = field(default_factory=set)
    # (policy version, tables read) of each checkpoint the session made: its cached
    # relation keeps the rows the policies of that time allowed.
    checkpoint_versions: list[tuple[int, frozenset]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Orders requests around statements that change this state (proxy/rowgate/pipeline/session/state_gate.py).
    gate: StateGate = field(default_factory=StateGate)
    last_used: float = field(default_factory=time.monotonic)


class SessionRegistry:
    """Bounded: an idle session's state is dropped and simply re-learned when it returns."""

    def __init__(self, max_sessions: int = 50_000):
        self._sessions: OrderedDict[SessionKey, SessionState] = OrderedDict()
        self.max_sessions = max_sessions

    def get(self, key: SessionKey) -> SessionState:
        state = self._sessions.get(key)
        if state is None:
            state = self._sessions[key] = SessionState()
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        state.last_used = time.monotonic()
        return state

    def find(self, key: SessionKey) -> SessionState | None:
        """The state if the proxy has one, without creating it or counting it as a use."""
        return self._sessions.get(key)

    def forget(self, key: SessionKey) -> None:
        self._sessions.pop(key, None)

    def __len__(self) -> int:
        return len(self._sessions)
