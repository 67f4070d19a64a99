"""Policies follow a protected table that an admin drops or renames, by what Spark did.

Rename `a` to `b`: before Spark runs it, `a`'s policies are copied onto `b`, so whichever
name a concurrent reader resolves, and whenever Spark analyses it, the table is filtered.
Once Spark finished the rename, the policies leave `a`; once Spark refused it, the copies
leave `b`. Drop `a` (or a database holding it): the policies leave `a` once Spark finished
the drop. When the outcome is unknown (the upstream went away mid-statement), the proxy asks
Spark which of the names exist and acts on that; while it cannot tell, both names keep the
policies (fail closed). A new table made under `b` never inherits stale policies, because
a rename onto a name that already has policies is refused before it runs.

Each of these changes is recorded in the policy history with the admin who ran the statement
as its author (via `table_drop` or `table_rename`); the copy made before a rename is one
change, whatever the number of policies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass, field

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules.protected_lifecycle import protected_in_namespaces
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.policy.store.base import Provenance, Put

log = logging.getLogger("rowgate.enforce")


@dataclass
class LifecycleChange:
    """The protected tables one statement drops or renames."""

    dropped: list[TableName] = field(default_factory=list)
    renamed: list[tuple[TableName, TableName]] = field(default_factory=list)
    author: str = "unknown"  # who ran the statement: the author the policy history records

    def __bool__(self) -> bool:
        return bool(self.dropped or self.renamed)


def lifecycle_of(snapshot: PolicySnapshot, findings: Findings, author: str = "unknown") -> LifecycleChange:
    change = LifecycleChange(author=author)
    for result in findings.sql_results:
        effects = result.session_effects
        for table in sorted(effects.tables_dropped | set(protected_in_namespaces(snapshot, effects.namespaces_dropped))):
            if snapshot.policies_for(table) and table not in change.dropped:
                change.dropped.append(table)
        for old, new in effects.tables_renamed:
            if snapshot.policies_for(old):
                change.renamed.append((old, new))
    return change


class PolicyLifecycle:
    def __init__(self, policies: PolicyCache, catalog: UpstreamCatalog) -> None:
        self.policies = policies
        self.catalog = catalog

    async def before(self, change: LifecycleChange, snapshot: PolicySnapshot) -> None:
        for old, new in change.renamed:
            if snapshot.policies_for(new):
                raise Refusal.denied(
                    f"{new} already has row access policies; drop them before renaming {old} to it "
                    "(the two tables' policies would be merged)"
                )
        for old, new in change.renamed:
            copies = [
                Put(dataclasses.replace(policy, table=new), restore=True, if_absent=True) for policy in snapshot.policies_for(old)
            ]
            by = Provenance(change.author, "table_rename", f"{old} renamed to {new}: policies copied before Spark runs it")
            await asyncio.to_thread(self.policies.store.apply, copies, by=by)
        if change.renamed:
            await self._refresh()

    async def after(self, change: LifecycleChange, status: str) -> None:
        """`status` of the statement as Spark answered it (confirmed_run.Outcome.status)."""
        for table in change.dropped:
            if status == "ok" or (status == "unknown" and await self._exists(table) is False):
                by = Provenance(change.author, "table_drop", f"table {table} dropped")
                await self._drop_all(table, "policies removed with their table", by)
        for old, new in change.renamed:
            if status == "unknown":
                old_exists, new_exists = await self._exists(old), await self._exists(new)
                if old_exists is False and new_exists is True:
                    status_here = "ok"
                elif old_exists is True and new_exists is False:
                    status_here = "failed"
                else:
                    log.warning("rename outcome unknown: both names keep the policies", extra={"from": str(old), "to": str(new)})
                    continue
            else:
                status_here = status
            if status_here == "ok":
                by = Provenance(change.author, "table_rename", f"{old} renamed to {new}: policies moved with the table")
                await self._drop_all(old, "policies moved with their table", by)
            else:
                by = Provenance(change.author, "table_rename", f"{old} renamed to {new} refused by Spark: copies removed")
                await self._drop_all(new, "policies copied for a rename that Spark refused were removed", by)
        if change:
            await self._refresh()

    async def _exists(self, table: TableName) -> bool | None:
        """What Spark says now (never a cached answer); None when it cannot be asked."""
        self.catalog.invalidate(table)
        try:
            return await self.catalog.exists(table)
        except UpstreamUnavailable:
            return None

    async def _drop_all(self, table: TableName, message: str, by: Provenance) -> None:
        removed = await asyncio.to_thread(self.policies.store.drop_all, table, by=by)
        log.info(message, extra={"table": str(table), "count": removed})

    async def _refresh(self) -> None:
        await asyncio.to_thread(lambda: self.policies.refresh(force=True))
