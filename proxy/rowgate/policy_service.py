"""The one way row access policies are listed, created and dropped.

Both doors into the policy store use it: the policy statements run through Spark Connect
(pipeline/statements/policy_statements.py) and the `rowgate.v1.PolicyAdmin` API (admin/service.py). So
a policy is validated the same way whichever door it came through (the table exists and is a
table, the grantees are members, the filter is a boolean expression that Spark can run on the
table), stored, and the policy cache refreshed before the change is acknowledged.

It decides nothing about who may change policies (both callers require an admin) and
answers no client itself: a change it refuses raises rowgate's one `Refusal` (refusal.py)
naming the status, which each caller lets through as it is.

Every change names who makes it and through which door (`Provenance`), which the store
records with it. Changes of many policies at once (`apply` of a file, a rollback) are first
planned (`ChangePlan`: validated, diffed against the policies of one store version, nothing
written), which is also what an impact preview looks at, and then committed as one version,
only if the store is still at the version the plan was made on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.model import RelationKind
from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.identity.members import MemberError, parse_member
from rowgate.policy.ddl import ALL_AUTHENTICATED, PolicyDdlError, parse_policy_ddl
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store.base import (
    HistoryEntry,
    HistoryUnavailable,
    PolicyChange,
    PolicyConflict,
    PolicyExists,
    PolicyNotFound,
    PolicyStore,
    Provenance,
    Put,
    Remove,
    policy_key,
    same_policy,
)
from rowgate.refusal import Refusal
from rowgate.upstream.channel import Upstream

log = logging.getLogger("rowgate.policy")


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
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT, f"grantee {grantee!r} is not a member: {e}", reason="policy_grantee"
            ) from None
        if member not in found:
            found.append(member)
    return tuple(found)


@dataclass(frozen=True)
class PlannedChange:
    """One policy a plan creates, replaces or drops."""

    before: RowAccessPolicy | None
    after: RowAccessPolicy | None

    @property
    def action(self) -> str:
        if self.before is None:
            return "create"
        return "drop" if self.after is None else "replace"

    @property
    def policy(self) -> RowAccessPolicy:
        policy = self.after if self.after is not None else self.before
        assert policy is not None
        return policy


@dataclass(frozen=True)
class ChangePlan:
    """Policy changes validated and diffed against the policies of one store version.

    `changes` holds only what differs; `unchanged` counts what was asked for and is already
    so. `restore` marks a rollback's plan, whose policies keep their creation time.
    """

    version: int
    current: tuple[RowAccessPolicy, ...]
    changes: tuple[PlannedChange, ...]
    unchanged: int = 0
    restore: bool = False

    def store_changes(self) -> list[PolicyChange]:
        out: list[PolicyChange] = []
        for change in self.changes:
            if change.after is None:
                out.append(Remove(change.policy.table, change.policy.name))
            else:
                out.append(Put(change.after, restore=self.restore))
        return out

    def after(self) -> list[RowAccessPolicy]:
        """Every policy as it would be once the plan is committed."""
        slots = {(p.table, policy_key(p.name)): p for p in self.current}
        for change in self.changes:
            key = (change.policy.table, policy_key(change.policy.name))
            if change.after is None:
                slots.pop(key, None)
            else:
                slots[key] = change.after
        return sorted(slots.values(), key=lambda p: (p.table, policy_key(p.name)))

    def tables(self) -> list[TableName]:
        """The tables whose policies the plan changes."""
        return sorted({c.policy.table for c in self.changes})


def diff(current: Iterable[RowAccessPolicy], wanted: Iterable[RowAccessPolicy], scope: Iterable[TableName] | None) -> tuple:
    """(changes, unchanged) that turn the policies `current` into `wanted` on the tables of
    `scope` (every table either names when None)."""
    have = {(p.table, policy_key(p.name)): p for p in current}
    want = {(p.table, policy_key(p.name)): p for p in wanted}
    tables = set(scope) if scope is not None else {t for t, _ in have} | {t for t, _ in want}
    changes, unchanged = [], 0
    for key in sorted((k for k in have.keys() | want.keys() if k[0] in tables), key=lambda k: (k[0], k[1])):
        before, after = have.get(key), want.get(key)
        if same_policy(before, after):
            unchanged += before is not None
            continue
        changes.append(PlannedChange(before, after))
    return tuple(changes), unchanged


class PolicyService:
    def __init__(self, store: PolicyStore, cache: PolicyCache, catalog: UpstreamCatalog) -> None:
        self.store = store  # PolicyStore
        self.cache = cache  # PolicyCache, refreshed after every change
        self.catalog = catalog  # UpstreamCatalog: the table's kind, and Spark's word on the filter

    async def list_policies(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        return await asyncio.to_thread(self.store.list, table)

    async def drop_policy(self, table: TableName, name: str, *, if_exists: bool = False, by: Provenance) -> bool:
        try:
            dropped = await asyncio.to_thread(self.store.drop, table, name, if_exists=if_exists, by=by)
        except PolicyNotFound as e:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"no row access policy {name} on {table}", rule="policy_not_found") from e
        await self._refresh()
        return dropped

    async def drop_all(self, table: TableName, *, by: Provenance) -> None:
        await asyncio.to_thread(self.store.drop_all, table, by=by)
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
        by: Provenance,
    ) -> RowAccessPolicy:
        """Validates and stores one policy; no grantees means every authenticated user."""
        if replace and if_not_exists:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                "OR REPLACE and IF NOT EXISTS cannot be used together",
                rule="replace_and_if_not_exists",
            )
        policy = await self.validated(table, name, grantees, filter_sql)
        try:
            stored = await asyncio.to_thread(self.store.create, policy, replace=replace, if_not_exists=if_not_exists, by=by)
        except PolicyExists as e:
            raise _exists(table, name) from e
        await self._refresh()
        return stored

    async def validated(self, table: TableName, name: str, grantees: Sequence[str], filter_sql: str) -> RowAccessPolicy:
        """The policy as it would be stored, once Spark agreed it can be (nothing is written):
        the table exists and is a table, the grantees are members, the filter runs on it."""
        info = await self.catalog.lookup(table)
        if info is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"table {table} does not exist", reason="policy_table_missing")
        if info.kind is not RelationKind.TABLE:
            kind = info.kind.value.lower().replace("_", " ")
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{table} is a {kind}; row access policies go on tables",
                rule="policy_on_non_table",
            )
        members = canonical_grantees(tuple(grantees))
        await self._check_filter_runs(table, filter_sql)
        now = datetime.now(UTC)
        return RowAccessPolicy(
            table=table,
            name=name,
            grantees=members or (ALL_AUTHENTICATED,),
            filter_sql=filter_sql,
            created_at=now,
            updated_at=now,
        )

    # -- plans: changes of several policies, previewed or committed as one version ----------

    async def current(self) -> tuple[int, list[RowAccessPolicy]]:
        """Every policy, with the store version it belongs to (one consistent read)."""
        return await asyncio.to_thread(self.store.load)

    async def plan_create(
        self,
        table: TableName,
        name: str,
        grantees: Sequence[str],
        filter_sql: str,
        *,
        replace: bool = False,
        if_not_exists: bool = False,
    ) -> ChangePlan:
        """What `create_policy` would change, refused where it would be refused."""
        if replace and if_not_exists:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                "OR REPLACE and IF NOT EXISTS cannot be used together",
                rule="replace_and_if_not_exists",
            )
        policy = await self.validated(table, name, grantees, filter_sql)
        version, current = await self.current()
        existing = _find(current, table, name)
        if existing is not None and not replace:
            if if_not_exists:
                return ChangePlan(version, tuple(current), (), unchanged=1)
            raise _exists(table, name)
        if existing is not None:
            policy = RowAccessPolicy(table, name, policy.grantees, policy.filter_sql, existing.created_at, policy.updated_at)
            if same_policy(existing, policy):
                return ChangePlan(version, tuple(current), (), unchanged=1)
        return ChangePlan(version, tuple(current), (PlannedChange(existing, policy),))

    async def plan_drop(self, table: TableName, name: str | None, *, if_exists: bool = False) -> ChangePlan:
        """What `drop_policy` (or, without a name, `drop_all`) would change."""
        version, current = await self.current()
        if name is None:
            dropped = [p for p in current if p.table == table]
        else:
            existing = _find(current, table, name)
            if existing is None and not if_exists:
                raise Refusal(grpc.StatusCode.NOT_FOUND, f"no row access policy {name} on {table}", rule="policy_not_found")
            dropped = [existing] if existing is not None else []
        return ChangePlan(version, tuple(current), tuple(PlannedChange(p, None) for p in dropped))

    async def plan_changes(
        self,
        version: int,
        current: Sequence[RowAccessPolicy],
        puts: Sequence[tuple[TableName, str, Sequence[str], str]] = (),
        drops: Sequence[tuple[TableName, str]] = (),
        *,
        unchanged: int = 0,
    ) -> ChangePlan:
        """Policies to create or replace ((table, name, grantees, filter) each, validated like
        a CREATE) and to drop, planned on `current` (the policies of store version `version`)."""
        have = {(p.table, policy_key(p.name)): p for p in current}
        changes = []
        for table, name, grantees, filter_sql in puts:
            existing = have.get((table, policy_key(name)))
            try:
                policy = await self.validated(table, name, grantees, filter_sql)
            except Refusal as e:
                verb = "replace" if existing is not None else "create"
                raise Refusal(e.code, f"cannot {verb} {table} {name}: {e.message}", reason=e.reason, rule=e.rule) from e
            if existing is not None:
                policy = RowAccessPolicy(table, name, policy.grantees, policy.filter_sql, existing.created_at, policy.updated_at)
                if same_policy(existing, policy):
                    unchanged += 1
                    continue
            changes.append(PlannedChange(existing, policy))
        for table, name in drops:
            existing = have.get((table, policy_key(name)))
            if existing is not None:
                changes.append(PlannedChange(existing, None))
        return ChangePlan(version, tuple(current), tuple(changes), unchanged=unchanged)

    async def plan_rollback(self, to_version: int, table: TableName | None = None) -> ChangePlan:
        """What restores the policies (on `table`, or all) as they were at `to_version`.

        Each restored policy must still be one Spark accepts: its table exists and its filter
        runs. A table that is gone is refused rather than skipped, since skipping it could
        leave another table unprotected (a rollback across a rename would drop the renamed
        table's policies and restore none).
        """
        try:
            version, current, target = await asyncio.to_thread(self.store.load_at, to_version, table)
        except HistoryUnavailable as e:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, str(e), reason="history_unavailable") from e
        scope = [table] if table is not None else None
        changes, unchanged = diff(current, target, scope)
        missing = []
        for change in changes:
            if change.after is None:
                continue
            policy = change.after
            info = await self.catalog.lookup(policy.table)
            if info is None or info.kind is not RelationKind.TABLE:
                missing.append(str(policy.table))
                continue
            await self._check_filter_runs(policy.table, policy.filter_sql)
        if missing:
            names = ", ".join(sorted(set(missing)))
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cannot restore the policies of version {to_version} on {names}: no such table now"
                " (roll back the other tables one by one with a table given)",
                reason="rollback_table_missing",
            )
        return ChangePlan(version, tuple(current), changes, unchanged=unchanged, restore=True)

    async def commit(self, plan: ChangePlan, *, by: Provenance) -> int:
        """Make the plan's changes as one version, if the store is still at the plan's version."""
        if not plan.changes:
            return plan.version
        try:
            version = await asyncio.to_thread(self.store.apply, plan.store_changes(), by=by, expect_version=plan.version)
        except PolicyConflict as e:
            raise Refusal(grpc.StatusCode.ABORTED, f"{e}; run it again", reason="policy_conflict") from e
        await self._refresh()
        return version

    async def history(self, table: TableName | None = None, *, after_version: int = 0) -> list[HistoryEntry]:
        return await asyncio.to_thread(self.store.history, table, after_version=after_version)

    async def history_since(self) -> int:
        return await asyncio.to_thread(self.store.history_since)

    async def _refresh(self) -> None:
        await asyncio.to_thread(lambda: self.cache.refresh(force=True))

    async def _check_filter_runs(self, table: TableName, filter_sql: str) -> None:
        """Spark itself is the judge of the filter: it must analyse as a boolean condition
        over the table's columns, in the table's own catalog and database (where the
        rewriter will place it). A zero-row query reads no data."""
        try:  # the grammar's own check, as if the filter was written in FILTER USING (...)
            parse_policy_ddl(f"CREATE ROW ACCESS POLICY p ON t FILTER USING ({filter_sql})")
        except PolicyDdlError:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                "the filter must be a boolean expression without DML",
                reason="policy_filter_invalid",
            ) from None
        session = ("rowgate-validator", str(uuid.uuid4()))
        try:
            await self.catalog.run_sql_rows(f"USE {table.namespace_sql()}", session=session)
            await self.catalog.run_sql_rows(f"SELECT * FROM {table.sql()} WHERE TRUE AND ({filter_sql}) LIMIT 0", session=session)
        except UpstreamSqlError as e:
            first_line = str(e).splitlines()[0] if str(e) else "rejected by Spark"
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the filter does not run on {table}: {first_line}",
                reason="policy_filter_invalid",
            ) from e
        finally:
            await release_session(self.catalog.upstream, session)


def _find(policies: Iterable[RowAccessPolicy], table: TableName, name: str) -> RowAccessPolicy | None:
    return next((p for p in policies if p.table == table and policy_key(p.name) == policy_key(name)), None)


def _exists(table: TableName, name: str) -> Refusal:
    return Refusal(
        grpc.StatusCode.ALREADY_EXISTS,
        f"row access policy {name} already exists on {table} (use OR REPLACE or IF NOT EXISTS)",
        reason="policy_exists",
    )


async def release_session(upstream: Upstream, session: tuple[str, str]) -> None:
    """End a Spark session the proxy opened for its own questions (an idle one expires anyway)."""
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
