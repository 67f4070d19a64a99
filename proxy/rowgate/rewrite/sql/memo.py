"""Rewrites remembered for exactly the inputs they were computed from.

A pyspark `spark.sql(q).collect()` sends the SQL twice: once as a command, then as the
relation Spark echoes back (the rewritten text). Dashboards and jobs send the same texts
again and again. Parsing and resolving a TPC-H query costs 4-6 ms on a loaded 2-core
machine, each time; a remembered answer costs a dictionary lookup.

A remembered rewrite is only reused when everything `rewrite_sql` could have read is the
same, so the answer is the one a fresh rewrite would give (the rewriter is deterministic):

- the text, its arguments and the rendering option;
- whether protection is in force (`protection.protection_in_force`): it decides whether the
  text is forwarded as sent or as the proxy's own rendering with every name pinned;
- the context's `memo_context()`: caller (principal and groups), admin flag, current
  catalog and database, the session's temp views and the global temp views;
- the very policy snapshot object (not only its version number);
- every catalog answer the rewrite asked for: at reuse each name must be answered now,
  from the cache, by an equal answer. A name the cache no longer holds, or holds with a
  different answer (a view redefined, a table dropped), makes it a miss.

Refusals are not remembered: a refused text is rewritten (and refused) again. Long texts
are not remembered, and the memo holds a bounded number of characters, oldest out first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rowgate.catalog.model import RelationInfo
from rowgate.policy.model import TableName
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.names import Args
from rowgate.rewrite.sql.protection import protection_in_force
from rowgate.rewrite.sql.result import RewriteResult

# Texts longer than this are rewritten every time; they are rare and would crowd out the rest.
MAX_TEXT_CHARS = 32_768
DEFAULT_BUDGET_CHARS = 8_000_000


class NotAnswerable(Exception):
    """The context cannot answer a catalog question without asking the upstream."""


class MemoContext(RewriteContext, Protocol):
    """A `RewriteContext` that can also say what a remembered rewrite depends on
    (pipeline/enforce/rewrite_context.py is the one the proxy runs with)."""

    def memo_context(self) -> tuple[object, ...]:
        """Everything besides the policy snapshot and catalog answers that a rewrite reads."""

    def memo_snapshot(self) -> object:
        """The policy snapshot, compared by identity."""

    def cached_lookup(self, name: TableName) -> RelationInfo | None:
        """What `lookup` would answer now without asking the upstream; raises `NotAnswerable`."""


# `rewriter._rewrite_uncached`: (sql, ctx, args, name_identity_columns) -> result
Compute = Callable[[str, RewriteContext, Args, bool], RewriteResult]


@dataclass(frozen=True)
class _Entry:
    snapshot: object
    lookups: tuple[tuple[TableName, RelationInfo | None], ...]  # as seen
    result: RewriteResult
    size: int


class RewriteMemo:
    def __init__(self, budget_chars: int = DEFAULT_BUDGET_CHARS, observe: Callable[[bool, float], None] | None = None) -> None:
        self.budget_chars = budget_chars
        # (hit, seconds): a computed rewrite reports how long it took, a hit 0.0
        self.observe = observe
        self._entries: OrderedDict[tuple[object, ...], _Entry] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def rewrite(self, sql: str, ctx: MemoContext, args: Args, name_identity_columns: bool, compute: Compute) -> RewriteResult:
        """`compute(sql, ctx, args, name_identity_columns)`, or its remembered result."""
        if len(sql) > MAX_TEXT_CHARS:
            return self._computed(sql, ctx, args, name_identity_columns, compute, remember=None)
        key = (sql, _frozen(args), name_identity_columns, protection_in_force(ctx), ctx.memo_context())
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and entry.snapshot is ctx.memo_snapshot() and _still_answered(ctx, entry.lookups):
            self.hits += 1
            if self.observe is not None:
                self.observe(True, 0.0)
            return entry.result
        return self._computed(sql, ctx, args, name_identity_columns, compute, remember=key)

    def _computed(
        self,
        sql: str,
        ctx: MemoContext,
        args: Args,
        name_identity_columns: bool,
        compute: Compute,
        remember: tuple[object, ...] | None,
    ) -> RewriteResult:
        self.misses += 1
        recording = _Recording(ctx)
        snapshot = ctx.memo_snapshot()
        started = time.perf_counter()
        result = compute(sql, recording, args, name_identity_columns)
        if self.observe is not None:
            self.observe(False, time.perf_counter() - started)
        if remember is not None and recording.complete and len(result.sql) <= 4 * MAX_TEXT_CHARS:
            self._store(remember, _Entry(snapshot, tuple(recording.lookups), result, len(sql) + len(result.sql)))
        return result

    def _store(self, key: tuple[object, ...], entry: _Entry) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= old.size
            self._entries[key] = entry
            self._chars += entry.size
            while self._chars > self.budget_chars and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._chars -= evicted.size

    def __len__(self) -> int:
        return len(self._entries)


def _still_answered(ctx: MemoContext, lookups: tuple[tuple[TableName, RelationInfo | None], ...]) -> bool:
    for name, answer in lookups:
        try:
            if ctx.cached_lookup(name) != answer:
                return False
        except NotAnswerable:
            return False
    return True


def _frozen(args: Args) -> tuple[str, tuple[Any, ...]] | None:
    if args is None:
        return None
    if isinstance(args, dict):
        return ("named", tuple(sorted(args.items())))
    return ("positional", tuple(args))


class _Recording:
    """The context as the rewriter sees it, noting every catalog answer it was given.

    Nested rewrites (views) see no memo through it, so everything they look up is noted
    here too and the outer entry depends on it.
    """

    rewrite_memo = None

    def __init__(self, ctx: MemoContext) -> None:
        self._ctx = ctx
        self.lookups: list[tuple[TableName, RelationInfo | None]] = []
        self.complete = True

    def lookup(self, name: TableName) -> RelationInfo | None:
        try:
            answer = self._ctx.lookup(name)
        except BaseException:
            self.complete = False
            raise
        self.lookups.append((name, answer))
        return answer

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._ctx, attr)
