"""The one way row access policies are listed, created and dropped.

Both doors into the policy store use it: the policy statements run through Spark Connect
(pipeline/policy_statements.py) and the `rowgate.v1.PolicyAdmin` API (admin/service.py). So
a policy is validated the same way whichever door it came through (the table exists and is a
table, the grantees are members, the filter is a boolean expression that Spark can run on the
table), stored, and the policy cache refreshed before the change is acknowledged.

It decides nothing about who may change policies (both callers require an admin) and
answers no client itself: a change it refuses raises `PolicyChangeRefused` naming the
status, which each caller turns into its own answer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.model import RelationKind
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.identity.members import MemberError, parse_member
from rowgate.policy.ddl import ALL_AUTHENTICATED, PolicyDdlError, parse_policy_ddl
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import PolicyExists, PolicyNotFound

log = logging.getLogger("rowgate.policy")


class PolicyChangeRefused(Exception):
    """A policy change that is not made; `code` names the gRPC status it answers with."""

    def __init__(self, code: str, message: str, reason: str = "refused"):
        super().__init__(message)
        self.code = code  # e.g. "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS"
        self.message = message
        self.reason = reason  # the short label metrics and the audit log use


def canonical_grantees(grantees: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The grantees in the one spelling stored and compared, each once, in their order.

    >>> canonical_grantees(["user:ann@Example.com", "user:ann@example.com", "group:ops@example.com"])
    ('user:ann@example.com', 'group:ops@example.com')
    """
    found: list[str] = []
    for grantee in grantees:
        try:
            member = parse_member(grantee.strip()).canonical()
        except MemberError as e:
            raise PolicyChangeRefused("INVALID_ARGUMENT", f"grantee {grantee!r} is not a member: {e}", "policy_grantee") from None
        if member not in found:
            found.append(member)
    return tuple(found)


class PolicyService:
    def __init__(self, store, cache, catalog):
        self.store = store  # PolicyStore
        self.cache = cache  # PolicyCache, refreshed after every change
        self.catalog = catalog  # UpstreamCatalog: the table's kind, and Spark's word on the filter

    async def list_policies(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        return await asyncio.to_thread(self.store.list, table)

    async def drop_policy(self, table: TableName, name: str, *, if_exists: bool = False) -> bool:
        try:
            dropped = await asyncio.to_thread(self.store.drop, table, name, if_exists=if_exists)
        except PolicyNotFound as e:
            raise PolicyChangeRefused("NOT_FOUND", f"no row access policy {name} on {table}") from e
        await self._refresh()
        return dropped

    async def drop_all(self, table: TableName) -> None:
        await asyncio.to_thread(self.store.drop_all, table)
        await self._refresh()

    async def create_policy(
        self,
        table: TableName,
        name: str,
        grantees: tuple[str, ...],
        filter_sql: str,
        *,
        replace: bool = False,
        if_not_exists: bool = False,
    ) -> RowAccessPolicy:
        """Validates and stores one policy; no grantees means every authenticated user."""
        if replace and if_not_exists:
            raise PolicyChangeRefused("INVALID_ARGUMENT", "OR REPLACE and IF NOT EXISTS cannot be used together")
        info = await self.catalog.lookup(table)
        if info is None:
            raise PolicyChangeRefused("NOT_FOUND", f"table {table} does not exist", "policy_table_missing")
        if info.kind is not RelationKind.TABLE:
            kind = info.kind.value.lower().replace("_", " ")
            raise PolicyChangeRefused("INVALID_ARGUMENT", f"{table} is a {kind}; row access policies go on tables")
        members = canonical_grantees(grantees)
        await self._check_filter_runs(table, filter_sql)
        now = datetime.now(UTC)
        policy = RowAccessPolicy(
            table=table,
            name=name,
            grantees=members or (ALL_AUTHENTICATED,),
            filter_sql=filter_sql,
            created_at=now,
            updated_at=now,
        )
        try:
            stored = await asyncio.to_thread(self.store.create, policy, replace=replace, if_not_exists=if_not_exists)
        except PolicyExists as e:
            raise PolicyChangeRefused(
                "ALREADY_EXISTS",
                f"row access policy {name} already exists on {table} (use OR REPLACE or IF NOT EXISTS)",
                "policy_exists",
            ) from e
        await self._refresh()
        return stored

    async def _refresh(self) -> None:
        await asyncio.to_thread(lambda: self.cache.refresh(force=True))

    async def _check_filter_runs(self, table: TableName, filter_sql: str) -> None:
        """Spark itself is the judge of the filter: it must analyse as a boolean condition
        over the table's columns, in the table's own catalog and database (where the
        rewriter will place it). A zero-row query reads no data."""
        try:  # the grammar's own check, as if the filter was written in FILTER USING (...)
            parse_policy_ddl(f"CREATE ROW ACCESS POLICY p ON t FILTER USING ({filter_sql})")
        except PolicyDdlError:
            raise PolicyChangeRefused(
                "INVALID_ARGUMENT", "the filter must be a boolean expression without DML", "policy_filter_invalid"
            ) from None
        session = ("rowgate-validator", str(uuid.uuid4()))
        try:
            await self.catalog.run_sql_rows(f"USE {table.namespace_sql()}", session=session)
            await self.catalog.run_sql_rows(f"SELECT * FROM {table.sql()} WHERE TRUE AND ({filter_sql}) LIMIT 0", session=session)
        except UpstreamSqlError as e:
            first_line = str(e).splitlines()[0] if str(e) else "rejected by Spark"
            raise PolicyChangeRefused(
                "INVALID_ARGUMENT", f"the filter does not run on {table}: {first_line}", "policy_filter_invalid"
            ) from e
        finally:
            await _release_session(self.catalog.upstream, session)


async def _release_session(upstream, session: tuple[str, str]) -> None:
    user_id, session_id = session
    try:
        await upstream.call(
            "ReleaseSession",
            base_pb2.ReleaseSessionRequest(
                session_id=session_id, user_context=base_pb2.UserContext(user_id=user_id, user_name=user_id)
            ),
        )
    except grpc.aio.AioRpcError as e:  # an idle session expires upstream anyway
        log.warning("could not release a validation session: %s", e.details())
