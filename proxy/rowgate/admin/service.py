"""The `rowgate.v1.PolicyAdmin` servicer, served on the proxy's own port.

Every RPC resolves its caller with the resolver Spark Connect traffic uses (a bad
credential is UNAUTHENTICATED and never falls through to a weaker source) and requires a
rowgate admin (else PERMISSION_DENIED naming the RPC). Policy changes go through
`PolicyService` (proxy/rowgate/policy_service.py), the same code the SQL statements run, so
validation (the table exists, grantees parse, the filter runs on the table), storage and the
cache refresh are identical.

`ExplainAccess` runs the SQL rewriter for a caller made up from the request, in a context
with no temp views, and reports what it would do; it never executes anything in Spark
(catalog lookups aside).

Every change is recorded in the policy history with the calling admin as its author
(`ListHistory` reads it). `ApplyPolicies` and `Rollback` change many policies as one
version, all or nothing; `PreviewImpact` plans any change exactly as its RPC would, then
counts through Spark what each given principal reads of every table it touches, now and
after (admin/impact.py), and changes nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC
from typing import NoReturn, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from rowgate.admin.impact import ImpactPreview
from rowgate.admin.policy_files import PolicySpec, check_policy_name, parse_table, plan_apply
from rowgate.admin.v1 import policy_admin_pb2 as pb
from rowgate.admin.v1 import policy_admin_pb2_grpc as pb_grpc
from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityError
from rowgate.identity.members import MemberError, parse_group, parse_member, parse_principal
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.dependency_errors import dependency_refusal
from rowgate.pipeline.enforce.rewrite_context import SessionRewriteContext
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicyCache, PolicyStoreUnavailable
from rowgate.policy.store.base import HistoryEntry, PolicyStoreError, Provenance
from rowgate.policy_service import ChangePlan, PolicyService
from rowgate.rewrite.sql import rewrite_sql

log = logging.getLogger("rowgate.admin")

SERVICE = "rowgate.v1.PolicyAdmin"

# An RPC's request and response messages, as `_rpc` passes them through unchanged.
_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response", bound=Message)
# The caller behind a request's metadata pairs (identity/resolver.py's `IdentityResolver.resolve`).
ResolveCaller = Callable[[tuple[tuple[str, str], ...]], Caller]


class RpcContext(Protocol):
    """What an admin RPC uses of its `grpc.aio.ServicerContext`. grpc ships no types, so this
    is where mypy learns that `abort` never returns: a handler ends in a response or an abort."""

    def invocation_metadata(self) -> Sequence[tuple[str, str]] | None: ...

    async def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...


DEFAULT_CATALOG = "spark_catalog"
DEFAULT_SCHEMA = "default"


def policy_message(policy: RowAccessPolicy) -> pb.Policy:
    message = pb.Policy(
        table_catalog=policy.table.catalog,
        table_schema=policy.table.schema,
        table_name=policy.table.table,
        policy_name=policy.name,
        grantees=list(policy.grantees),
        filter_predicate=policy.filter_sql,
    )
    for field, value in (("creation_time", policy.created_at), ("last_modified_time", policy.updated_at)):
        if value is not None:
            if value.tzinfo is None:  # the store keeps UTC
                value = value.replace(tzinfo=UTC)
            getattr(message, field).FromDatetime(value.astimezone(UTC))
    return message


def history_message(entry: HistoryEntry) -> pb.HistoryEntry:
    message = pb.HistoryEntry(
        version=entry.version,
        author=entry.author,
        via=entry.via,
        detail=entry.detail,
        action=entry.action,
        table=str(entry.table),
        policy_name=entry.policy_name,
    )
    message.change_time.FromDatetime(entry.changed_at.astimezone(UTC))
    if entry.before is not None:
        message.before.CopyFrom(policy_message(entry.before))
    if entry.after is not None:
        message.after.CopyFrom(policy_message(entry.after))
    return message


def change_messages(plan: ChangePlan) -> list[pb.PolicyChange]:
    out = []
    for change in plan.changes:
        message = pb.PolicyChange(action=change.action)
        if change.before is not None:
            message.before.CopyFrom(policy_message(change.before))
        if change.after is not None:
            message.after.CopyFrom(policy_message(change.after))
        out.append(message)
    return out


def _table(text: str, what: str = "table") -> TableName:
    try:
        return parse_table(text, DEFAULT_CATALOG, DEFAULT_SCHEMA)
    except ValueError as e:
        raise Refusal.invalid(f"{what}: {e}", reason="admin_bad_table") from None


def _name(name: str) -> str:
    try:
        check_policy_name(name)
    except ValueError as e:
        raise Refusal.invalid(f"policy_name: {e}", reason="admin_bad_name") from None
    return name


def _policy_fields(p: pb.Policy, what: str = "policy") -> tuple[TableName, str, tuple[str, ...], str]:
    """(table, name, grantees, filter) of a Policy message, as CreatePolicy reads them."""
    if not p.table_name.strip():
        raise Refusal.invalid(f"{what}.table_name is required")
    try:
        table = TableName(
            p.table_catalog.strip() or DEFAULT_CATALOG, p.table_schema.strip() or DEFAULT_SCHEMA, p.table_name.strip()
        )
    except ValueError as e:
        raise Refusal.invalid(f"{what} table: {e}") from None
    name = _name(p.policy_name)
    filter_sql = p.filter_predicate.strip()
    if not filter_sql:
        raise Refusal.invalid(f"{what}.filter_predicate is required (TRUE is the full-access grant)")
    return table, name, tuple(p.grantees), filter_sql


def _callers(principals: Sequence[pb.Principal]) -> list[Caller]:
    """The principals of a preview, as authenticated callers with their groups."""
    if not principals:
        raise Refusal.invalid("principals: give at least one principal whose rows to count")
    callers, seen = [], set()
    for i, given in enumerate(principals):
        try:
            principal = parse_principal(given.principal.strip()).canonical()
        except MemberError as e:
            raise Refusal.invalid(f"principals[{i}]: {e}") from None
        groups = set()
        for group in given.groups:
            try:
                groups.add(parse_group(group.strip()))
            except MemberError as e:
                raise Refusal.invalid(f"principals[{i}].groups: {e}") from None
        if principal in seen:
            raise Refusal.invalid(f"principals[{i}]: {principal} is given twice; give each principal once, with its groups")
        seen.add(principal)
        callers.append(Caller(principal=principal, groups=frozenset(groups), authenticated=True))
    return callers


def _rpc(
    func: Callable[[PolicyAdminService, _Request, Caller], Awaitable[_Response]],
) -> Callable[[PolicyAdminService, _Request, RpcContext], Awaitable[_Response]]:
    """Resolves and authorises the caller, runs the RPC, maps failures onto gRPC statuses."""
    rpc = func.__name__

    @functools.wraps(func)
    async def handler(self: PolicyAdminService, request: _Request, context: RpcContext) -> _Response:
        started = time.perf_counter()
        caller = None
        try:
            caller = self._admin(context, rpc)
            response = await func(self, request, caller)
        except Refusal as e:
            code, message = e.code, e.message
        except (PolicyStoreUnavailable, PolicyStoreError) as e:
            code, message = grpc.StatusCode.UNAVAILABLE, f"the row access policy store failed: {e}"
        except UpstreamUnavailable as e:
            code, message = grpc.StatusCode.UNAVAILABLE, f"upstream Spark Connect is unavailable: {e}"
        except grpc.aio.AioRpcError as e:
            code, message = e.code(), e.details() or e.code().name
        except Exception as e:
            dependency = dependency_refusal(e)
            if dependency is not None:
                code, message = dependency.code, dependency.message
            else:
                log.exception("internal error in %s/%s", SERVICE, rpc)
                code, message = grpc.StatusCode.INTERNAL, f"rowgate internal error: {type(e).__name__}"
        else:
            self._log(rpc, caller, grpc.StatusCode.OK, started)
            return response
        self._log(rpc, caller, code, started)
        await context.abort(code, message)

    return handler


class PolicyAdminService(pb_grpc.PolicyAdminServicer):
    def __init__(
        self,
        service: PolicyService,
        resolve_caller: ResolveCaller,
        is_admin: Callable[[Caller], bool],
        policies: PolicyCache,
        catalog: UpstreamCatalog,
        *,
        identity_errors: tuple[type[Exception], ...] = (IdentityError,),
        lookup_timeout: float = 30.0,
        impact: ImpactPreview | None = None,
    ) -> None:
        self.impact = impact if impact is not None else ImpactPreview(catalog.upstream)
        self.service = service
        self.resolve_caller = resolve_caller  # metadata pairs -> Caller
        self.is_admin = is_admin  # Caller -> bool
        self.policies = policies  # PolicyCache
        self.catalog = catalog  # UpstreamCatalog
        self.identity_errors = identity_errors
        self.lookup_timeout = lookup_timeout

    def add_to(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_PolicyAdminServicer_to_server(self, server)

    # -- who -------------------------------------------------------------------------------

    def _admin(self, context: RpcContext, rpc: str) -> Caller:
        try:
            caller = self.resolve_caller(tuple(context.invocation_metadata() or ()))
        except self.identity_errors as e:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(e), reason="unauthenticated") from e
        if not self.is_admin(caller):
            hint = "" if caller.authenticated else " (no credential was sent)"
            raise Refusal.denied(
                f"{SERVICE}/{rpc} is reserved for rowgate admins; {caller.principal} is not one{hint}",
                reason="admin_api_not_admin",
            )
        return caller

    @staticmethod
    def _log(rpc: str, caller: Caller | None, code: grpc.StatusCode, started: float) -> None:
        log.info(
            "admin rpc",
            extra={
                "rpc": f"{SERVICE}/{rpc}",
                "principal": caller.principal if caller else "",
                "code": code.name,
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )

    # -- the RPCs --------------------------------------------------------------------------

    @_rpc
    async def ListPolicies(self, request: pb.ListPoliciesRequest, caller: Caller) -> pb.ListPoliciesResponse:
        table = _table(request.table) if request.HasField("table") and request.table.strip() else None
        policies = await self.service.list_policies(table)
        policies = sorted(policies, key=lambda p: (p.table, p.name.lower(), p.name))
        return pb.ListPoliciesResponse(policies=[policy_message(p) for p in policies])

    @_rpc
    async def GetPolicy(self, request: pb.GetPolicyRequest, caller: Caller) -> pb.Policy:
        table = _table(request.table)
        name = _name(request.policy_name)
        for policy in await self.service.list_policies(table):
            if policy.name.lower() == name.lower():
                return policy_message(policy)
        raise Refusal(grpc.StatusCode.NOT_FOUND, f"no row access policy {name} on {table}", reason="policy_missing")

    @_rpc
    async def CreatePolicy(self, request: pb.CreatePolicyRequest, caller: Caller) -> pb.Policy:
        if not request.HasField("policy"):
            raise Refusal.invalid("policy is required")
        table, name, grantees, filter_sql = _policy_fields(request.policy)
        verb = "CreatePolicy (replace)" if request.replace else "CreatePolicy"
        stored = await self.service.create_policy(
            table,
            name,
            grantees,
            filter_sql,
            replace=request.replace,
            if_not_exists=request.if_not_exists,
            by=Provenance(caller.principal, "admin_api", verb),
        )
        log.info(
            "policy created through the admin API",
            extra={"table": str(table), "policy": name, "principal": caller.principal, "replace": request.replace},
        )
        return policy_message(stored)

    @_rpc
    async def DropPolicy(self, request: pb.DropPolicyRequest, caller: Caller) -> pb.DropPolicyResponse:
        table = _table(request.table)
        name = _name(request.policy_name)
        dropped = await self.service.drop_policy(
            table, name, if_exists=request.if_exists, by=Provenance(caller.principal, "admin_api", "DropPolicy")
        )
        if dropped:
            log.info(
                "policy dropped through the admin API", extra={"table": str(table), "policy": name, "principal": caller.principal}
            )
        return pb.DropPolicyResponse(dropped=dropped)

    @_rpc
    async def ExplainAccess(self, request: pb.ExplainAccessRequest, caller: Caller) -> pb.ExplainAccessResponse:
        try:
            principal = parse_principal(request.principal.strip())
        except MemberError as e:
            raise Refusal.invalid(f"principal: {e}") from None
        groups = set()
        for group in request.groups:
            try:
                groups.add(parse_group(group.strip()))
            except MemberError as e:
                raise Refusal.invalid(f"groups: {e}") from None
        if not request.sql.strip():
            raise Refusal.invalid("sql is required")
        explained = Caller(principal=principal.canonical(), groups=frozenset(groups), authenticated=True)
        state = SessionState(
            current_catalog=(request.current_catalog.strip() if request.HasField("current_catalog") else "") or DEFAULT_CATALOG,
            current_schema=(request.current_schema.strip() if request.HasField("current_schema") else "") or DEFAULT_SCHEMA,
        )
        ctx = SessionRewriteContext(
            caller=explained,
            is_admin=self.is_admin(explained),
            state=state,
            snapshot=self.policies.fresh_snapshot(),
            catalog=self.catalog,
            global_temp_views=set(),
            loop=asyncio.get_running_loop(),
            lookup_timeout=self.lookup_timeout,
        )
        try:
            result = await asyncio.to_thread(rewrite_sql, request.sql, ctx)
        except Refusal as e:
            return pb.ExplainAccessResponse(refusal=e.message, refusal_code=e.code.name)
        return pb.ExplainAccessResponse(
            rewritten_sql=result.sql,
            policies_applied=list(result.policies_applied),
            tables_read=sorted(str(t) for t in result.tables_read),
            row_filter_applied=result.filtered,
            statement_kind=result.statement_kind,
        )

    @_rpc
    async def ListHistory(self, request: pb.ListHistoryRequest, caller: Caller) -> pb.ListHistoryResponse:
        table = _table(request.table) if request.HasField("table") and request.table.strip() else None
        if request.after_version < 0:
            raise Refusal.invalid("after_version must not be negative")
        entries = await self.service.history(table, after_version=request.after_version)
        version, _ = await self.service.current()
        since = await self.service.history_since()
        ordered = sorted(entries, key=lambda e: (-e.version, e.seq))
        return pb.ListHistoryResponse(entries=[history_message(e) for e in ordered], version=version, history_since=since)

    @_rpc
    async def ApplyPolicies(self, request: pb.ApplyPoliciesRequest, caller: Caller) -> pb.ChangeResponse:
        plan = await self._plan_apply(request)
        if request.dry_run:
            return pb.ChangeResponse(changes=change_messages(plan), unchanged=plan.unchanged, version=plan.version, dry_run=True)
        detail = f"{len(request.policies)} policies" + (", prune" if request.prune else "")
        version = await self.service.commit(plan, by=Provenance(caller.principal, "apply", detail))
        if plan.changes:
            log.info("policies applied through the admin API", extra={"principal": caller.principal, "version": version})
        return pb.ChangeResponse(changes=change_messages(plan), unchanged=plan.unchanged, version=version)

    @_rpc
    async def Rollback(self, request: pb.RollbackRequest, caller: Caller) -> pb.ChangeResponse:
        plan, table = await self._plan_rollback(request)
        if request.dry_run:
            return pb.ChangeResponse(changes=change_messages(plan), unchanged=plan.unchanged, version=plan.version, dry_run=True)
        detail = f"to version {request.to_version}" + (f" on {table}" if table is not None else "")
        version = await self.service.commit(plan, by=Provenance(caller.principal, "rollback", detail))
        if plan.changes:
            log.info(
                "policies rolled back through the admin API",
                extra={"principal": caller.principal, "to_version": request.to_version, "version": version},
            )
        return pb.ChangeResponse(changes=change_messages(plan), unchanged=plan.unchanged, version=version)

    @_rpc
    async def PreviewImpact(self, request: pb.PreviewImpactRequest, caller: Caller) -> pb.PreviewImpactResponse:
        callers = _callers(request.principals)
        kind = request.WhichOneof("change")
        if kind == "create":
            if not request.create.HasField("policy"):
                raise Refusal.invalid("create.policy is required")
            table, name, grantees, filter_sql = _policy_fields(request.create.policy, "create.policy")
            plan = await self.service.plan_create(
                table, name, grantees, filter_sql, replace=request.create.replace, if_not_exists=request.create.if_not_exists
            )
        elif kind == "drop":
            plan = await self.service.plan_drop(
                _table(request.drop.table), _name(request.drop.policy_name), if_exists=request.drop.if_exists
            )
        elif kind == "apply":
            plan = await self._plan_apply(request.apply)
        elif kind == "rollback":
            plan, _ = await self._plan_rollback(request.rollback)
        else:
            raise Refusal.invalid("change is required: create, drop, apply or rollback")
        rows = await self.impact.rows(plan.tables(), plan.current, plan.after(), callers)
        return pb.PreviewImpactResponse(
            rows=[
                pb.ImpactRow(
                    table=str(r.table),
                    principal=r.caller.principal,
                    groups=sorted(r.caller.groups),
                    rows_now=r.rows_now,
                    rows_after=r.rows_after,
                )
                for r in rows
            ],
            changes=change_messages(plan),
            unchanged=plan.unchanged,
            version=plan.version,
        )

    # -- planning shared by the changing RPCs and PreviewImpact ----------------------------

    async def _plan_apply(self, request: pb.ApplyPoliciesRequest) -> ChangePlan:
        desired: list[PolicySpec] = []
        seen: dict[tuple[TableName, str], int] = {}
        for i, p in enumerate(request.policies):
            table, name, grantees, filter_sql = _policy_fields(p, f"policies[{i}]")
            for grantee in grantees:
                try:
                    parse_member(grantee.strip())
                except MemberError as e:
                    raise Refusal.invalid(f"policies[{i}]: grantee {grantee!r} is not a member: {e}") from None
            spec = PolicySpec(table, name, grantees, filter_sql)
            if spec.key in seen:
                raise Refusal.invalid(
                    f"policies[{i}] ({spec.label}) repeats policies[{seen[spec.key]}]; policy names are unique per table"
                )
            seen[spec.key] = i
            desired.append(spec)
        version, current = await self.service.current()
        have = [PolicySpec(p.table, p.name, p.grantees, p.filter_sql) for p in current]
        changes = plan_apply(desired, have, prune=request.prune)
        puts = [(c.spec.table, c.spec.name, c.spec.grantees, c.spec.filter) for c in changes if c.action in ("create", "replace")]
        drops = [(c.spec.table, c.spec.name) for c in changes if c.action == "drop"]
        unchanged = sum(c.action == "unchanged" for c in changes)
        return await self.service.plan_changes(version, current, puts, drops, unchanged=unchanged)

    async def _plan_rollback(self, request: pb.RollbackRequest) -> tuple[ChangePlan, TableName | None]:
        table = _table(request.table) if request.HasField("table") and request.table.strip() else None
        if request.to_version < 0:
            raise Refusal.invalid("to_version must not be negative")
        return await self.service.plan_rollback(request.to_version, table), table


def add_policy_admin(
    server: grpc.aio.Server,
    policy_service: PolicyService,
    resolve_caller: ResolveCaller,
    is_admin: Callable[[Caller], bool],
    policies: PolicyCache,
    catalog: UpstreamCatalog,
) -> PolicyAdminService:
    """Serve `rowgate.v1.PolicyAdmin` on `server` (the proxy's own server and port)."""
    service = PolicyAdminService(policy_service, resolve_caller, is_admin, policies, catalog)
    service.add_to(server)
    return service
