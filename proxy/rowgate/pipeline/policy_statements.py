"""Row access policy statements, executed by the proxy and never by Spark.

`spark.sql("CREATE ROW ACCESS POLICY ...")` reaches the proxy as an ExecutePlan whose SQL
begins like a policy statement. Only admins may run one; the statement is parsed with the
policy grammar (a parse error names the position), validated against the real table (it
exists, the filter is a boolean expression over its columns that Spark can run), stored,
and answered with a result the proxy makes itself, so `.collect()`, `.show()` and
`toPandas()` work on it like on any other statement's result.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime

import grpc
import pyarrow as pa

from rowgate.catalog.model import RelationKind
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.identity.members import MemberError, parse_member
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.position import SessionPositions
from rowgate.policy.ddl import (
    CreatePolicy,
    DropAllPolicies,
    DropPolicy,
    PolicyDdlError,
    ShowPolicies,
    looks_like_policy_ddl,
    parse_policy_ddl,
)
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import PolicyExists, PolicyNotFound, PolicyStoreError
from rowgate.responses.answer import Answer
from rowgate.responses.execute import result_answer

log = logging.getLogger("rowgate.policy")

SHOW_SCHEMA = pa.schema(
    [
        ("table_catalog", pa.string()),
        ("table_schema", pa.string()),
        ("table_name", pa.string()),
        ("policy_name", pa.string()),
        ("grantees", pa.string()),
        ("filter_predicate", pa.string()),
        ("creation_time", pa.timestamp("us", tz="UTC")),
        ("last_modified_time", pa.timestamp("us", tz="UTC")),
    ]
)
STATEMENT_NAMES = {
    CreatePolicy: "CREATE ROW ACCESS POLICY",
    DropPolicy: "DROP ROW ACCESS POLICY",
    DropAllPolicies: "DROP ALL ROW ACCESS POLICIES",
    ShowPolicies: "SHOW ROW ACCESS POLICIES",
}


def top_level_sql(plan) -> str | None:
    """The SQL text of a plan that is a single SQL statement, wherever pyspark put it."""
    kind = plan.WhichOneof("op_type")
    relation = None
    if kind == "command":
        command = plan.command
        if command.WhichOneof("command_type") != "sql_command":
            return None
        sql_command = command.sql_command
        if sql_command.HasField("input"):
            relation = sql_command.input
        else:
            return sql_command.sql or None
    elif kind == "root":
        relation = plan.root
    if relation is None:
        return None
    if relation.WhichOneof("rel_type") == "with_relations":
        relation = relation.with_relations.root
    if relation.WhichOneof("rel_type") == "sql":
        return relation.sql.query
    return None


def statement_name(text: str) -> str:
    """For messages only: which statement the caller meant, even when it does not parse."""
    words = text.upper().split()[:8]
    if "CREATE" in words:
        return "CREATE ROW ACCESS POLICY"
    if "SHOW" in words:
        return "SHOW ROW ACCESS POLICIES"
    if "ALL" in words:
        return "DROP ALL ROW ACCESS POLICIES"
    return "DROP ROW ACCESS POLICY"


def _has_dml(filter_sql: str) -> bool:
    """The admin API skips the DDL grammar, so its filters get the grammar's filter check."""
    from rowgate.policy.ddl import PolicyDdlError, parse_policy_ddl

    try:
        parse_policy_ddl(f"CREATE ROW ACCESS POLICY p ON t FILTER USING ({filter_sql})")
    except PolicyDdlError:
        return True
    return False


async def release_session(upstream, session: tuple[str, str]) -> None:
    from pyspark.sql.connect.proto import base_pb2

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


def _empty_result() -> pa.Table:
    return pa.table({})


