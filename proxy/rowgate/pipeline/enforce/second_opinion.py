"""A second opinion from Spark: before a plan runs, Spark's analyzer says what it reads.

The rewriters decide from the proxy's own reading of SQL and plans; a parser or name
resolution mistake there would forward a protected read unfiltered. This step is the net
under every such mistake: while any table is protected, every plan an ExecutePlan makes
Spark run is analysed by Spark (AnalyzePlan explain, mode EXTENDED, in the caller's own
upstream session so that temp views, settings and the current database resolve as they
will when it runs) and refused when Spark would read a protected table anywhere but right
under the row filter the proxy places for this caller
(proxy/rowgate/rewrite/plan/analyzed_tree.py says how the text is read and why a caller's
text cannot forge the shape). Admins included. No exemption depends on what the rewriter
found.

What is analysed: a root relation as is; `spark.sql` (`sql_command`) as the `sql` relation of
its (rewritten) text, commands too, since AnalyzePlan never runs a command; other commands
(`saveAsTable`, `createOrReplaceTempView`, `writeStream`, checkpoints, MERGE, ...) by every
relation they carry. What cannot be analysed is refused while a table is protected, for
admins too:

- SQL scripts (`BEGIN ... END`) and `EXECUTE IMMEDIATE`: Spark runs them while analysing;
- a Catalog API call that changes state (`setCurrentDatabase`, `createTable`, `cacheTable`,
  `dropTempView`, ..., proxy/rowgate/policy/state_effects.py) anywhere but as the whole
  plan on its own, and in any AnalyzePlan: Spark runs catalog calls while it builds the
  plan. Alone it is not analysed (it reads no rows; its rules in policy/kinds.py apply);
  catalog calls that only read names (`currentDatabase`, `listTables`, ...) are analysed
  with the plan like any relation;
- expressions of a command outside its relations (a MERGE condition, an overwrite
  condition) that may hold a subquery: Spark would evaluate it without an analysis of
  its own;
- a plan of a kind the proxy does not know.

A plan Spark cannot analyse is not forwarded: Spark's own analysis error is the answer
(relayed like the upstream's errors, redacted for filtered reads). Forwarding it on the
argument that it fails the same way when it runs does not hold once state can change in
between (a view created through another connection makes the name resolve).

Verdicts are remembered, like the SQL rewrite memo (proxy/rowgate/rewrite/sql/memo.py), for
exactly the inputs they were given: the relation (plan ids renumbered, call sites dropped),
the context's `memo_context()` (caller, session position, temp views, and the state
version Spark holds for the session and the shared catalog, which every change of
settings, path, temp views, variables and catalog moves, through any connection or
replica: proxy/rowgate/pipeline/session/epoch.py) and the very policy snapshot object.
Without a settled state version nothing is remembered. Only queries are remembered;
refusals never are.

One check per plan shape: a verdict is also remembered under the plan's shape
(proxy/rowgate/rewrite/plan/literal_shape.py: the rewritten plan with the values of literals
at the allowed positions of proxy/rowgate/policy/literal_positions.py left out, their types
kept), bound to the same context and snapshot, so a dashboard sending one query with a new
day each time has Spark analyse it once. Values any policy's filter text or the caller's
identity holds stay in the shape: those are what the rewriter writes into the filter Spark's
rendering is compared with. The rewrite and the proxy's own checks still run on every text.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2, expressions_pb2, relations_pb2

from rowgate.catalog.upstream_sql import CLIENT_TYPE, spark_error
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rewrite_context import SessionRewriteContext
from rowgate.policy import state_effects
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicySnapshot
from rowgate.rewrite.plan import analyzed_tree as tree
from rowgate.rewrite.plan import file_metadata_reads, literal_shape
from rowgate.rewrite.sql import rewrite_sql
from rowgate.upstream.channel import Upstream

EXTENDED = base_pb2.AnalyzePlanRequest.Explain.ExplainMode.EXPLAIN_MODE_EXTENDED
# Root operators of plans that only read: their verdicts may be remembered. Anything else
# (commands, DDL) is analysed every time.
QUERY_ROOTS = frozenset(
    {
        "Aggregate", "CollectMetrics", "Deduplicate", "Distinct", "Except", "Expand", "Filter", "Generate",
        "GlobalLimit", "HiveTableRelation", "Intersect", "Join", "LateralJoin", "LocalLimit", "LocalRelation",
        "LogicalRDD", "Offset", "OneRowRelation", "Project", "Range", "RebalancePartitions", "Relation",
        "RelationV2", "Repartition", "RepartitionByExpression", "ResolvedHint", "Sample", "Sort",
        "SubqueryAlias", "Tail", "Union", "View", "Window", "WithCTE", "WithWatermark",
    }
)  # fmt: skip
MAX_ENTRIES = 20_000
# (table, predicates) the rewriter copied below a policy's barrier (Findings.leakproof_placed)
Placed = frozenset[tuple[TableName, str]]
# A leading comment, or a label, may hide what the statement is: `lbl: BEGIN ... END`.
_LEADING = re.compile(r"\s*(?:--[^\n]*\n|/\*.*?\*/)", re.DOTALL)
# In policy filter texts: quoted strings, and numbers that are not part of a name.
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_NUMERAL = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
_SCRIPT_START = re.compile(r"(?:BEGIN|EXECUTE)\b|(?:[A-Za-z_]\w*|`[^`]*`)\s*:(?!:)", re.IGNORECASE)


class SecondOpinion:
    def __init__(
        self, upstream: Upstream, *, timeout: float = 30.0, observe: Callable[..., None] | None = None,
        offload: Callable[..., Awaitable] | None = None,
    ) -> None:  # fmt: skip
        self.upstream = upstream
        # Runs the shape's parse off the event loop: in the caller's lane (pipeline/enforce/caller_lanes.py).
        self.offload = offload or asyncio.to_thread
        self.timeout = timeout
        self.observe = observe  # (remembered, seconds[, shape=True]) per checked relation
        # key -> (policy snapshot, root kind of the analysed plan)
        self._verdicts: OrderedDict[tuple, tuple[object, str]] = OrderedDict()
        # key -> (policy snapshot, reference block of the filtered read)
        self._references: dict[tuple, tuple[object, tuple[str, ...], str]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.shape_hits = 0
        self.misses = 0
        self._kept: tuple[object, tuple] | None = None  # (snapshot, its policies' quoted texts and numbers)

    async def check(self, call: Call, ctx: SessionRewriteContext, snapshot: PolicySnapshot, findings: Findings) -> None:
        """Raises `Refusal` when Spark would read a protected table outside its row filter,
        or when the request holds something Spark would run without an analysis; raises
        Spark's own error when Spark cannot analyse the plan.

        Appends the kind of every analysed root to `findings.analysed_roots`."""
        if not snapshot.has_any():
            return
        if call.method.name == "AnalyzePlan":
            # Spark analyses without running, except what it runs while planning.
            _refuse_run_while_planning(call.request, alone_ok=False)
            return
        if call.method.name != "ExecutePlan":
            return
        plan = call.request.plan
        kind = plan.WhichOneof("op_type")
        if kind not in ("root", "command"):
            raise Refusal.invalid(f"a plan of kind {kind!r} cannot be checked by rowgate", reason="second_opinion")
        if _refuse_run_while_planning(plan, alone_ok=True):
            return  # a state-changing catalog call alone: it reads no rows, nothing to analyse
        targets = analysis_targets(plan)
        if kind == "command":
            _refuse_unanalysed_expressions(plan.command)
            if not targets and set(findings.tables_read) & set(snapshot.protected_tables()):
                raise Refusal.invalid(
                    "this command reads protected tables in a way rowgate cannot check", reason="second_opinion"
                )
        for target in targets:
            root = await self._check_one(call, ctx, snapshot, target, _placed(findings))
            findings.analysed_roots.append(root)

    async def _check_one(
        self,
        call: Call,
        ctx: SessionRewriteContext,
        snapshot: PolicySnapshot,
        target: relations_pb2.Relation,
        placed: Placed = frozenset(),
    ) -> str:
        context = ctx.memo_context()
        key = (canonical_key(target), context)
        remember = getattr(ctx, "state_version", None) is not None  # a settled state version
        shape = None
        if remember:
            entry = self._recall(key, snapshot)
            if entry is not None:
                self.hits += 1
                if self.observe is not None:
                    self.observe(True, 0.0)
                return entry
            # Off the event loop: parsing a long text must not hold up other callers' requests.
            shape = await self.offload(self._shape_key, target, context, ctx, snapshot)
            entry = self._recall(shape, snapshot) if shape is not None else None
            if entry is not None:
                self.shape_hits += 1
                if self.observe is not None:
                    self.observe(True, 0.0, shape=True)
                return entry
        self.misses += 1
        started = time.perf_counter()
        root_kind = await self._verdict(call, ctx, snapshot, target, placed)
        if self.observe is not None:
            self.observe(False, time.perf_counter() - started)
        if remember and root_kind in QUERY_ROOTS:
            self._remember(key, (snapshot, root_kind))
            if shape is not None:
                self._remember(shape, (snapshot, root_kind))
        return root_kind

    def _recall(self, key: tuple[object, ...], snapshot: PolicySnapshot) -> str | None:
        with self._lock:
            entry = self._verdicts.get(key)
            if entry is not None:
                self._verdicts.move_to_end(key)
        return entry[1] if entry is not None and entry[0] is snapshot else None

    def _shape_key(
        self,
        target: relations_pb2.Relation,
        context: tuple[object, ...],
        ctx: SessionRewriteContext,
        snapshot: PolicySnapshot,
    ) -> tuple[object, ...] | None:
        """The key of the plan's shape (module docstring); None when it has none."""
        copy = _canonical_copy(target)
        kept = self._kept_values(ctx, snapshot)
        if not literal_shape.abstract_relation(copy, kept):
            return None
        return ("shape", copy.SerializeToString(deterministic=True), context)

    def _kept_values(self, ctx: SessionRewriteContext, snapshot: PolicySnapshot) -> Callable[[str], bool]:
        """Whether a literal's value stays in the shape: empty, part of a quoted string or
        equal to a number in any policy's filter text, or part of the caller's identity
        (what the rewriter writes into the filters Spark's rendering is compared with)."""
        known = self._kept
        if known is None or known[0] is not snapshot:
            texts = [p.filter_sql for table in sorted(snapshot.protected_tables(), key=str) for p in snapshot.policies_for(table)]
            quoted = "\n".join(m.group(1) or m.group(2) or "" for t in texts for m in _QUOTED.finditer(t))
            numbers = frozenset(_number(m.group(0)) for t in texts for m in _NUMERAL.finditer(t))
            known = self._kept = (snapshot, (quoted, numbers))
        quoted, numbers = known[1]
        caller = ctx.caller
        identity = "\n".join([caller.principal, caller.email, *sorted(caller.groups)])

        def kept(value: str) -> bool:
            return not value or value in quoted or value in identity or _number(value) in numbers

        return kept

    def _remember(self, key: tuple[object, ...], value: tuple[object, str]) -> None:
        with self._lock:
            self._verdicts[key] = value
            while len(self._verdicts) > MAX_ENTRIES:
                self._verdicts.popitem(last=False)

    async def _verdict(
        self,
        call: Call,
        ctx: SessionRewriteContext,
        snapshot: PolicySnapshot,
        target: relations_pb2.Relation,
        placed: Placed = frozenset(),
    ) -> str:
        """Refuses, or returns the kind of the analysed root; Spark's error when it cannot analyse it."""
        protected = snapshot.protected_tables()
        plain_text = await self._explain(call, target, relay_error=True)
        assert plain_text is not None
        try:
            plain = tree.analyzed_lines(plain_text)
        except tree.UnreadablePlan as e:
            raise _unreadable(e) from e
        read = tree.candidate_reads(plain, protected)
        if not read:
            return _root_kind(plain) or ""
        # The aliased plan only after the plain one: two analyses of one plan with DataFrame
        # arguments (`spark.sql(text, df=...)`) at once made Spark refuse one of them
        # (test_bypass_catalogue.py B9 failed). The references are plans of rowgate's own
        # text and are asked for beside it, one per table and per placed caller predicate.
        wrapper = relations_pb2.Relation()
        wrapper.subquery_alias.alias = tree.WRAPPER_ALIAS
        wrapper.subquery_alias.input.CopyFrom(target)
        placed_read = [(table, predicates) for table, predicates in sorted(placed, key=str) if table in read]
        relations: dict[TableName, str] = {}  # each table's relation line in the reference
        # gather() of differently typed awaitables answers a list of their union: named here.
        wrapped_text: str | None
        expected: dict[TableName, tree.Reference]
        with_predicates: list[dict[TableName, tuple[str, ...]]]
        wrapped_text, expected, *with_predicates = cast(
            "list[Any]",
            await asyncio.gather(
                self._explain(call, wrapper),
                self._expected(call, ctx, snapshot, sorted(read, key=str), relations=relations),
                *(self._expected(call, ctx, snapshot, [table], where=predicates) for table, predicates in placed_read),
            ),
        )
        for (table, _), more in zip(placed_read, with_predicates, strict=True):
            known = expected[table]
            expected[table] = (known if isinstance(known, frozenset) else frozenset({known})) | {more[table]}
        try:
            if wrapped_text is None:
                raise tree.UnreadablePlan("Spark analysed the plan but not the same plan under an alias")
            bad, root = tree.reads_outside_filters(plain, tree.analyzed_lines(wrapped_text), expected, protected)
        except tree.UnreadablePlan as e:
            raise _unreadable(e) from e
        if bad:
            first = bad[0]
            raise Refusal.denied(
                f"rowgate's second opinion: Spark would read {first.table} outside a row filter ({first.detail}); "
                "the request is refused",
                reason="second_opinion",
            )
        try:
            metadata = file_metadata_reads.row_metadata_use(plain, relations)
        except tree.UnreadablePlan as e:
            raise _unreadable(e) from e
        if metadata is not None:
            raise Refusal.denied(
                f"rowgate's second opinion: the plan learns about hidden rows from their files ({metadata});"
                " the request is refused",
                reason="second_opinion",
            )
        return root

    async def _expected(
        self,
        call: Call,
        ctx: SessionRewriteContext,
        snapshot: PolicySnapshot,
        tables: list[TableName],
        where: str = "",
        relations: dict[TableName, str] | None = None,
    ) -> dict[TableName, tuple[str, ...]]:
        """Spark's rendering of the row filter the proxy places on each table for this caller.

        `where`: leakproof caller predicates the rewriter copied below a policy's
        barrier (rewrite/sql/leakproof.py); the reference then reads `SELECT * FROM t WHERE <where>`,
        which the rewriter places the same way. `relations`, when given, gets each table's
        relation line in the reference (rewrite/plan/file_metadata_reads.py).
        """
        out: dict[TableName, tuple[str, ...]] = {}
        for table in tables:
            # Spark renders the filter under the session's settings: keyed by the state version too.
            version = getattr(ctx, "state_version", None)
            key = (table, ctx.caller, ctx.is_admin, id(snapshot), where, version)
            known = self._references.get(key) if version is not None else None
            if known is None or known[0] is not snapshot:
                try:
                    probe = await asyncio.to_thread(
                        rewrite_sql, "SELECT * FROM " + table.sql() + (" WHERE " + where if where else ""), ctx
                    )
                except Refusal as e:  # the rewriter's check that refused the probe is the rule
                    raise Refusal.denied(
                        f"the row filter of {table} cannot be placed: {e.message}", reason="second_opinion", rule=e.rule
                    ) from e
                reference = relations_pb2.Relation(sql=relations_pb2.SQL(query=probe.sql))
                text = await self._explain(call, reference)
                try:
                    if text is None:
                        raise tree.UnreadablePlan(f"Spark cannot analyse the filtered read of {table}")
                    lines = tree.analyzed_lines(text)
                    block = tree.reference_block(lines, table)
                    relation = file_metadata_reads.relation_text(lines, table)
                except tree.UnreadablePlan as e:
                    raise _unreadable(e) from e
                known = (snapshot, block, relation)
                if version is not None:
                    with self._lock:
                        if len(self._references) > MAX_ENTRIES:
                            self._references.clear()
                        self._references[key] = known
            out[table] = known[1]
            if relations is not None:
                relations[table] = known[2]
        return out

    async def _explain(self, call: Call, relation: relations_pb2.Relation, relay_error: bool = False) -> str | None:
        """Spark's EXTENDED explain of `relation` in the caller's session; None: Spark refused it.

        `relay_error`: Spark's refusal is raised for the transport to relay as the request's
        answer (redacted like any upstream error of the request), and nothing runs."""
        request = base_pb2.AnalyzePlanRequest(session_id=call.session_id, client_type=CLIENT_TYPE)
        request.user_context.CopyFrom(call.request.user_context)
        # The session the client believes in: after an upstream restart Spark answers the
        # check with SESSION_CHANGED (a Spark error: the plan goes on and gets the same
        # answer) instead of silently analysing in a new session without its temp views.
        observed = getattr(call.request, "client_observed_server_side_session_id", "")
        if observed:
            request.client_observed_server_side_session_id = observed
        request.explain.plan.root.CopyFrom(relation)
        request.explain.explain_mode = EXTENDED
        try:
            response = await self.upstream.call("AnalyzePlan", request, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            if spark_error(err) is not None:
                if relay_error:
                    err.call = call  # audited and redacted as the request's
                    raise
                return None
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"upstream Spark Connect did not answer rowgate's plan check: {err.code().name}",
                reason="second_opinion_unavailable",
            ) from None
        return response.explain.explain_string


