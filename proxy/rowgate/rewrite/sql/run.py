"""The state of one rewrite: what it may ask (cached) and what the passes have found so far.

Every pass of one `rewrite_sql` call reads and writes the same `Run`: the context's answers
(policies, catalog lookups, temp views) are asked once per name and call, and the facts the
result reports (tables read, filters applied, paths, views expanded, ...) are gathered here
by the pass that learns them. Nothing in it changes a tree.

>>> from types import SimpleNamespace
>>> from rowgate.identity.caller import Caller
>>> asked = []
>>> ctx = SimpleNamespace(caller=Caller("user:ann@example.com"), current_catalog="spark_catalog",
...     current_schema="default", temp_view_exists=lambda n: asked.append(n) or n.lower() == "tmp")
>>> run = Run(ctx, None, guarded=True)
>>> run.temp_view_exists("TMP"), run.temp_view_exists("tmp"), asked
(True, True, ['TMP'])
>>> run.unanalysable("this")
Traceback (most recent call last):
...
rowgate.refusal.Refusal: cannot analyse this while row access policies are in force
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from rowgate.catalog.model import RelationInfo
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.rewrite.facts import ReportedFacts
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.names import Args
from rowgate.rewrite.sql.scope import Scope


class Run:
    """State of one `rewrite_sql` call: caches and what has been found so far."""

    def __init__(self, ctx: RewriteContext, args: Args, guarded: bool):
        self.ctx = ctx
        self.args = args
        self.guarded = guarded  # protection in force (protection.py)
        self.caller = ctx.caller
        self.email = ctx.caller.email
        self.changes = 0  # tree edits made; with nothing protected, no edit means "forward as sent"
        # What the passes found about reads (rewrite/facts.py); the statement's own facts
        # (tables written, shipped code, effects) are added when the result is rendered.
        self.found = ReportedFacts()
        # Spark reads `system.session.<view>` (4.0 on); a context may say its server does not.
        self.qualify_temp_views: bool = bool(getattr(ctx, "qualify_temp_views", True))
        # ... and so do one-part names nothing explains, for non-admins: only admins may turn
        # on Spark's SQL path (settings allow list), through which such a name is a table of
        # another database; theirs go as written and the second opinion checks Spark's reading.
        self.qualify_unknown: bool = self.qualify_temp_views and not getattr(ctx, "is_admin", False)
        self.positional_count = 0
        self.name_identity_columns = True
        self.describe_column: tuple[str, ...] | None = None  # DESCRIBE t col (forms.py)
        self._policy_cache: dict[TableName, tuple[RowAccessPolicy, ...]] = {}
        self._lookup_cache: dict[TableName, RelationInfo | None] = {}
        self._temp_cache: dict[str, bool] = {}
        # Per-call caches the passes own: filtering SELECTs (protect.py), expanded view texts (reads.py).
        self.inner_cache: dict[tuple, tuple[exp.Select, str]] = {}
        self.view_cache: dict[tuple[TableName, int], exp.Query | None] = {}

    def scratch(self) -> Run:
        """A fresh run over the same context, for analysing text that is not forwarded."""
        return Run(self.ctx, self.args, self.guarded)

    def policies_for(self, name: TableName) -> tuple[RowAccessPolicy, ...]:
        if name not in self._policy_cache:
            self._policy_cache[name] = tuple(self.ctx.policies_for(name))
        return self._policy_cache[name]

    def lookup(self, name: TableName) -> RelationInfo | None:
        if name not in self._lookup_cache:
            self._lookup_cache[name] = self.ctx.lookup(name)
        return self._lookup_cache[name]

    def temp_view_exists(self, name: str) -> bool:
        key = name.lower()
        if key not in self._temp_cache:
            self._temp_cache[key] = bool(self.ctx.temp_view_exists(name))
        return self._temp_cache[key]

    def temp_views_in(self, scope: Scope) -> Callable[[str], bool]:
        """How to ask for temp views in `scope` (never, inside a persistent view's text)."""
        return self.temp_view_exists if scope.namespace.temp_views else never

    def top_scope(self) -> Scope:
        return Scope.top(self.ctx.current_catalog, self.ctx.current_schema, self.qualify_temp_views)

    def body_scope(self) -> Scope:
        """Where a stored body being created now (CREATE VIEW/FUNCTION) resolves its names."""
        return Scope.view_body(self.ctx.current_catalog, self.ctx.current_schema)

    def unanalysable(self, what: str) -> None:
        """Refuse `what` while protection is in force; with none, the caller passes it on."""
        if self.guarded:
            raise refuse.invalid("unanalysable_sql", f"cannot analyse {what} while row access policies are in force")


def never(_name: str) -> bool:
    """No temp view answers (a persistent view's text, already filtered text)."""
    return False