class PolicyStatements:
    def __init__(self, store, cache, catalog, positions: SessionPositions, is_admin):
        self.store = store
        self.cache = cache
        self.catalog = catalog
        self.positions = positions
        self.is_admin = is_admin

    async def step(self, call: Call) -> Answer | None:
        if call.method.name not in ("ExecutePlan", "AnalyzePlan"):
            return None
        plans = [call.request.plan] if call.method.name == "ExecutePlan" else []
        if call.method.name == "AnalyzePlan":
            from rowgate.rewrite.plan.compression import plans_of

            plans = plans_of(call.request)
        for plan in plans:
            text = top_level_sql(plan)
            if text is None or not looks_like_policy_ddl(text):
                continue
            if call.method.name != "ExecutePlan":
                raise Refusal.invalid("row access policy statements can only be executed, not analysed")
            return await self.execute(call, text)
        return None

    async def execute(self, call: Call, text: str) -> Answer:
        try:
            return await self._execute(call, text)
        except (PolicyExists, PolicyNotFound):
            raise
        except PolicyStoreError as e:
            # The store's own message says where and that nothing was written.
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"the row access policy store is unavailable: {e}",
                reason="policy_store_unavailable",
            ) from e

    async def _execute(self, call: Call, text: str) -> Answer:
        if not self.is_admin(call.caller):
            raise Refusal.denied(
                f"{statement_name(text)} is reserved for rowgate admins; {call.caller.principal} is not one",
                reason="policy_ddl_not_admin",
            )
        try:
            statement = parse_policy_ddl(text)
        except PolicyDdlError as e:
            raise Refusal.invalid(f"cannot parse {statement_name(text)}: {e}", reason="policy_ddl_syntax") from e
        call.facts.policy_statement = STATEMENT_NAMES[type(statement)]
        if isinstance(statement, ShowPolicies):
            table = await self._resolve(call, statement.table) if statement.table else None
            return await result_answer(call.request, call.user_id, call.upstream, await asyncio.to_thread(self._show, table))
        table = await self._resolve(call, statement.table)
        if isinstance(statement, CreatePolicy):
            await self.create_policy(
                table,
                statement.name,
                tuple(statement.grantees),
                statement.filter_sql,
                replace=statement.replace,
                if_not_exists=statement.if_not_exists,
            )
        elif isinstance(statement, DropPolicy):
            await self.drop_policy(table, statement.name, if_exists=statement.if_exists)
        elif isinstance(statement, DropAllPolicies):
            await asyncio.to_thread(self.store.drop_all, table)
            await self._refresh()
        log.info(
            "policy statement executed",
            extra={"statement": call.facts.policy_statement, "table": str(table), "principal": call.caller.principal},
        )
        return await result_answer(call.request, call.user_id, call.upstream, _empty_result())

    async def _resolve(self, call: Call, parts: tuple[str, ...]) -> TableName:
        if len(parts) == 3:
            return TableName(*parts)
        position = await self.positions.of(call)
        if len(parts) == 2:
            return TableName(position.current_catalog, parts[0], parts[1])
        return TableName(position.current_catalog, position.current_schema, parts[0])

    async def _refresh(self) -> None:
        await asyncio.to_thread(lambda: self.cache.refresh(force=True))

    async def list_policies(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        return await asyncio.to_thread(self.store.list, table)

    async def drop_policy(self, table: TableName, name: str, *, if_exists: bool = False) -> bool:
        try:
            dropped = await asyncio.to_thread(self.store.drop, table, name, if_exists=if_exists)
        except PolicyNotFound as e:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"no row access policy {name} on {table}") from e
        await self._refresh()
        return dropped

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
        """The one way a policy gets stored, whether it came as SQL or through the admin API."""
        if replace and if_not_exists:
            raise Refusal.invalid("OR REPLACE and IF NOT EXISTS cannot be used together")
        info = await self.catalog.lookup(table)
        if info is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"table {table} does not exist", reason="policy_table_missing")
        if info.kind is not RelationKind.TABLE:
            raise Refusal.invalid(f"{table} is a {info.kind.value.lower().replace('_', ' ')}; row access policies go on tables")
        for grantee in grantees:
            try:
                parse_member(grantee)
            except MemberError as e:
                raise Refusal.invalid(f"grantee {grantee!r} is not a member: {e}", reason="policy_grantee") from e
        await self._check_filter_runs(table, filter_sql)
        now = datetime.now(UTC)
        policy = RowAccessPolicy(
            table=table,
            name=name,
            grantees=tuple(grantees) or ("allAuthenticatedUsers",),
            filter_sql=filter_sql,
            created_at=now,
            updated_at=now,
        )
        try:
            stored = await asyncio.to_thread(self.store.create, policy, replace=replace, if_not_exists=if_not_exists)
        except PolicyExists as e:
            raise Refusal(
                grpc.StatusCode.ALREADY_EXISTS,
                f"row access policy {name} already exists on {table} (use OR REPLACE or IF NOT EXISTS)",
                reason="policy_exists",
            ) from e
        await self._refresh()
        return stored

    async def _check_filter_runs(self, table: TableName, filter_sql: str) -> None:
        """Spark itself is the judge of the filter: it must analyse as a boolean condition
        over the table's columns, in the table's own catalog and database (where the
        rewriter will place it). A zero-row query reads no data."""
        session = ("rowgate-validator", str(uuid.uuid4()))
        if _has_dml(filter_sql):
            raise Refusal.invalid("the filter must be a boolean expression without DML", reason="policy_filter_invalid")
        try:
            await self.catalog.run_sql_rows(f"USE {table.namespace_sql()}", session=session)
            await self.catalog.run_sql_rows(f"SELECT * FROM {table.sql()} WHERE TRUE AND ({filter_sql}) LIMIT 0", session=session)
        except UpstreamSqlError as e:
            first_line = str(e).splitlines()[0] if str(e) else "rejected by Spark"
            raise Refusal.invalid(f"the filter does not run on {table}: {first_line}", reason="policy_filter_invalid") from e
        finally:
            await release_session(self.catalog.upstream, session)

    def _show(self, table: TableName | None) -> pa.Table:
        policies = sorted(self.store.list(table), key=lambda p: (str(p.table), p.name.lower()))
        columns: dict[str, list] = {name: [] for name in SHOW_SCHEMA.names}
        for p in policies:
            columns["table_catalog"].append(p.table.catalog)
            columns["table_schema"].append(p.table.schema)
            columns["table_name"].append(p.table.table)
            columns["policy_name"].append(p.name)
            columns["grantees"].append(", ".join(p.grantees))
            columns["filter_predicate"].append(p.filter_sql)
            columns["creation_time"].append(p.created_at)
            columns["last_modified_time"].append(p.updated_at)
        return pa.table(columns, schema=SHOW_SCHEMA)
