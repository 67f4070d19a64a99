"""Row access policy statements, executed by the proxy and never by Spark.

`spark.sql("CREATE ROW ACCESS POLICY ...")` reaches the proxy as an ExecutePlan whose SQL
begins like a policy statement. Only admins may run one; the statement is parsed with the
policy grammar (a parse error names the position), validated against the real table (it
exists, the filter is a boolean expression over its columns that Spark can run), stored,
and answered with a result the proxy makes itself, so `.collect()`, `.show()` and
`toPandas()` work on it like on any other statement's result. The change itself is made by
policy_service.py, the same code the admin API uses, and recorded in the policy history with
the caller as its author; `SHOW ROW ACCESS POLICY HISTORY [ON t]` reads that history back
(`HISTORY_SCHEMA`).
"""

from __future__ import annotations

import logging

import grpc
import pyarrow as pa
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.session.position import SessionPositions
from rowgate.policy.access_control import AccessControl
from rowgate.policy.ddl import (
    CreatePolicy,
    DropAllPolicies,
    DropPolicy,
    PolicyDdlError,
    PolicyStatement,
    ShowPolicies,
    ShowPolicyHistory,
    looks_like_policy_ddl,
    parse_policy_ddl,
)
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import HistoryEntry, PolicyExists, PolicyNotFound, PolicyStoreError, Provenance
from rowgate.policy_service import PolicyService
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
# SHOW ROW ACCESS POLICY HISTORY: one row per policy a change created, replaced or dropped,
# newest change first. `version` is what `rowgate policies rollback --to` takes; `via` says
# through which door (sql, admin_api, apply, rollback, table_drop, table_rename); the
# grantees and filter before and after are NULL where there was or is no policy.
HISTORY_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("change_time", pa.timestamp("us", tz="UTC")),
        ("author", pa.string()),
        ("via", pa.string()),
        ("action", pa.string()),
        ("table_catalog", pa.string()),
        ("table_schema", pa.string()),
        ("table_name", pa.string()),
        ("policy_name", pa.string()),
        ("grantees_before", pa.string()),
        ("filter_before", pa.string()),
        ("grantees_after", pa.string()),
        ("filter_after", pa.string()),
        ("detail", pa.string()),
    ]
)
STATEMENT_NAMES = {
    CreatePolicy: "CREATE ROW ACCESS POLICY",
    DropPolicy: "DROP ROW ACCESS POLICY",
    DropAllPolicies: "DROP ALL ROW ACCESS POLICIES",
    ShowPolicies: "SHOW ROW ACCESS POLICIES",
    ShowPolicyHistory: "SHOW ROW ACCESS POLICY HISTORY",
}


def top_level_sql(plan: base_pb2.Plan) -> str | None:
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
        return "SHOW ROW ACCESS POLICY HISTORY" if "HISTORY" in words else "SHOW ROW ACCESS POLICIES"
    if "ALL" in words:
        return "DROP ALL ROW ACCESS POLICIES"
    return "DROP ROW ACCESS POLICY"


def _empty_result() -> pa.Table:
    return pa.table({})


class PolicyStatements:
    def __init__(self, service: PolicyService, positions: SessionPositions, access: AccessControl) -> None:
        self.service = service
        self.positions = positions
        self.access = access

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
        if not self.access.is_admin(call.caller):
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
            shown = show_table(await self.service.list_policies(table))
            return await result_answer(call.request, call.user_id, call.upstream, shown)
        if isinstance(statement, ShowPolicyHistory):
            table = await self._resolve(call, statement.table) if statement.table else None
            shown = history_table(await self.service.history(table))
            return await result_answer(call.request, call.user_id, call.upstream, shown)
        table = await self._resolve(call, statement.table)
        by = Provenance(call.caller.principal, "sql", _verb(statement))
        if isinstance(statement, CreatePolicy):
            await self.service.create_policy(
                table,
                statement.name,
                tuple(statement.grantees),
                statement.filter_sql,
                replace=statement.replace,
                if_not_exists=statement.if_not_exists,
                by=by,
            )
        elif isinstance(statement, DropPolicy):
            await self.service.drop_policy(table, statement.name, if_exists=statement.if_exists, by=by)
        elif isinstance(statement, DropAllPolicies):
            await self.service.drop_all(table, by=by)
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


def _verb(statement: PolicyStatement) -> str:
    """The statement as the history's `detail` names it."""
    if isinstance(statement, CreatePolicy) and statement.replace:
        return "CREATE OR REPLACE ROW ACCESS POLICY"
    return STATEMENT_NAMES[type(statement)]


def history_table(entries: list[HistoryEntry]) -> pa.Table:
    """SHOW ROW ACCESS POLICY HISTORY's result (`HISTORY_SCHEMA`), newest change first."""
    columns: dict[str, list] = {name: [] for name in HISTORY_SCHEMA.names}
    for e in sorted(entries, key=lambda e: (-e.version, e.seq)):
        columns["version"].append(e.version)
        columns["change_time"].append(e.changed_at)
        columns["author"].append(e.author)
        columns["via"].append(e.via)
        columns["action"].append(e.action)
        columns["table_catalog"].append(e.table.catalog)
        columns["table_schema"].append(e.table.schema)
        columns["table_name"].append(e.table.table)
        columns["policy_name"].append(e.policy_name)
        for side, policy in (("before", e.before), ("after", e.after)):
            columns[f"grantees_{side}"].append(", ".join(policy.grantees) if policy is not None else None)
            columns[f"filter_{side}"].append(policy.filter_sql if policy is not None else None)
        columns["detail"].append(e.detail)
    return pa.table(columns, schema=HISTORY_SCHEMA)


def show_table(policies: list[RowAccessPolicy]) -> pa.Table:
    """SHOW ROW ACCESS POLICIES' result, in the column names BigQuery's INFORMATION_SCHEMA uses."""
    columns: dict[str, list] = {name: [] for name in SHOW_SCHEMA.names}
    for p in sorted(policies, key=lambda p: (str(p.table), p.name.lower())):
        columns["table_catalog"].append(p.table.catalog)
        columns["table_schema"].append(p.table.schema)
        columns["table_name"].append(p.table.table)
        columns["policy_name"].append(p.name)
        columns["grantees"].append(", ".join(p.grantees))
        columns["filter_predicate"].append(p.filter_sql)
        columns["creation_time"].append(p.created_at)
        columns["last_modified_time"].append(p.updated_at)
    return pa.table(columns, schema=SHOW_SCHEMA)
