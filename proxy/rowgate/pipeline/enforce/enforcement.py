"""The enforcement step: every plan a request carries is rewritten for its caller.

Orchestration only, in this order:
1. rewrite every plan of the request for the caller (the rewriters place policy filters and
   report facts, merged into `Findings`, proxy/rowgate/pipeline/enforce/findings.py);
2. apply the rules (proxy/rowgate/pipeline/enforce/rules/), each of which may refuse; refuse a
   rewrite that needs a field the upstream's Spark is too old to read, before anything of
   it reaches Spark (proxy/rowgate/pipeline/enforce/upstream_compat.py); refuse a read filtered by a
   policy whose meaning depends on a setting the session changed
   (proxy/rowgate/pipeline/enforce/predicate_settings.py);
3. note the facts the transport and audit log need, and answer plan-text requests of
   filtered plans with a redacted text (proxy/rowgate/pipeline/enforce/plan_text.py);
4. a request that changes session or catalog state is run by the proxy to its end and its
   effects recorded from Spark's answer (proxy/rowgate/pipeline/enforce/session_effects.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import pyarrow as pa
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce import string_literal_mode
from rowgate.pipeline.enforce.caller_lanes import CallerLanes
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.plan_text import redacted_plan_text
from rowgate.pipeline.enforce.predicate_settings import PredicateSettings
from rowgate.pipeline.enforce.rewrite_context import SessionRewriteContext
from rowgate.pipeline.enforce.rules import Decision, RuleSettings, apply_rules
from rowgate.pipeline.enforce.session_data_reads import reads_protected_session_data
from rowgate.pipeline.enforce.session_effects import SessionEffects
from rowgate.pipeline.enforce.upstream_compat import upstream_compat
from rowgate.pipeline.operations.streaming_queries import all_secrets
from rowgate.pipeline.session.position import SessionPositions
from rowgate.pipeline.session.registry import SessionState
from rowgate.pipeline.statements.shipped_code import code_in_expressions
from rowgate.policy.access_control import AccessControl
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot, PolicyStoreUnavailable
from rowgate.responses.answer import Answer
from rowgate.responses.error_redaction import ErrorSecrets, secrets_for
from rowgate.responses.execute import result_answer
from rowgate.rewrite.plan.compression import plans_of
from rowgate.rewrite.plan.envelope import unknown_envelope_field
from rowgate.rewrite.sql.text_budget import DEFAULT_MAX_SQL_KIB, TextBudget
from rowgate.upstream.channel import UpstreamVersionUnknown
from rowgate.upstream.protocol_versions import TEMP_VIEW_NAMESPACE_SINCE

if TYPE_CHECKING:
    from rowgate.pipeline.enforce.rules.file_paths import PathRules
    from rowgate.pipeline.enforce.second_opinion import SecondOpinion
    from rowgate.pipeline.statements.shipped_code import CodeRules
    from rowgate.rewrite.sql.memo import RewriteMemo

PLAN_RPCS = ("ExecutePlan", "AnalyzePlan")
# Rewrites one plan in place for the context's caller and records what it does in the
# findings (`rewrite_plans`; tests hand their own).
PlanRewriter = Callable[[base_pb2.Plan, SessionRewriteContext, Findings], None]


class Enforcement:
    second_opinion: SecondOpinion | None = None  # set by the app; None: off

    def __init__(
        self, policies: PolicyCache, catalog: UpstreamCatalog, positions: SessionPositions,
        access: AccessControl, plan_rewriter: PlanRewriter, code_rules: CodeRules,
        global_temp_views: set[str] | None = None, rewrite_memo: RewriteMemo | None = None,
        path_rules: PathRules | None = None, lanes: CallerLanes | None = None,
        max_sql_kib: int = DEFAULT_MAX_SQL_KIB,
    ) -> None:  # fmt: skip
        self.policies = policies
        self.catalog = catalog
        self.positions = positions
        self.access = access  # who is an admin (policy/access_control.py)
        self.plan_rewriter = plan_rewriter  # (plan, ctx, findings) -> None, rewrites in place
        self.global_temp_views: set[str] = global_temp_views if global_temp_views is not None else set()
        self.settings = RuleSettings(code_rules=code_rules, catalog=catalog)
        if path_rules is not None:  # --allow-path and the proxy's own files (rules/file_paths.py)
            self.settings.paths = path_rules
        self.effects = SessionEffects(
            policies, catalog, positions, self.global_temp_views, self.settings.global_temp_view_versions
        )
        self.rewrite_memo = rewrite_memo  # proxy/rowgate/rewrite/sql/memo.py; None: rewrite every text
        # A caller's checks wait behind that caller's own work only (pipeline/enforce/caller_lanes.py).
        self.lanes = lanes if lanes is not None else CallerLanes()
        self.max_sql_chars = max_sql_kib * 1024
        # reads filtered by a policy whose meaning depends on the time zone or ANSI mode
        self.predicate_settings = PredicateSettings(catalog, positions.versions)

    @property
    def global_temp_view_versions(self) -> dict[str, tuple[int, frozenset]]:
        return self.settings.global_temp_view_versions

    async def step(self, call: Call) -> Answer | None:
        if call.method.name not in PLAN_RPCS:
            return None
        plans = plans_of(call.request)
        # A field this protobuf does not know around the plans (a newer Plan member, analysis
        # kind or request option) may hold a plan nobody analysed (rewrite/plan/envelope.py).
        unknown = unknown_envelope_field(call.request)
        if not plans and unknown is None:
            return None
        try:
            snapshot = self.policies.fresh_snapshot()
        except PolicyStoreUnavailable as e:
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                "the row access policy store is unreachable; rowgate refuses queries until it is back",
                reason="policy_store_unavailable",
            ) from e
        if unknown is not None and snapshot.has_any():
            raise Refusal.invalid(
                f"{unknown} is unknown to rowgate, so it cannot tell what the request reads; requests with fields "
                "rowgate does not know are refused for every caller, admins included, while row access policies "
                "are in force (a client newer than the proxy?)",
                reason="unknown_field",
            )
        if not plans:
            return None
        admin = self.access.is_admin(call.caller)
        try:
            # While tables are protected, with the state version Spark holds: remembered
            # rewrites and verdicts are reused only under it (pipeline/session/epoch.py).
            state, version = (
                await self.positions.of_versioned(call) if snapshot.has_any() else (await self.positions.of(call), None)
            )
        except UpstreamUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"upstream Spark Connect is unavailable: {e}", reason="upstream") from e
        ctx = SessionRewriteContext(
            qualify_temp_views=snapshot.has_any() and await reads_temp_view_namespace(call),
            caller=call.caller,
            is_admin=admin,
            state=state,
            snapshot=snapshot,
            catalog=self.catalog,
            global_temp_views=self.global_temp_views,
            loop=asyncio.get_running_loop(),
            # unsettled (a change under way, a new record): rewrite afresh, remember nothing
            rewrite_memo=None
            if version is None and self.positions.versions is not None and snapshot.has_any()
            else self.rewrite_memo,
            state_version=version,
            text_budget=TextBudget(self.max_sql_chars),
        )
        # The checks wait behind this caller's own only; running the statement does not hold the lane.
        async with self.lanes.lane(call.caller.principal):
            findings = await self._check(call, plans, ctx, snapshot, state, admin)
        # A statement that changes state runs now, and is recorded from Spark's answer.
        answer = await self.effects.apply(call, state, snapshot, findings)
        if answer is not None:
            return answer
        text = redacted_plan_text(
            call, findings, admin, holds_protected_rows=lambda: reads_protected_session_data(call, state, snapshot)
        )
        if text is None:
            return None
        return await self._plan_text_answer(call, text)

    async def _check(
        self,
        call: Call,
        plans: list[base_pb2.Plan],
        ctx: SessionRewriteContext,
        snapshot: PolicySnapshot,
        state: SessionState,
        admin: bool,
    ) -> Findings:
        """Rewrite, rules and the second opinion: the proxy's own work for this request."""
        findings = Findings()
        client_texts = string_literal_mode.sql_texts(plans)  # before the rewrite changes them in place
        try:
            await self.lanes.run(self._rewrite_all, plans, ctx, findings)
        except UpstreamUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"cannot check the catalog: {e}", reason="catalog_unavailable") from e
        except RecursionError as e:
            raise Refusal.invalid("the plan is nested too deeply for rowgate to inspect", reason="plan_too_deep") from e
        # The budget bounds the client's texts; what the checks below rewrite is derived from them.
        ctx.text_budget = None
        await apply_rules(Decision(call, call.caller, admin, snapshot, state, findings, self.settings))
        await upstream_compat(call)  # nothing the upstream cannot read goes to it (second opinion included)
        # A setting-dependent policy filters only under the server's time zone and ANSI mode.
        await self.predicate_settings.check(call, state, snapshot, findings)
        # A literal with a backslash whose value rowgate read or wrote: only under Spark's default escaping.
        await string_literal_mode.check(self.positions.versions, call, state, client_texts, plans, findings)
        # Noted before the check: an analysis error Spark answers it with is relayed redacted.
        self._note(call, snapshot, findings, admin)
        if call.facts.error_secrets is None and reads_protected_session_data(call, state, snapshot):
            # A temp view or checkpoint made from a protected table: Spark's errors print its
            # stored plan, policy filter included, and values of its rows (review F3).
            call.facts.error_secrets = all_secrets(call, snapshot)
        if self.second_opinion is not None:  # Spark's analyzer confirms every protected read is filtered
            await self.second_opinion.check(call, ctx, snapshot, findings)
        return findings

    def _rewrite_all(self, plans: list[base_pb2.Plan], ctx: SessionRewriteContext, findings: Findings) -> None:
        for plan in plans:
            self.plan_rewriter(plan, ctx, findings)

    @staticmethod
    def _note(call: Call, snapshot: PolicySnapshot, findings: Findings, admin: bool) -> None:
        call.facts.policy_snapshot = snapshot
        call.facts.row_filter_applied = findings.filtered
        call.facts.tables = tuple(sorted(str(t) for t in findings.tables_read | findings.tables_written))
        call.facts.policies = tuple(sorted(findings.policies_applied))
        if findings.filtered:  # admins' reads are filtered like anyone's: their errors too
            call.facts.error_secrets = _error_secrets(call, snapshot, findings)
        if findings.filtered and call.method.name == "ExecutePlan" and not call.request.operation_id:
            # Named here so that the reattaches of this operation are recognised as filtered
            # too (proxy/rowgate/pipeline/operations/steps.py).
            call.request.operation_id = str(uuid.uuid4())

    @staticmethod
    async def _plan_text_answer(call: Call, text: str) -> Answer:
        if call.method.name == "ExecutePlan":
            return await result_answer(call.request, call.user_id, call.upstream, pa.table({"plan": [text]}))
        response = base_pb2.AnalyzePlanResponse(
            session_id=call.session_id,
            server_side_session_id=await call.upstream.server_side_session_id(call.session_id, call.user_id),
        )
        if call.request.WhichOneof("analyze") == "explain":
            response.explain.explain_string = text
        else:
            response.tree_string.tree_string = text
        return Answer([response])


