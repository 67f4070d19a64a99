"""The `RewriteContext` the rewriters see: one caller, one session, one policy snapshot.

The rewriters are synchronous (sqlglot is), while catalog lookups are async calls to the
upstream. The rewrite therefore runs in a worker thread and each lookup hops back onto the
event loop; a cached answer costs one hop, an uncached one a single upstream question
shared with every concurrent asker of the same name.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

from rowgate.catalog.model import RelationInfo
from rowgate.catalog.upstream_catalog import CatalogUnavailable, NotCached, UpstreamCatalog
from rowgate.identity.caller import Caller
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicySnapshot
from rowgate.rewrite.sql.memo import NotAnswerable, RewriteMemo
from rowgate.rewrite.sql.text_budget import TextBudget


class SessionRewriteContext:
    def __init__(
        self,
        *,
        caller: Caller,
        is_admin: bool,
        state: SessionState,
        snapshot: PolicySnapshot,
        catalog: UpstreamCatalog,
        global_temp_views: set[str],
        loop: asyncio.AbstractEventLoop,
        lookup_timeout: float | None = None,
        rewrite_memo: RewriteMemo | None = None,
        state_version: object = None,
        text_budget: TextBudget | None = None,
        qualify_temp_views: bool = False,
    ) -> None:
        self.caller = caller
        self.is_admin = is_admin
        self.current_catalog = state.current_catalog
        self.current_schema = state.current_schema
        self._temp_views = frozenset(state.temp_views)
        self._global_temp_views = frozenset(global_temp_views)
        self._snapshot = snapshot
        self._catalog = catalog
        self._loop = loop
        # Default: a little past the catalog's own deadline, which then fires first and says more.
        self._lookup_timeout = lookup_timeout if lookup_timeout is not None else getattr(catalog, "timeout", 30.0) + 5.0
        self.looked_up: list[TableName] = []
        self.rewrite_memo = rewrite_memo
        # The state version Spark holds for the session and the shared catalog
        # (proxy/rowgate/pipeline/session/epoch.py): settings, path, temp views by
        # definition, other connections and replicas. None when not read or unsettled.
        self.state_version = state_version
        # The SQL text this request may still have read (rewrite/sql/text_budget.py).
        self.text_budget = text_budget
        # Temp views forwarded as `system.session.<view>`: only to a Spark that reads that
        # form (upstream/protocol_versions.py TEMP_VIEW_NAMESPACE_SINCE).
        self.qualify_temp_views = qualify_temp_views

    def memo_context(self) -> tuple[object, ...]:
        """Everything besides the policy snapshot and catalog answers that a rewrite reads;
        a remembered rewrite is reused only under an equal tuple (proxy/rowgate/rewrite/sql/memo.py)."""
        return (
            self.caller,
            self.is_admin,
            self.current_catalog,
            self.current_schema,
            self._temp_views,
            self._global_temp_views,
            self.state_version,
            self.qualify_temp_views,
        )

    def memo_snapshot(self) -> PolicySnapshot:
        return self._snapshot

    def cached_lookup(self, name: TableName) -> RelationInfo | None:
        """What `lookup` would answer now without asking the upstream."""
        try:
            return self._catalog.peek(name)
        except NotCached as e:
            raise NotAnswerable(str(name)) from e

    def temp_view_exists(self, name: str) -> bool:
        return name.lower() in self._temp_views

    def lookup(self, name: TableName) -> RelationInfo | None:
        self.looked_up.append(name)
        try:
            return self._catalog.peek(name)
        except NotCached:
            pass
        future = asyncio.run_coroutine_threadsafe(self._catalog.lookup(name), self._loop)
        try:
            return future.result(self._lookup_timeout)
        except concurrent.futures.TimeoutError:  # the upstream's own deadline did not fire first
            future.cancel()
            raise CatalogUnavailable(f"the catalog lookup of {name} got no answer within {self._lookup_timeout:g}s") from None

    def policies_for(self, name: TableName) -> tuple[RowAccessPolicy, ...]:
        return self._snapshot.policies_for(name)

    def has_protected_tables(self) -> bool:
        return self._snapshot.has_any()