def _number(text: str) -> str | None:
    """A numeral's value, spelled one way (`007.50` and `7.5` alike); None: not a number.

    >>> _number("007.50"), _number("7.5L"), _number("2024-01-01")
    ('7.5', '7.5', None)
    """
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?[A-Za-z]{0,2}", text)
    if match is None:
        return None
    whole, fraction = match.group(1).lstrip("0") or "0", (match.group(2) or "").rstrip("0")
    return whole + ("." + fraction if fraction else "")


def _placed(findings: Findings) -> Placed:
    """(table, predicates) the rewriter copied below a policy's barrier, over every SQL
    text of the request: statements, nested SQL and expression strings."""
    return frozenset(getattr(findings, "leakproof_placed", ()))


def _unreadable(error: Exception) -> Refusal:
    return Refusal.invalid(
        f"rowgate's second opinion cannot tell what Spark would read ({error}); the request is refused",
        reason="second_opinion",
    )


def _root_kind(lines: list[str]) -> str | None:
    """The operator of the first line that looks like a root (schema lines come first)."""
    for line in lines:
        match = re.match(r"^[~]?([A-Z][A-Za-z0-9_]*)", line)
        if match and not re.match(r"^[^ ]+: ", line):
            return match.group(1)
    return None


def analysis_targets(plan: base_pb2.Plan) -> list[relations_pb2.Relation]:
    """The relations Spark will analyse when it runs `plan` (see the module docstring)."""
    kind = plan.WhichOneof("op_type")
    if kind == "root":
        return [plan.root]
    if kind != "command":
        return []
    command = plan.command
    if command.WhichOneof("command_type") == "sql_command":
        sql = command.sql_command
        if sql.HasField("input"):
            return [sql.input]
        rel = relations_pb2.Relation()
        rel.sql.query = sql.sql
        for name, value in sql.args.items():
            rel.sql.args[name].CopyFrom(value)
        rel.sql.pos_args.extend(sql.pos_args)
        for name, value in sql.named_arguments.items():
            rel.sql.named_arguments[name].CopyFrom(value)
        rel.sql.pos_arguments.extend(sql.pos_arguments)
        return [rel]
    return list(_relations_in(command))


