"""A read filtered by a setting-dependent policy runs only under the settings Spark defaults to.

Policy filters run in the caller's session, so a caller who sets the session time zone,
ANSI mode or nanosecond timestamps (on the non-admin allow list: ordinary programs set them) would otherwise
change what `CAST(ts AS DATE) = current_date()`, `hour(ts) < 12`, `d >= '2024-01-01'` on a
timestamp or `code = 10` on a string column select, and so widen the policy's boundary.
proxy/rowgate/policy/predicate_semantics.py classifies each applied policy (by its text and
the DESCRIBE types of the tables it names, from the catalog's cache); for an ExecutePlan
that a setting-dependent policy filters, the proxy asks Spark (the source of truth, whatever
connection or replica changed the session) for the session's values of `SEMANTIC_SETTINGS`
and for the values of rowgate's shared internal session, which nobody changes: the server's
defaults. A difference is refused (FAILED_PRECONDITION) naming the setting, the policy and
why it depends; the two Config gets run side by side and only for such reads, so
setting-independent policies cost nothing and leave the caller free to change both.

Reads of the session's temp views and checkpoints made from protected tables count too
(their stored plan still evaluates `current_date()` in the reading session's zone).
Admins are filtered like anyone, so their reads are checked too. AnalyzePlan is not checked:
it returns a schema or a redacted plan, never rows. The values are compared as Spark
reports them (the zone exactly, ANSI case-insensitively), so `UTC` set explicitly where the
server's default is `Etc/UTC` is refused too: the message names the value to go back to.

Timing: the check runs while the request holds its session's state gate as a reader (until
Spark analysed it, proxy/rowgate/pipeline/session/state_gate.py); a `SET` of the session through SQL
waits for it as a writer, and a Config set or unset of one of these keys through this
replica waits the same way (session_epoch.StateVersions.config_step).
"""

from __future__ import annotations

import grpc

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.session_data_reads import protected_sources
from rowgate.pipeline.session.epoch import StateVersions
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.access_control import AccessControl
from rowgate.policy.model import TableName
from rowgate.policy.predicate_semantics import SEMANTIC_SETTINGS, dependence, lookup_tables
from rowgate.policy.snapshot import PolicySnapshot


class PredicateSettings:
    def __init__(self, catalog: UpstreamCatalog, versions: StateVersions | None) -> None:
        self.catalog = catalog
        self.versions = versions
        self.checks = 0  # reads that asked Spark (tests and metrics)

    async def dependent(
        self, call: Call, snapshot: PolicySnapshot, findings: Findings, behind: frozenset[TableName] = frozenset()
    ) -> list[tuple[str, str, str]]:
        """(table, policy, why) for each applied policy whose filter depends on a setting:
        those the rewrite applied, and those granting the caller on `behind` (the protected
        tables behind temp views and checkpoints the request reads: a view's stored plan
        evaluates `current_date()` in the reading session's zone)."""
        found = []
        for table in sorted(findings.tables_read | set(behind)):
            policies = snapshot.policies_for(table)
            granted = set(AccessControl.applied_policies(call.caller, policies)) if table in behind else set()
            for policy in policies:
                if f"{table}:{policy.name}" not in findings.policies_applied and policy.name not in granted:
                    continue
                names = [table, *sorted(lookup_tables(policy.filter_sql, table))]
                infos = await self.catalog.lookup_many(names)
                types = {
                    name: dict(zip(info.columns, info.column_types))
                    for name, info in infos.items()
                    if info is not None and len(info.column_types) == len(info.columns)
                }
                why = dependence(policy.filter_sql, table, types)
                if why is not None:
                    found.append((str(table), policy.name, why))
        return found

    async def check(self, call: Call, state: SessionState, snapshot: PolicySnapshot, findings: Findings) -> None:
        if call.method.name != "ExecutePlan" or not snapshot.has_any():
            return
        behind = protected_sources(call, state, snapshot)
        if not findings.policies_applied and not behind:
            return
        dependent = await self.dependent(call, snapshot, findings, behind)
        if not dependent:
            return
        if self.versions is None or not call.session_id:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                "rowgate cannot ask Spark this session's time zone, ANSI mode and timestamp precision, which the row access policy "
                f"{dependent[0][1]} of {dependent[0][0]} depends on",
                reason="policy_semantics",
            )
        self.checks += 1
        mine, reference = await self.versions.settings(call, state, SEMANTIC_SETTINGS)
        for key in SEMANTIC_SETTINGS:
            have, want = mine.get(key.lower()), reference.get(key.lower())
            same = (
                have is not None
                and want is not None
                and (have == want if key.endswith("timeZone") else have.lower() == want.lower())
            )
            if not same:
                table, policy, why = dependent[0]
                raise Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the row access policy {policy} of {table} {why}, so its meaning depends on {key}; it is "
                    f"evaluated only under the server's value {want!r}, and this session has {have!r}: "
                    f"RESET {key} (or set it to {want!r}) to read {table}",
                    reason="policy_semantics",
                )
