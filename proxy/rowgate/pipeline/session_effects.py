"""What a request changes in the proxy's memory of the session and of the policies.

After the rules let a request through, its effects are recorded: temp views and checkpoints
it creates (with the policy version they were made under), temp views it drops, a moved
current catalog/database, catalog answers it makes stale, and the policies that must follow
a protected table an admin drops or renames (run only once Spark did it).
"""

from __future__ import annotations

import asyncio
import logging

from rowgate.pipeline.core import Call
from rowgate.pipeline.findings import Findings
from rowgate.pipeline.rules.protected_lifecycle import protected_in_namespaces
from rowgate.policy.model import TableName

log = logging.getLogger("rowgate.enforce")


class SessionEffects:
    def __init__(self, policies, catalog, positions, global_temp_views: set[str], global_temp_view_versions: dict):
        self.policies = policies
        self.catalog = catalog
        self.positions = positions
        self.global_temp_views = global_temp_views
        self.global_temp_view_versions = global_temp_view_versions

    def record(self, call: Call, state, snapshot, findings: Findings) -> None:
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
            for table in effects.tables_dropped | set(protected_in_namespaces(snapshot, effects.namespaces_dropped)):
                if snapshot.policies_for(table):
                    call.after_success.append(drop_policies_of(self.policies, table))
            for old, new in effects.tables_renamed:
                if snapshot.policies_for(old):
                    call.after_success.append(move_policies(self.policies, old, new))


def drop_policies_of(policies, table: TableName):
    async def drop() -> None:
        removed = await asyncio.to_thread(policies.store.drop_all, table)
        await asyncio.to_thread(lambda: policies.refresh(force=True))
        log.info("policies removed with their table", extra={"table": str(table), "count": removed})

    return drop


def move_policies(policies, old: TableName, new: TableName):
    async def move() -> None:
        moved = await asyncio.to_thread(policies.store.rename_table, old, new)
        await asyncio.to_thread(lambda: policies.refresh(force=True))
        log.info("policies moved with their table", extra={"from": str(old), "to": str(new), "count": moved})

    return move