def _relations_in(msg: Message) -> Iterator[relations_pb2.Relation]:
    """The outermost relations inside a command message."""
    for value in _message_children(msg):
        if isinstance(value, relations_pb2.Relation):
            yield value
        else:
            yield from _relations_in(value)


def _message_children(msg: Message) -> list[Message]:
    out: list[Message] = []
    for desc, value in msg.ListFields():
        if desc.message_type is None:
            continue
        if desc.message_type.GetOptions().map_entry:
            out.extend(v for v in value.values() if isinstance(v, Message))
        elif desc.is_repeated:
            out.extend(value)
        else:
            out.append(value)
    return out


def _relations(msg: Message) -> Iterator[relations_pb2.Relation]:
    """Every relation anywhere inside `msg` (relations inside relations too)."""
    stack: list[Message] = [msg]
    while stack:
        current = stack.pop()
        if isinstance(current, relations_pb2.Relation):
            yield current
        stack.extend(_message_children(current))


def _refuse_run_while_planning(msg: Message, *, alone_ok: bool) -> bool:
    """Refuses what Spark would run while it analyses `msg` (a Plan or an AnalyzePlan request):
    SQL scripts, and catalog calls that change state unless `alone_ok` and the plan is that
    one call alone. Returns whether it is such a lone call."""
    changing = []
    relations = 0
    for relation in _relations(msg):
        relations += 1
        kind = relation.WhichOneof("rel_type")
        if kind == "sql" and starts_like_script(relation.sql.query):
            raise Refusal.invalid(
                "SQL scripts and EXECUTE IMMEDIATE cannot be checked by rowgate while tables are protected",
                reason="second_opinion",
            )
        if kind == "catalog" and relation.catalog.WhichOneof("cat_type") in state_effects.catalog_changes():
            changing.append(relation.catalog.WhichOneof("cat_type"))
    if not changing:
        return False
    lone = (
        alone_ok
        and isinstance(msg, base_pb2.Plan)
        and msg.WhichOneof("op_type") == "root"
        and msg.root.WhichOneof("rel_type") == "catalog"
        and relations == 1
    )
    if not lone:
        raise Refusal.invalid(
            f"the catalog call {changing[0]} changes state when Spark plans it, so it must be sent on its own "
            "(as spark.catalog does), never inside another plan or an analysis, while tables are protected",
            reason="second_opinion",
        )
    return True


