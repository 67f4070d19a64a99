"""Streaming queries over protected tables: which ones they are, and what is said about them.

The plan of a streaming query is filtered when it starts; everything said about it later
comes on calls that carry no plan (proxy/rowgate/responses/streaming_redaction.py lists what
those answers hold and what is withheld). So the proxy remembers, per session, which query
ids were started from plans that read protected data, and judges those later calls by it:

- learned from Spark's answer only: the id is recorded when Spark's
  `write_stream_operation_start_result` passes through (on the ExecutePlan or on a
  ReattachExecute that continues it), never from the request. Spark keeps queries per
  session (another session's id is "not found"), and so does this memory;
- a query counts as protected when its plan applied a row filter, or read temp views or
  cached relations the proxy cannot vouch for (they may hold filtered rows of protected
  tables, and their scans sit below that filter);
- unknown ids fail closed: while any table is protected, a query the proxy has not seen
  start in this session (started before the proxy restarted, through another replica, or
  forgotten beyond the memory's bounds) is treated as protected, its errors redacted against
  every policy;
- `streaming_query_command` answers (progress, explain, exception) and the listener bus's
  events (per event, by the query each names) are redacted for admins and non-admins alike;
  so are error messages (`awaitTermination`, `processAllAvailable`, `awaitAnyTermination`),
  as errors of filtered reads are;
- ReattachExecute calls continuing such an operation get the same treatment; a reattach of
  an operation the proxy does not remember is judged by the query ids its messages name.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

from rowgate.message_walk import set_fields
from rowgate.pipeline.core import Call, Step, step
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.responses.error_redaction import ErrorSecrets, secrets_for
from rowgate.responses.streaming_redaction import Protected, relay_streaming, started_query
from rowgate.rewrite.sql.names import parse_multipart

SessionKey = tuple[str, str]
OperationKey = tuple[str, str, str]
# Commands whose answers speak about streaming queries.
STREAMING_COMMANDS = frozenset(
    {
        "write_stream_operation_start",
        "streaming_query_command",
        "streaming_query_manager_command",
        "streaming_query_listener_bus_command",
    }
)
MAX_QUERIES_PER_SESSION = 1000


def note_for(tables: list[str]) -> str:
    named = f" ({', '.join(tables)})" if tables else ""
    return (
        "== rowgate ==\nThis streaming query reads tables protected by row access policies"
        f"{named}; a row filter applies.\nThe plan itself is not shown because it would reveal the policy predicates.\n"
    )


UNKNOWN_NOTE = (
    "== rowgate ==\nrowgate did not see this streaming query start in this session (it was started before the "
    "proxy restarted, or through another proxy), so while row access policies are in force its plan is not "
    "shown and its progress omits the counts taken before any row filter.\n"
)


@dataclass(frozen=True)
class _Operation:
    """What a remembered streaming operation's reattaches need."""

    record: Protected | None | bool  # a start: its verdict to record (False: not a start)
    query_id: str | None  # a streaming_query_command: the query it asks about
    secrets: ErrorSecrets | None


