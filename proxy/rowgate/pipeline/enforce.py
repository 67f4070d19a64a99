"""The enforcement step: every plan a request carries is rewritten for its caller.

The rewriters (SQL text, relation plans) decide nothing about gRPC: they place the policy
filters they are given and report facts (tables read and written, paths, temp views,
statement effects). This step turns those facts into decisions that need the session or
the operator's settings: guarded configuration set through SQL, reads of protected
tables' files, temp views made before a policy changed, the policy lifecycle on DROP and
RENAME, plan text that would reveal policy predicates, and the row-filter signal.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import re
import uuid
from dataclasses import dataclass, field

import grpc
import pyarrow as pa
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.pipeline.guard_config import refuse_guarded
from rowgate.pipeline.position import SessionPositions
from rowgate.pipeline.shipped_code import code_in_expressions
from rowgate.pipeline.rewrite_context import SessionRewriteContext
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyStoreUnavailable
from rowgate.responses.error_redaction import secrets_for
from rowgate.responses.execute import result_answer
from rowgate.rewrite.plan.compression import plans_of
from rowgate.rewrite.sql import RewriteRefused
from rowgate.rewrite.sql.result import RewriteResult

log = logging.getLogger("rowgate.enforce")

PLAN_RPCS = ("ExecutePlan", "AnalyzePlan")
# AnalyzePlan answers that print the plan: the rewritten plan holds the policy predicates.
PLAN_TEXT_ANALYSES = ("explain", "tree_string")


@dataclass
class Findings:
    """What all the plans of one request do, merged over SQL texts and relation plans."""

    filtered: bool = False
    tables_read: set[TableName] = field(default_factory=set)
    tables_written: set[TableName] = field(default_factory=set)
    policies_applied: set[str] = field(default_factory=set)
    paths_read: set[str] = field(default_factory=set)
    sql_results: list[RewriteResult] = field(default_factory=list)
    temp_views_read: set[str] = field(default_factory=set)
    temp_views_created: dict[str, frozenset[TableName]] = field(default_factory=dict)
    temp_views_dropped: set[str] = field(default_factory=set)
    moved_position: bool = False
    explain: bool = False
    user_code: set[str] = field(default_factory=set)
    checkpoints: bool = False  # the plan creates a cached relation (checkpoint)
    cached_relations_used: bool = False

    def add_plan(self, result) -> None:
        self.filtered |= result.filtered
        self.tables_read |= set(result.tables_read)
        self.tables_written |= set(result.tables_written)
        self.policies_applied |= set(result.policies_applied)
        self.paths_read |= {p.path for p in result.paths_read}
        # Writing to a protected table's files, or creating a table over them, is a read
        # of those files by another name: the same location check applies.
        self.paths_read |= set(result.paths_written) | set(result.locations)
        self.temp_views_read |= set(result.temp_views_read)
        for view in result.temp_views_created:
            name = ("global_temp." if view.is_global else "") + view.name.lower()
            self.temp_views_created[name] = frozenset(result.tables_read)
        self.user_code |= {CODE_KINDS.get(code.kind, code.kind) for code in result.user_code}
        self.checkpoints |= bool(result.checkpoints)
        self.cached_relations_used |= bool(result.cached_relations_used)
        for op in result.catalog_ops:
            if op.op in POSITION_OPS:
                self.moved_position = True
            if op.op in TEMP_VIEW_DROPS and op.get("view_name"):
                self.temp_views_dropped.add(op.get("view_name").lower())
        for sql_result in result.sql_results:
            self.add_sql(sql_result)

    def add_sql(self, result: RewriteResult) -> None:
        self.sql_results.append(result)
        self.filtered |= result.filtered
        self.tables_read |= set(result.tables_read)
        self.tables_written |= set(result.tables_written)
        self.policies_applied |= set(result.policies_applied)
        self.paths_read |= {p.path for p in result.paths_read}
        self.temp_views_read |= set(result.temp_views_read)
        effects = result.session_effects
        for view in effects.temp_views_created:
            self.temp_views_created[view] = frozenset(result.tables_read)
        self.temp_views_dropped |= set(effects.temp_views_dropped)
        # CREATE TABLE ... LOCATION, ALTER TABLE ... SET LOCATION, OPTIONS (path ...): a
        # table put over a protected table's files reads (and may delete) them unfiltered.
        self.paths_read |= set(effects.locations)
        if effects.use_target or effects.current_catalog or effects.current_schema:
            self.moved_position = True
        if result.statement_kind == "explain":
            self.explain = True
        self.user_code |= set(result.user_code)


def sql_args(relation_sql) -> dict | list | None:
    """Parameter values the rewriter needs to resolve `IDENTIFIER(:p)`; strings only."""

    def value(literal):
        return literal.string if literal.WhichOneof("literal_type") == "string" else None

    if relation_sql.named_arguments:
        return {k: value(v.literal) if v.HasField("literal") else None for k, v in relation_sql.named_arguments.items()}
    if relation_sql.args:
        return {k: value(v) for k, v in relation_sql.args.items()}
    if relation_sql.pos_arguments:
        return [value(v.literal) if v.HasField("literal") else None for v in relation_sql.pos_arguments]
    if relation_sql.pos_args:
        return [value(v) for v in relation_sql.pos_args]
    return None


class Enforcement:
    def __init__(
        self, policies, catalog, positions: SessionPositions, is_admin, plan_rewriter, code_rules, global_temp_views=None,
        rewrite_memo=None,
    ):  # fmt: skip
        self.policies = policies
        self.catalog = catalog
        self.positions = positions
        self.is_admin = is_admin
        self.plan_rewriter = plan_rewriter  # (plan, ctx, findings) -> None, rewrites in place
        self.code_rules = code_rules
        self.global_temp_views: set[str] = global_temp_views if global_temp_views is not None else set()
        # global temp view -> (policy version at creation, tables it read); shared by all sessions
        self.global_temp_view_versions: dict[str, tuple[int, frozenset]] = {}
        self.rewrite_memo = rewrite_memo  # proxy/rowgate/rewrite/sql/memo.py; None: rewrite every text

    async def step(self, call: Call) -> Answer | None:
        if call.method.name not in PLAN_RPCS:
            return None
        plans = plans_of(call.request)
        if not plans:
            return None
        try:
            snapshot = self.policies.fresh_snapshot()
        except PolicyStoreUnavailable as e:
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                "the row access policy store is unreachable; rowgate refuses queries until it is back",
                reason="policy_store_unavailable",
            ) from e
        admin = self.is_admin(call.caller)
        try:
            state = await self.positions.of(call)
        except UpstreamUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"upstream Spark Connect is unavailable: {e}", reason="upstream") from e
        ctx = SessionRewriteContext(
            caller=call.caller,
            is_admin=admin,
            state=state,
            snapshot=snapshot,
            catalog=self.catalog,
            global_temp_views=self.global_temp_views,
            loop=asyncio.get_running_loop(),
            rewrite_memo=self.rewrite_memo,
        )
        findings = Findings()
        try:
            await asyncio.to_thread(self._rewrite_all, plans, ctx, findings)
        except RewriteRefused as e:
            code = grpc.StatusCode.PERMISSION_DENIED if e.code == "PERMISSION_DENIED" else grpc.StatusCode.INVALID_ARGUMENT
            raise Refusal(code, e.message, reason="rewrite_refused") from e
        except UpstreamUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"cannot check the catalog: {e}", reason="catalog_unavailable") from e
        except RecursionError as e:
            raise Refusal.invalid("the plan is nested too deeply for rowgate to inspect", reason="plan_too_deep") from e
        protected_locations = await self._protected_locations(snapshot) if findings.paths_read and not admin else []
        self._decide(call, ctx, state, snapshot, findings, admin, protected_locations)
        self._remember(call, state, snapshot, findings)
        call.notes["row_filter_applied"] = findings.filtered
        call.notes["tables"] = sorted(str(t) for t in findings.tables_read | findings.tables_written)
        call.notes["policies"] = sorted(findings.policies_applied)
        if findings.filtered and not admin:
            call.notes["error_secrets"] = _error_secrets(call, snapshot, findings)
        if findings.filtered and call.method.name == "ExecutePlan" and not call.request.operation_id:
            # Named here so that the reattaches of this operation are recognised as filtered
            # too (proxy/rowgate/responses/filtered_operations.py).
            call.request.operation_id = str(uuid.uuid4())
        text = self._plan_text(call, findings)
        if text is None:
            return None
        if call.method.name == "ExecutePlan":
            return await result_answer(call, pa.table({"plan": [text]}))
        response = base_pb2.AnalyzePlanResponse(
            session_id=call.session_id,
            server_side_session_id=await call.upstream.server_side_session_id(call.session_id, call.user_id),
        )
        if call.request.WhichOneof("analyze") == "explain":
            response.explain.explain_string = text
        else:
            response.tree_string.tree_string = text
        return Answer([response])

    def _rewrite_all(self, plans, ctx, findings: Findings) -> None:
        for plan in plans:
            self.plan_rewriter(plan, ctx, findings)

    def _decide(self, call: Call, ctx, state, snapshot, findings: Findings, admin: bool, protected_paths: list[str]) -> None:
        if admin:
            return
        if findings.user_code and snapshot.has_any():
            self.code_rules.check(sorted(findings.user_code))
        for result in findings.sql_results:
            effects = result.session_effects
            refuse_guarded([k for k, _ in effects.config_set], "setting")
            refuse_guarded(effects.config_reset, "resetting")
            if effects.config_reset_all and snapshot.has_any():
                raise Refusal.denied("RESET of all settings is reserved for rowgate admins while policies exist")
            for table in effects.tables_dropped | {old for old, _ in effects.tables_renamed}:
                if snapshot.policies_for(table):
                    raise Refusal.denied(f"{table} is protected by row access policies; only rowgate admins may drop or rename it")
            for table in _in_namespaces(snapshot, effects.namespaces_dropped):
                raise Refusal.denied(
                    f"database {table.catalog}.{table.schema} holds {table}, which is protected by row access "
                    "policies; only rowgate admins may drop it"
                )
        for path in findings.paths_read:
            for location in protected_paths:
                if _under(path, location):
                    raise Refusal.denied(
                        f"reading files under {location} is refused: they belong to a table protected by row access policies"
                    )
        for view in findings.temp_views_read:
            if view.startswith("global_temp."):
                created = self.global_temp_view_versions.get(view.split(".", 1)[1])
            else:
                created = state.temp_view_versions.get(view)
            _refuse_if_stale(f"temp view {view}", created, snapshot)
        if findings.cached_relations_used:
            for created in state.checkpoint_versions:
                _refuse_if_stale("a checkpointed or cached DataFrame of this session", created, snapshot)

    async def _protected_locations(self, snapshot) -> list[str]:
        """Every protected table's location (cached lookups): a path read is checked against
        all of them, so a table missing from the cache is looked up, never skipped."""
        try:
            found = await self.catalog.locations_of(snapshot.protected_tables())
        except UpstreamUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"cannot check protected locations: {e}", reason="catalog_unavailable") from e
        return list(found.values())

    def _remember(self, call: Call, state, snapshot, findings: Findings) -> None:
        for view, tables in findings.temp_views_created.items():
            if view.startswith("global_temp."):
                name = view.split(".", 1)[1]
                self.global_temp_views.add(name)
                self.global_temp_view_versions[name] = (snapshot.version, tables)
            else:
                state.temp_views.add(view)
                state.temp_view_versions[view] = (snapshot.version, tables)
        for view in findings.temp_views_dropped:
            state.temp_views.discard(view)
            state.temp_view_versions.pop(view, None)
        if findings.checkpoints:
            state.checkpoint_versions.append((snapshot.version, frozenset(findings.tables_read)))
        if findings.moved_position:
            self.positions.moved(call)
        for result in findings.sql_results:
            effects = result.session_effects
            if effects.invalidates_catalog:
                self.catalog.invalidate()
            for table in effects.tables_dropped | set(_in_namespaces(snapshot, effects.namespaces_dropped)):
                if snapshot.policies_for(table):
                    call.after_success.append(_drop_policies_of(self.policies, table))
            for old, new in effects.tables_renamed:
                if snapshot.policies_for(old):
                    call.after_success.append(_move_policies(self.policies, old, new))

    def _plan_text(self, call: Call, findings: Findings) -> str | None:
        """A plan that applies policy filters is not printed: it would show the predicates
        (other callers' names, lookup values). The caller learns that a filter applies."""
        if not findings.filtered:
            return None
        if call.method.name == "ExecutePlan":
            return self._redacted_plan(findings) if findings.explain else None
        analysis = call.request.WhichOneof("analyze")
        if analysis not in PLAN_TEXT_ANALYSES:
            if analysis == "input_files" and not self.is_admin(call.caller):
                raise Refusal.denied("input files of a plan that reads tables protected by row access policies are not shown")
            return None
        return self._redacted_plan(findings)

    @staticmethod
    def _redacted_plan(findings: Findings) -> str:
        return (
            "== rowgate ==\nThis plan reads tables protected by row access policies "
            f"({', '.join(sorted(str(t) for t in findings.tables_read))}); a row filter applies.\n"
            "The plan itself is not shown because it would reveal the policy predicates.\n"
        )


# The walker's names for shipped code, mapped to the operator settings that allow them.
CODE_KINDS = {
    "python_udf": "python_udf",
    "python_udtf": "python_udf",
    "python_data_source": "python_udf",
    "java_udf": "java_udf",
    "scalar_scala_udf": "java_udf",
}
POSITION_OPS = frozenset({"set_current_database", "set_current_catalog"})
TEMP_VIEW_DROPS = frozenset({"drop_temp_view"})


def rewrite_plans(plan, ctx, findings: Findings) -> None:
    """Rewrites a Plan's relation or command in place and records what it does."""
    from rowgate.rewrite.plan import rewrite_plan

    kind = plan.WhichOneof("op_type")
    if kind == "root":
        result = rewrite_plan(plan.root, ctx)
    elif kind == "command":
        result = rewrite_plan(plan.command, ctx)
    else:
        raise Refusal.invalid(f"a plan of kind {kind!r} cannot be inspected", reason="unknown_plan")
    findings.add_plan(result)
    if not ctx.is_admin and ctx.has_protected_tables():
        findings.user_code |= code_in_expressions(plan)


GLOB_CHARS = "*?[{\\"


_FILE_SCHEME = re.compile(r"^file:(//)?", re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def _normalised(path: str) -> str:
    """Hadoop reads schemes case-insensitively (`FILE:/x` is `file:/x`), so the comparison
    does too: local paths lose their scheme, other schemes are lower-cased."""
    p = _FILE_SCHEME.sub("", path.strip())
    scheme = _SCHEME.match(p)
    if scheme:
        p = scheme.group(1).lower() + p[len(scheme.group(1)):]
        return p.rstrip("/")
    p = posixpath.normpath("/" + p.lstrip("/")) if p.startswith("/") else posixpath.normpath(p)
    return p.rstrip("/") or "/"


def _in_namespaces(snapshot, namespaces) -> list[TableName]:
    """Protected tables inside the (catalog, schema) namespaces a DROP DATABASE names."""
    if not namespaces:
        return []
    return sorted(t for t in snapshot.protected_tables() if (t.catalog, t.schema) in namespaces)


def _error_secrets(call: Call, snapshot, findings: Findings):
    """What the upstream's error for this request must not print (see error_redaction)."""
    texts = [
        policy.filter_sql
        for table in sorted(findings.tables_read)
        for policy in snapshot.policies_for(table)
        if f"{table}:{policy.name}" in findings.policies_applied
    ]
    email = call.caller.principal.split(":", 1)[-1]
    return secrets_for(texts, email, call.raw_request)


def _refuse_if_stale(what: str, created: tuple[int, frozenset] | None, snapshot) -> None:
    """Data captured under older policies may hold rows the current policies hide."""
    if created is None or created[0] == snapshot.version:
        return
    changed = sorted(str(t) for t in created[1] if snapshot.policies_for(t))
    if changed:
        raise Refusal(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{what} was created before the row access policies on {changed[0]} changed; recreate it",
            reason="stale_session_data",
        )


def _under(path: str, location: str) -> bool:
    """Could reading `path` read files of `location`? Compared after Hadoop-like
    normalisation (`..`, `.`, repeated slashes); a glob counts as reaching every location
    that starts like the glob's fixed prefix, since Hadoop would expand it."""
    loc_n = _normalised(location)
    bare = _FILE_SCHEME.sub("", path.strip())
    if not bare.startswith("/") and ":" not in bare.split("/", 1)[0]:
        # Relative to the server's working directory, which the proxy cannot know: it
        # may be any location it could be a suffix of, and `..` or a glob could be anything.
        if ".." in bare.split("/") or any(c in bare for c in GLOB_CHARS):
            return True
        segments = posixpath.normpath(bare).strip("/").split("/")
        return any(("/" + "/".join(segments[:k]) + "/") in (loc_n + "/") for k in range(1, len(segments) + 1))
    glob_at = min((i for i, c in enumerate(path) if c in GLOB_CHARS), default=None)
    if glob_at is not None:
        fixed = _normalised(path[:glob_at]) if path[:glob_at].strip() else "/"
        fixed_dir = fixed if path[:glob_at].endswith("/") else posixpath.dirname(fixed)
        return loc_n == fixed_dir or loc_n.startswith(fixed_dir.rstrip("/") + "/") or fixed_dir.startswith(loc_n + "/")
    path_n = _normalised(path)
    return path_n == loc_n or path_n.startswith(loc_n + "/") or loc_n.startswith(path_n + "/")


def _drop_policies_of(policies, table: TableName):
    async def drop() -> None:
        removed = await asyncio.to_thread(policies.store.drop_all, table)
        await asyncio.to_thread(lambda: policies.refresh(force=True))
        log.info("policies removed with their table", extra={"table": str(table), "count": removed})

    return drop


def _move_policies(policies, old: TableName, new: TableName):
    async def move() -> None:
        moved = await asyncio.to_thread(policies.store.rename_table, old, new)
        await asyncio.to_thread(lambda: policies.refresh(force=True))
        log.info("policies moved with their table", extra={"from": str(old), "to": str(new), "count": moved})

    return move