# What a subquery in SQL text starts with (`SELECT ...`, `TABLE t`, `FROM t SELECT ...`):
# an expression without any of these words cannot read a relation.
_SUBQUERY_WORD = re.compile(r"\b(?:select|table|from)\b", re.IGNORECASE)


def _refuse_unanalysed_expressions(command: Message) -> None:
    """A command's expressions outside its relations (MERGE conditions and actions, an
    overwrite condition) are evaluated by Spark without an analysis the proxy can ask for:
    refused when they may hold a subquery."""
    stack: list[Message] = [command]
    while stack:
        msg = stack.pop()
        if isinstance(msg, relations_pb2.Relation):
            continue  # analysed as a target
        if isinstance(msg, expressions_pb2.Expression):
            kind = msg.WhichOneof("expr_type")
            if kind == "subquery_expression" or (
                kind == "expression_string" and _SUBQUERY_WORD.search(msg.expression_string.expression)
            ):
                raise Refusal.invalid(
                    "a subquery in a command's condition or action cannot be checked by rowgate while tables are "
                    "protected; join the data into the command's source instead",
                    reason="second_opinion",
                )
        stack.extend(_message_children(msg))


def starts_like_script(sql: str) -> bool:
    """Whether Spark may read `sql` as a script or EXECUTE IMMEDIATE (run while planning).

    Leading comments are skipped; a `--` comment holding a backslash counts as a script,
    since Spark may continue it over the line break.

    >>> [starts_like_script(s) for s in ("SELECT 1", " begin select 1; end", "l1: BEGIN END",
    ...  "/* x */ EXECUTE IMMEDIATE 'x'", "-- a \\\\\\nSELECT 1", "SELECT a::int")]
    [False, True, True, True, True, False]
    """
    at = 0
    while True:
        match = _LEADING.match(sql, at)
        if match is None:
            break
        if "\\" in match.group(0) or "/*" in match.group(0)[2:]:
            return True
        at = match.end()
    rest = sql[at:].lstrip()
    return bool(_SCRIPT_START.match(rest))


def canonical_key(relation: relations_pb2.Relation) -> bytes:
    """The relation's bytes with plan ids renumbered in order and call-site origins dropped,
    so that the same DataFrame code sent again is the same key."""
    return _canonical_copy(relation).SerializeToString(deterministic=True)


def _canonical_copy(relation: relations_pb2.Relation) -> relations_pb2.Relation:
    copy = relations_pb2.Relation()
    copy.CopyFrom(relation)
    ids: dict[int, int] = {}
    stack: list[Message] = [copy]
    while stack:
        msg = stack.pop()
        for desc, value in msg.ListFields():
            if desc.name == "plan_id" and desc.message_type is None and not desc.is_repeated:
                setattr(msg, desc.name, ids.setdefault(value, len(ids) + 1))
            elif desc.name == "origin" and desc.message_type is not None and not desc.is_repeated:
                msg.ClearField("origin")
        stack.extend(_message_children(msg))
    return copy
