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
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import UTC

import grpc

from rowgate.admin.policy_files import check_policy_name, parse_table
from rowgate.admin.v1 import policy_admin_pb2 as pb
from rowgate.admin.v1 import policy_admin_pb2_grpc as pb_grpc
from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityError
from rowgate.identity.members import MemberError, parse_group, parse_principal
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.dependency_errors import dependency_refusal
from rowgate.pipeline.rewrite_context import SessionRewriteContext
from rowgate.pipeline.sessions import SessionState
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicyStoreUnavailable
from rowgate.policy.store.base import PolicyStoreError
from rowgate.policy_service import PolicyChangeRefused, PolicyService
from rowgate.rewrite.sql import RewriteRefused, rewrite_sql

log = logging.getLogger("rowgate.admin")

SERVICE = "rowgate.v1.PolicyAdmin"
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


def _rpc(func):
    """Resolves and authorises the caller, runs the RPC, maps failures onto gRPC statuses."""
    rpc = func.__name__

    @functools.wraps(func)
    async def handler(self: PolicyAdminService, request, context: grpc.aio.ServicerContext):
        started = time.perf_counter()
        caller = None
        try:
            caller = self._admin(context, rpc)
            response = await func(self, request, caller)
        except Refusal as e:
            code, message = e.code, e.message
        except PolicyChangeRefused as e:
            code, message = grpc.StatusCode[e.code], e.message
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
        resolve_caller,
        is_admin,
        policies,
        catalog,
        *,
        identity_errors: tuple[type[Exception], ...] = (IdentityError,),
        lookup_timeout: float = 30.0,
    ):
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

    def _admin(self, context, rpc: str) -> Caller:
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
        p = request.policy
        if not p.table_name.strip():
            raise Refusal.invalid("policy.table_name is required")
        try:
            table = TableName(
                p.table_catalog.strip() or DEFAULT_CATALOG, p.table_schema.strip() or DEFAULT_SCHEMA, p.table_name.strip()
            )
        except ValueError as e:
            raise Refusal.invalid(f"policy table: {e}") from None
        name = _name(p.policy_name)
        filter_sql = p.filter_predicate.strip()
        if not filter_sql:
            raise Refusal.invalid("policy.filter_predicate is required (TRUE is the full-access grant)")
        stored = await self.service.create_policy(
            table, name, tuple(p.grantees), filter_sql, replace=request.replace, if_not_exists=request.if_not_exists
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
        dropped = await self.service.drop_policy(table, name, if_exists=request.if_exists)
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
        except RewriteRefused as e:
            return pb.ExplainAccessResponse(refusal=e.message, refusal_code=e.code)
        return pb.ExplainAccessResponse(
            rewritten_sql=result.sql,
            policies_applied=list(result.policies_applied),
            tables_read=sorted(str(t) for t in result.tables_read),
            row_filter_applied=result.filtered,
            statement_kind=result.statement_kind,
        )


def add_policy_admin(
    server: grpc.aio.Server, policy_service: PolicyService, resolve_caller, is_admin, policies, catalog
) -> PolicyAdminService:
    """Serve `rowgate.v1.PolicyAdmin` on `server` (the proxy's own server and port)."""
    service = PolicyAdminService(policy_service, resolve_caller, is_admin, policies, catalog)
    service.add_to(server)
    return service