def rewrite_plans(plan: base_pb2.Plan, ctx: SessionRewriteContext, findings: Findings) -> None:
    """Rewrites a Plan's relation or command in place and records what it does."""
    from rowgate.rewrite.plan import rewrite_plan

    kind = plan.WhichOneof("op_type")
    if kind == "root":
        result = rewrite_plan(plan.root, ctx)
    elif kind == "command":
        result = rewrite_plan(plan.command, ctx)
    else:
        raise Refusal.invalid(f"a plan of kind {kind!r} cannot be inspected", reason="unknown_plan")
    findings.merge(result)
    if not ctx.is_admin and ctx.has_protected_tables():
        findings.user_code |= code_in_expressions(plan)


def _error_secrets(call: Call, snapshot: PolicySnapshot, findings: Findings) -> ErrorSecrets:
    """What the upstream's error for this request must not print (see error_redaction)."""
    texts = [
        policy.filter_sql
        for table in sorted(findings.tables_read)
        for policy in snapshot.policies_for(table)
        if f"{table}:{policy.name}" in findings.policies_applied
    ]
    email = call.caller.principal.split(":", 1)[-1]
    return secrets_for(texts, email, call.raw_request)


async def reads_temp_view_namespace(call: Call) -> bool:
    """Whether the upstream reads `system.session.<view>` as the session temp view (4.3 on;
    4.0 refuses the form). Unknown: no, and the request keeps the one-part names of 4.0
    (pipeline/enforce/upstream_compat.py refuses it anyway when the version cannot be learned)."""
    try:
        _, version = await call.upstream.spark_version()
    except UpstreamVersionUnknown:
        return False
    return version >= TEMP_VIEW_NAMESPACE_SINCE