class StreamingQueries:
    def __init__(
        self,
        policies: PolicyCache,
        sessions: SessionRegistry | None = None,
        max_sessions: int = 50_000,
        max_operations: int = 100_000,
    ) -> None:
        self.policies = policies
        self.sessions = sessions  # pipeline/session/registry.py SessionRegistry: the session's temp views
        self.max_sessions = max_sessions
        self.max_operations = max_operations
        self._queries: OrderedDict[SessionKey, OrderedDict[str, Protected | None]] = OrderedDict()
        # Every ExecutePlan operation seen: its streaming treatment, or None when it is not about
        # streaming queries (so its reattaches are left alone, and only forgotten ones fail closed).
        self._operations: OrderedDict[OperationKey, _Operation | None] = OrderedDict()

    # -- memory -------------------------------------------------------------------------

    def record(self, session: SessionKey, query_id: str, verdict: Protected | None) -> None:
        queries = self._queries.get(session)
        if queries is None:
            queries = self._queries[session] = OrderedDict()
            while len(self._queries) > self.max_sessions:
                self._queries.popitem(last=False)
        self._queries.move_to_end(session)
        queries[query_id] = verdict
        queries.move_to_end(query_id)
        while len(queries) > MAX_QUERIES_PER_SESSION:
            queries.popitem(last=False)

    def verdict(self, session: SessionKey, query_id: str, unknown: Protected | None) -> Protected | None:
        queries = self._queries.get(session)
        if queries is not None and query_id in queries:
            return queries[query_id]
        return unknown

    # -- the pipeline steps ---------------------------------------------------------------

    def steps(self) -> tuple[Step, Step]:
        """Their `response` hooks redact what Spark says of a streaming query; the SQL echo
        of a filtered operation (`response_as_sent`) is applied before them."""

        async def judge_streaming_commands(call: Call) -> None:
            self._execute(call)

        async def judge_streaming_continuations(call: Call) -> None:
            self._continue(call)

        return (
            step(
                judge_streaming_commands,
                ("ExecutePlan",),
                reads=("row_filter_applied", "error_secrets", "tables"),
                writes=("error_secrets",),
                hooks=("response",),
            ),
            step(
                judge_streaming_continuations,
                ("ReattachExecute", "ReleaseExecute"),
                writes=("error_secrets",),
                hooks=("response",),
            ),
        )

    def _execute(self, call: Call) -> None:
        plan = call.request.plan
        kind = plan.command.WhichOneof("command_type") if plan.WhichOneof("op_type") == "command" else None
        if kind not in STREAMING_COMMANDS:
            self._remember(call, None)
            return
        session = (call.user_id, call.session_id)
        snapshot = self.policies.fresh_snapshot()
        unknown = self._unknown(call, snapshot)
        record: Protected | None | bool = False
        query_id: str | None = None
        secrets: ErrorSecrets | None = None
        if kind == "write_stream_operation_start":
            record = self._start_verdict(call, snapshot)
            secrets = record.secrets if isinstance(record, Protected) else None
        elif kind == "streaming_query_command":
            query_id = plan.command.streaming_query_command.query_id.id
            protected = self.verdict(session, query_id, unknown)
            secrets = protected.secrets if protected is not None else None
        elif kind == "streaming_query_manager_command":
            # awaitAnyTermination raises the error of whichever query ended: any of them.
            secrets = unknown.secrets if unknown is not None else None
        operation = _Operation(record, query_id, secrets)
        self._arm(call, session, operation, unknown)
        self._remember(call, operation)

    def _remember(self, call: Call, operation: _Operation | None) -> None:
        if not call.request.operation_id:
            return  # no reattach can name it
        key = (call.user_id, call.session_id, call.request.operation_id)
        self._operations[key] = operation
        self._operations.move_to_end(key)
        while len(self._operations) > self.max_operations:
            self._operations.popitem(last=False)

    def _continue(self, call: Call) -> None:
        key = (call.user_id, call.request.session_id, call.request.operation_id)
        known = key in self._operations
        operation = self._operations.get(key)
        if call.method.name == "ReleaseExecute":
            if known and call.request.HasField("release_all"):
                del self._operations[key]
            return
        if known and operation is None:
            return  # not about streaming queries
        unknown = self._unknown(call, self.policies.fresh_snapshot())
        if operation is None:
            # Nobody remembers it: judge each message by the queries it names.
            operation = _Operation(False, None, unknown.secrets if unknown is not None else None)
        self._arm(call, (call.user_id, call.request.session_id), operation, unknown)

    def _arm(self, call: Call, session: SessionKey, operation: _Operation, unknown: Protected | None) -> None:
        if operation.secrets is not None and call.facts.error_secrets is None:
            call.facts.error_secrets = operation.secrets
        record = operation.record
        # A long stream (the listener bus) outlives policy changes: how an unknown query is
        # treated follows the current snapshot, asked again only when its version moved.
        current: list = [self.policies.fresh_snapshot().version, unknown]

        def judge(query_id: str) -> Protected | None:
            queries = self._queries.get(session)
            if queries is not None and query_id in queries:
                return queries[query_id]
            snapshot = self.policies.fresh_snapshot()
            if snapshot.version != current[0]:
                current[:] = [snapshot.version, self._unknown(call, snapshot)]
            return current[1]

        def hook(raw: bytes) -> bytes:
            if record is not False:
                started = started_query(raw)
                if started:  # Spark confirmed the query: from here on it is known
                    self.record(session, started, record if isinstance(record, Protected) else None)
            return relay_streaming(raw, judge, operation.query_id)

        call.add_hook("response", hook)

    # -- verdicts -------------------------------------------------------------------------

    def _start_verdict(self, call: Call, snapshot: PolicySnapshot) -> Protected | None:
        if not snapshot.has_any():
            return None
        if not call.facts.row_filter_applied and not self._reads_session_data(call):
            return None
        protected = {str(t) for t in snapshot.protected_tables()}
        tables = sorted(t for t in call.facts.tables if t in protected)
        secrets = call.facts.error_secrets or all_secrets(call, snapshot)  # admins too
        return Protected(secrets, note_for(tables))

    def _reads_session_data(self, call: Call) -> bool:
        """Does the query read data its session holds (temp views, cached relations)? Their
        plans were filtered when they were made, so this query's plan shows no filter, yet its
        source counts are taken below one. Judged from the plan; SQL texts by the names of
        the session's temp views they mention."""
        state = self.sessions.find((call.user_id, call.session_id)) if self.sessions is not None else None
        views = {v for v in (state.temp_views if state is not None else ()) if "." not in v}
        for field, value in set_fields([call.request.plan.command.write_stream_operation_start.input]):
            name = field.name
            if name == "cached_remote_relation":
                return True
            if name == "unparsed_identifier" and isinstance(value, str):
                last = value.strip("`").lower()
                parts = parse_multipart(value) or ()
                if len(parts) == 3 and (parts[0].lower(), parts[1].lower()) == ("system", "session"):
                    last = parts[2].lower()  # the form rowgate forwards temp views in
                if last.startswith("global_temp.") or last in views:
                    return True
            if name in ("query", "expression") and isinstance(value, str) and _mentions(value, views):
                return True
        return False

    @staticmethod
    def _unknown(call: Call, snapshot: PolicySnapshot) -> Protected | None:
        """How a query this session did not see start is treated: as protected while any
        table is protected, its errors redacted against every policy."""
        if not snapshot.has_any():
            return None
        return Protected(all_secrets(call, snapshot), UNKNOWN_NOTE)  # admins too


def _mentions(text: str, views: set[str]) -> bool:
    lowered = text.lower()
    return "global_temp" in lowered or any(re.search(rf"(?<![\w]){re.escape(v)}(?![\w])", lowered) for v in views)


def all_secrets(call: Call, snapshot: PolicySnapshot) -> ErrorSecrets:
    """Every policy's text: for operations whose policies the proxy did not place itself."""
    email = call.caller.principal.split(":", 1)[-1]
    return secrets_for([p.filter_sql for p in snapshot.all()], email, call.raw_request)
