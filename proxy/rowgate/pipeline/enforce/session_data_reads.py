"""Reads of a session's temp views and checkpoints that hold protected rows count as filtered.

A temp view or checkpoint made from a protected table holds Spark's plan or rows of the
proxy's filtered read. A later query of it shows no protected table to the rewriter (the
name is a temp view, the relation a cached one), so nothing marked its result as
row-filtered, and Spark's execution metrics were relayed as they are: the scan inside the
view still counts rows below the policy filter (`numOutputRows`), the side channel
proxy/rowgate/responses/row_filter_metrics.py closes for direct reads.

This step, after enforcement, marks such a request `row_filter_applied`, so the
filtered-operations steps give it (and its reattaches) the same treatment as a direct
filtered read. Enforcement asks the same question (`reads_protected_session_data`) for
plan text: `EXPLAIN` and `df.explain()` of such a view print the plan Spark stored for
it, policy predicates included, so they get the note a filtered plan gets
(proxy/rowgate/pipeline/enforce/plan_text.py). It is cheap when it does not apply: only sessions
holding a temp view or checkpoint over protected data (or one whose origin the proxy does
not know) look at the plan at all. SQL texts count when they mention such a view by name.
"""

from __future__ import annotations

import re

from google.protobuf.message import Message

from rowgate.message_walk import set_fields
from rowgate.pipeline.core import Call, Step, step
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.rewrite.plan.compression import plans_of


def names_session_data(messages: list[Message], views: set[str], cached: bool) -> bool:
    """Does any of `messages` read one of the temp `views` (one-part names, lower case; any
    `global_temp.` view counts), or, with `cached`, any cached relation? A walk by descriptor."""
    for field, value in set_fields(messages):
        name = field.name
        if name == "cached_remote_relation" and field.message_type is not None:
            if cached:
                return True
        elif field.message_type is None and isinstance(value, str):
            if name in ("unparsed_identifier", "query", "expression") and _mentions(value, views):
                return True
    return False


def _mentions(text: str, views: set[str]) -> bool:
    """A view named alone or as ``system.session.<view>``, the form rowgate forwards.

    >>> _mentions("SELECT * FROM `system`.`session`.`v`", {"v"}), _mentions("SELECT * FROM db.v", {"v"})
    (True, False)
    """
    lowered = text.lower().replace("`", "")
    return "global_temp." in lowered or any(
        re.search(rf"(?:(?<![\w.])|(?<=system\.session\.)){re.escape(v)}(?![\w])", lowered) for v in views
    )


class SessionDataReads:
    def __init__(self, sessions: SessionRegistry, policies: PolicyCache) -> None:
        self.sessions = sessions
        self.policies = policies

    def step(self) -> Step:
        async def mark_session_data_reads(call: Call) -> None:
            self.mark(call)

        return step(mark_session_data_reads, ("ExecutePlan",), reads=("row_filter_applied",), writes=("row_filter_applied",))

    def mark(self, call: Call) -> None:
        if call.facts.row_filter_applied:
            return
        state = self.sessions.find((call.user_id, call.session_id))
        if state is not None and reads_protected_session_data(call, state, self.policies.fresh_snapshot()):
            call.facts.row_filter_applied = True


def protected_sources(call: Call, state: SessionState, snapshot: PolicySnapshot) -> frozenset[TableName]:
    """The protected tables behind the session data `call` reads (every protected table when
    the origin of some is unknown); empty when it reads none. Over the session's views and
    checkpoints, not only those named: for checks that must not miss one."""
    if not reads_protected_session_data(call, state, snapshot):
        return frozenset()
    protected = snapshot.protected_tables()
    found: set = set()
    for created in [*(state.temp_view_versions.get(v) for v in state.temp_views), *state.checkpoint_versions]:
        if created is None or created[0] < 0:
            return protected
        found |= set(created[1]) & protected
    return frozenset(found)


def reads_protected_session_data(call: Call, state: SessionState, snapshot: PolicySnapshot) -> bool:
    """Does `call`'s plan read a temp view or checkpoint of `state` (a session) that holds
    protected rows, or whose origin the proxy does not know, under `snapshot`?"""
    if not snapshot.has_any():
        return False
    protected = snapshot.protected_tables()

    def holds_protected(created: tuple[int, frozenset] | None) -> bool:
        return created is None or created[0] < 0 or bool(set(created[1]) & protected)

    views = {v for v in state.temp_views if "." not in v and holds_protected(state.temp_view_versions.get(v))}
    cached = any(holds_protected(created) for created in state.checkpoint_versions)
    if not views and not cached:
        return False
    return names_session_data(list(plans_of(call.request)), views, cached)
