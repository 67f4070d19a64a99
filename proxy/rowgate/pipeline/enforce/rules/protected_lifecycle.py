"""Rule: only admins may drop or rename a protected table, or drop a database holding one.

A dropped table's policies would otherwise stay behind and a renamed table would leave
its policies on the old name, readable by anyone under the new one.
"""

from __future__ import annotations

from collections.abc import Collection

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicySnapshot


def protected_in_namespaces(snapshot: PolicySnapshot, namespaces: Collection[tuple[str, str]]) -> list[TableName]:
    """Protected tables inside the (catalog, schema) namespaces a DROP DATABASE names."""
    if not namespaces:
        return []
    return sorted(t for t in snapshot.protected_tables() if (t.catalog, t.schema) in namespaces)


async def check(d: Decision) -> None:
    for result in d.findings.sql_results:
        effects = result.session_effects
        for table in effects.tables_dropped | {old for old, _ in effects.tables_renamed}:
            if d.snapshot.policies_for(table):
                raise Refusal.denied(f"{table} is protected by row access policies; only rowgate admins may drop or rename it")
        for table in protected_in_namespaces(d.snapshot, effects.namespaces_dropped):
            raise Refusal.denied(
                f"database {table.catalog}.{table.schema} holds {table}, which is protected by row access "
                "policies; only rowgate admins may drop it"
            )


RULE = Rule("protected_lifecycle", check)
