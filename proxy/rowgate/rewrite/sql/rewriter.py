"""`rewrite_sql`: one SQL text, one caller, one session -> the text Spark may run.

The steps, in order (each lives in its own module; this one only sequences them):

1. fast path: no table is protected and the text is a plain query with no identity
   function -> forwarded untouched, unparsed;
2. `statements.classify_text`: SET/RESET/SET CATALOG/EXPLAIN/SHOW and the proxy's own policy
   DDL, read from tokens the way Spark reads them;
3. parse with sqlglot (Spark dialect, errors raise); when protection is in force, anything
   that does not parse, is an opaque `Command`, has several statements, a `${...}`
   variable, or a name whose text is not known now is refused (fail closed);
4. `identity.bind_caller_identity`: current_user()/session_user()/user() -> the caller's email;
5. `statements.enforce`: writes into protected tables need a FILTER USING (TRUE) grant;
   effects (USE, views created/dropped, ...) are collected;
6. every relation read (`scope.relation_references`) is resolved (`names.resolve`): a
   protected table becomes a filtering derived table (`wrap`), a view that reaches one is
   expanded recursively (`views`), already filtered text is recognised and left alone;
7. while protection is in force, every relation name the proxy resolved to a catalog
   table or view (reads, write and DDL targets, names inside stored view and function
   bodies) is pinned: rendered fully qualified, so a concurrent `USE`/`SET CATALOG` cannot
   change what Spark reads (`pin`); temp views, CTEs and one-part names the catalog does
   not know (temp views Spark made itself) stay as written;
8. while protection is in force the statement is always forwarded as the proxy's own
   rendering (comments dropped; text-level statements by `canonical`), never as the
   client's bytes: Spark and sqlglot read some texts differently (a `--` comment continued
   over a backslash-newline, for one), and what Spark runs must be what the proxy read.
   With nothing protected, a statement is rendered again only if something changed, so it
   passes byte for byte.

"Protection in force" means at least one table has a policy. The `RewriteContext` protocol
has no way to ask that; `rewrite_sql` uses an optional `has_protected_tables()` method of
the context when there is one (the policy snapshot's `has_any()`), and otherwise assumes
protection is in force (`protection.protection_in_force`).

>>> from types import SimpleNamespace
>>> from datetime import datetime
>>> from rowgate.identity.caller import Caller
>>> from rowgate.policy.model import RowAccessPolicy
>>> t = TableName("spark_catalog", "default", "orders")
>>> p = RowAccessPolicy(t, "mine", ("allAuthenticatedUsers",), "owner = SESSION_USER()", datetime.min, datetime.min)
>>> ctx = SimpleNamespace(
...     caller=Caller("user:ann@example.com"), is_admin=False, current_catalog="spark_catalog",
...     current_schema="default", temp_view_exists=lambda n: False, lookup=lambda n: None,
...     policies_for=lambda n: (p,) if n == t else (), has_protected_tables=lambda: True)
>>> rewrite_sql("SELECT o.id FROM orders o WHERE o.id > 1", ctx).sql
"SELECT o.id FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE TRUE AND ((owner = 'ann@example.com'))) AS o WHERE o.id > 1"
>>> rewrite_sql("SELECT * FROM lineitem -- a comment", ctx).sql  # unknown to this catalog: not pinned
'SELECT * FROM lineitem'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError
from sqlglot.tokens import Token, TokenType

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.identity.caller import Caller
from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.sql import canonical as own_text
from rowgate.rewrite.sql import statements as st
from rowgate.rewrite.sql.code import code_in
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.errors import RewriteRefused
from rowgate.rewrite.sql.forms import special_form
from rowgate.rewrite.sql.identity import bind_caller_identity
from rowgate.rewrite.sql.leakproof import place_below, placeable
from rowgate.rewrite.sql.names import (
    FILE_FORMATS,
    POSITIONAL_PREFIX,
    Args,
    Unresolvable,
    column_parts,
    display,
    is_identifier_clause,
    parse_multipart,
    quoted_table,
    resolve,
    written_parts,
)
from rowgate.rewrite.sql.pin import multipart_text, pin_relations, pin_targets, pinned_column
from rowgate.rewrite.sql.protection import protection_in_force
from rowgate.rewrite.sql.result import NO_EFFECTS, PathRead, RewriteResult, SessionEffects
from rowgate.rewrite.sql.scope import Reference, Scope, relation_references
from rowgate.rewrite.sql.shape import check_shape, normalize
from rowgate.rewrite.sql.views import enter_view, view_columns, view_query, view_scope
from rowgate.rewrite.sql.wrap import (
    canonical,
    check_modifiers,
    derived_table,
    inner_select,
    marker_table,
    needs_barrier,
    qualify_filter_tables,
    render,
    split_sample,
    unqualify_columns,
)

_SPARK = Dialect.get_or_raise("spark")

# Built-in table-valued functions and generators that read no relation.
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "posexplode",
        "posexplode_outer",
        "stack",
        "json_tuple",
        "variant_explode",
        "variant_explode_outer",
        "sql_keywords",
        "collations",
    }
)

_QUERY_START = re.compile(r"\s*(?:select\b|values\b|\()", re.IGNORECASE)


def rewrite_sql(sql: str, ctx: RewriteContext, *, args: Args = None, name_identity_columns: bool = True) -> RewriteResult:
    """Rewrite one SQL text for the caller and session of `ctx`; raises `RewriteRefused`.

    `args` are the statement's SQL arguments: a mapping for named (`:name`) parameters or a
    sequence for positional (`?`) ones; only string values matter (for IDENTIFIER()).
    `name_identity_columns=False` is for a DataFrame expression string rewritten as
    `SELECT <text>`: an alias there would not be valid everywhere the text is used.
    A context with a `rewrite_memo` (proxy/rowgate/rewrite/sql/memo.py) may answer from it.
    """
    guarded = protection_in_force(ctx)
    if not guarded and ";" not in sql and "user" not in sql.lower() and _QUERY_START.match(sql):
        return RewriteResult(sql=sql, statement_kind="query", analysed=False)
    memo = getattr(ctx, "rewrite_memo", None)
    if memo is not None:
        return memo.rewrite(sql, ctx, args, name_identity_columns, _rewrite_uncached)
    return _rewrite_uncached(sql, ctx, args, name_identity_columns)


def _rewrite_uncached(sql: str, ctx: RewriteContext, args: Args, name_identity_columns: bool) -> RewriteResult:
    guarded = protection_in_force(ctx)
    run = _Run(ctx, args, guarded)
    run.name_identity_columns = name_identity_columns
    try:
        return run.text(sql)
    except RecursionError:
        if guarded:
            raise RewriteRefused.invalid("the statement is nested too deeply for the proxy to analyse") from None
        return RewriteResult(sql=sql, statement_kind="unparsed", analysed=False)


def _split_statements(tokens: list[Token]) -> list[list[Token]]:
    out: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            out.append([])
        else:
            out[-1].append(token)
    return [s for s in out if s]


class _Run:
    """State of one `rewrite_sql` call: caches and what has been found so far."""

    def __init__(self, ctx: RewriteContext, args: Args, guarded: bool):
        self.ctx = ctx
        self.args = args
        self.guarded = guarded
        self.caller = ctx.caller
        self.email = ctx.caller.email
        self.changes = 0
        self.filtered = False
        self.identity_bound = False
        self.tables_read: set[TableName] = set()
        self.paths: list[PathRead] = []
        self.temp_views: set[str] = set()
        self.views_expanded: set[TableName] = set()
        self.table_functions: list[str] = []
        self.policies: set[str] = set()
        self.placed: set[tuple[TableName, str]] = set()  # leakproof predicates below a guard
        self.positional_count = 0
        self.name_identity_columns = True
        self.describe_column: tuple[str, ...] | None = None  # DESCRIBE t col (forms.py)
        self._policy_cache: dict[TableName, tuple] = {}
        self._lookup_cache: dict[TableName, RelationInfo | None] = {}
        self._temp_cache: dict[str, bool] = {}
        self._inner: dict[tuple, tuple[exp.Select, str]] = {}
        self._views: dict[tuple[TableName, int], exp.Query | None] = {}

    # -- context, cached ------------------------------------------------------------------

    def policies_for(self, name: TableName) -> tuple:
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

    def top_scope(self) -> Scope:
        return Scope.top(self.ctx.current_catalog, self.ctx.current_schema)

    def unanalysable(self, what: str) -> None:
        if self.guarded:
            raise RewriteRefused.invalid(f"cannot analyse {what} while row access policies are in force")

    # -- text level -----------------------------------------------------------------------

    def text(self, sql: str) -> RewriteResult:
        if self.guarded and "${" in sql:
            raise RewriteRefused.invalid("${...} variable substitution is not allowed while row access policies are in force")
        try:
            tokens = own_text.spark_strings(_SPARK.tokenize(sql), sql)
        except SqlglotError as e:
            self.unanalysable(f"SQL the proxy cannot tokenize ({_short(e)})")
            return self.passthrough(sql, "unparsed")
        parts = _split_statements(tokens)
        if not parts:
            return self.passthrough("" if self.guarded else sql, "empty", analysed=True, source=sql)
        if len(parts) > 1:
            self.unanalysable("multiple statements in one text (SQL scripting)")
            return self.passthrough(sql, "multiple")
        return self.statement(sql, parts[0])

    def passthrough(
        self, sql: str, kind: str, *, analysed: bool = False, effects: SessionEffects = NO_EFFECTS, source: str | None = None
    ) -> RewriteResult:
        """`sql` forwarded for a statement of `kind`; `source` is the client's text when `sql`
        is the proxy's own form of it."""
        changed = source is not None and sql != source
        return RewriteResult(sql=sql, statement_kind=kind, analysed=analysed, session_effects=effects, changed=changed)

    def statement(self, sql: str, tokens: list[Token]) -> RewriteResult:
        text = st.classify_text(tokens, sql)
        if text is not None:
            if text.kind == "explain":
                return self.explain(sql, text)
            if text.refusal is not None:
                self.unanalysable(text.refusal)
            if text.admin_only is not None and self.guarded and not self.ctx.is_admin:
                raise RewriteRefused.denied(text.admin_only)
            out = own_text.text_statement(text, tokens, sql) if self.guarded else sql
            return self.passthrough(out, text.kind, analysed=text.refusal is None, effects=text.effects, source=sql)
        parse_sql, parse_tokens, renamed = sql, tokens, False
        if isinstance(self.args, Sequence) and not isinstance(self.args, (str, bytes)):
            holders = [t for t in tokens if t.token_type == TokenType.PLACEHOLDER and t.text == "?"]
            if holders:
                parse_sql = _number_positional(sql, holders)
                parse_tokens = _split_statements(own_text.spark_strings(_SPARK.tokenize(parse_sql), parse_sql))[0]
                renamed = True
                self.positional_count = len(holders)
        form = special_form(parse_tokens)
        if form is not None:
            parse_tokens, self.describe_column = form.tokens, form.column
        try:
            trees = [t for t in _SPARK.parser(error_level=ErrorLevel.RAISE).parse(parse_tokens, parse_sql) if t is not None]
        except SqlglotError as e:
            self.unanalysable(f"SQL the proxy cannot parse ({_short(e)})")
            return self.passthrough(sql, "unparsed")
        if len(trees) != 1:
            self.unanalysable("a text that does not hold exactly one statement")
            return self.passthrough(sql, "unparsed")
        return self.parsed(sql, trees[0], renamed)

    def explain(self, sql: str, text: st.TextStatement) -> RewriteResult:
        assert text.explained_offset is not None
        offset = text.explained_offset
        inner_sql = sql[offset:]
        inner = self.text(inner_sql)
        if self.guarded:
            out = " ".join(("EXPLAIN", *((text.explain_mode,) if text.explain_mode else ()), inner.sql))
        else:
            out = sql if inner.sql == inner_sql else sql[:offset] + inner.sql
        return replace(inner, sql=out, statement_kind="explain", changed=out != sql)

    # -- parsed statement -----------------------------------------------------------------

    def parsed(self, sql: str, stmt: exp.Expression, renamed: bool) -> RewriteResult:
        command = stmt if isinstance(stmt, exp.Command) else stmt.find(exp.Command)
        if command is not None:
            self.unanalysable(f"the {str(command.this).upper()} statement (opaque to the proxy's parser)")
            return self.passthrough(sql, "command")
        normalize(stmt)
        classified = st.classify(stmt)
        if classified.kind == "unknown":
            self.unanalysable(f"this {type(stmt).__name__.upper()} statement")
            return self.passthrough(sql, "unknown")
        if self.guarded:
            check_shape(stmt)
        if classified.kind == "use":
            return self.use(sql, stmt)
        if classified.creates_function and self.guarded and not self.ctx.is_admin:
            raise RewriteRefused.denied(
                "creating functions is reserved to admins while row access policies are in force "
                "(a function can stand in for one a row filter calls)"
            )

        definer_ids = frozenset(id(body) for _, body in classified.definer_bodies)
        if bind_caller_identity(stmt, self.email, skip=definer_ids, name_columns=self.name_identity_columns):
            self.identity_bound = True
            self.changes += 1
        enforced = st.enforce(classified, self.resolve_target, self.policies_for, self.caller)
        self.rewrite_tree(stmt, self.top_scope(), (), qualify=self.guarded, exclude=classified.excluded_ids())
        for what, body in classified.definer_bodies:
            self.check_definer_body(what, body)
        if self.guarded:
            pin_targets(classified.targets, self.resolve_target)
            for _, body in classified.definer_bodies:
                scope = Scope.view_body(self.ctx.current_catalog, self.ctx.current_schema)
                pin_relations(body, scope, self.args, self.temp_view_exists, self.lookup)
        if any(t.role == st.CREATE_GLOBAL_TEMP_VIEW for t in classified.targets) and (
            self.filtered or (self.guarded and any(not v.startswith("global_temp.") for v in self.temp_views))
        ):
            # Global temp views are shared by every session: this caller's filtered rows (also
            # those held in its session temp views) would reach callers the policies exclude.
            raise RewriteRefused.denied(
                "a global temporary view over protected or session data would show this caller's rows to every "
                "session; create a session temporary view instead"
            )

        out = sql
        if self.changes or self.guarded:
            out = self.render(stmt, renamed)
            if self.describe_column is not None:
                out += " " + ".".join(own_text.identifier(p) for p in self.describe_column)
        return RewriteResult(
            sql=out,
            statement_kind=classified.kind,
            filtered=self.filtered,
            tables_read=frozenset(self.tables_read),
            tables_written=frozenset(enforced.tables_written),
            policies_applied=tuple(sorted(self.policies)),
            paths_read=tuple(dict.fromkeys(self.paths)),
            temp_views_read=frozenset(self.temp_views),
            views_expanded=frozenset(self.views_expanded),
            table_functions=tuple(dict.fromkeys(self.table_functions)),
            user_code=code_in(stmt),
            identity_bound=self.identity_bound,
            changed=out != sql,
            leakproof_placed=tuple(sorted(self.placed, key=str)),
            session_effects=enforced.effects,
        )

    def use(self, sql: str, stmt: exp.Expression) -> RewriteResult:
        target = stmt.this
        kind = stmt.args.get("kind")
        kind_text = kind.name if isinstance(kind, exp.Expression) else str(kind or "")
        try:
            if not isinstance(target, exp.Table):
                raise Unresolvable("an unexpected USE target")
            parts = written_parts(target, self.args)
        except Unresolvable as e:
            self.unanalysable(f"the USE target ({e})")
            return self.passthrough(sql, "use")
        effects = st.use_effects(parts, kind_text, self.ctx.current_catalog)
        # sqlglot renders `USE NAMESPACE x` as `USE NAMESPACE AS x`: written out here
        words = ("USE", *((kind_text.upper(),) if kind_text else ()), ".".join(own_text.identifier(p) for p in parts))
        out = " ".join(words) if self.guarded else sql
        return RewriteResult(sql=out, statement_kind="use", session_effects=effects, changed=out != sql)

    def render(self, stmt: exp.Expression, renamed: bool) -> str:
        if renamed:
            holders = [p for p in stmt.find_all(exp.Placeholder, bfs=False) if p.name.startswith(POSITIONAL_PREFIX)]
            order = [int(p.name[len(POSITIONAL_PREFIX) :]) for p in holders]
            if order != list(range(self.positional_count)):
                raise RewriteRefused.invalid(
                    "positional (?) parameters cannot be kept in place in the rewritten statement (a ? inside "
                    "IDENTIFIER() of a filtered relation, or FROM-first/pipe syntax); use named parameters"
                )
            for p in holders:
                p.replace(exp.Placeholder())
        return render(stmt)

    def resolve_target(self, node: exp.Expression) -> st.TargetName:
        if not isinstance(node, exp.Table):
            return st.TargetName((), None)
        try:
            parts = written_parts(node, self.args)
        except Unresolvable as e:
            self.unanalysable(f"the name of the statement's target ({e})")
            return st.TargetName((), None)
        resolved = resolve(parts, self.top_scope(), self.temp_view_exists, ctes=False)
        if resolved.kind == "unresolved":
            self.unanalysable(f"the target name {display(parts)} ({resolved.reason})")
            return st.TargetName(parts, None)
        if resolved.kind == "global_temp_view":
            return st.TargetName(parts, None, global_temp_view=resolved.view)
        if resolved.kind == "temp_view":
            ns = self.top_scope().namespace
            return st.TargetName(parts, TableName(ns.catalog, ns.schema, parts[0]), temp_view=resolved.view)
        path = None
        maybe = resolved.maybe_path
        if maybe is not None and self.lookup(resolved.name) is None and _looks_like_path_read(*maybe):
            path = maybe[1]
        return st.TargetName(parts, resolved.name, path=path)

    def check_definer_body(self, what: str, body: exp.Expression) -> None:
        """A stored body (persistent view or SQL function) is analysed but kept as written.

        A persistent view keeps its own text so that every later reader gets their own
        filters when the proxy expands it. A persistent SQL function's body cannot be
        expanded at call time, so one that reaches a protected table is refused.
        """
        scratch = _Run(self.ctx, self.args, self.guarded)
        copy = body.copy()
        scope = Scope.view_body(self.ctx.current_catalog, self.ctx.current_schema)
        changed = scratch.rewrite_tree(copy, scope, (), qualify=False)
        if changed and what == "function":
            raise RewriteRefused.invalid(
                "a persistent SQL function that reads a protected table cannot be enforced by the proxy; use a view"
            )

    # -- relations ------------------------------------------------------------------------

    def rewrite_tree(
        self,
        root: exp.Expression,
        scope: Scope,
        stack: tuple[TableName, ...],
        *,
        qualify: bool,
        exclude: frozenset[int] = frozenset(),
    ) -> int:
        """Filter/expand every read under `root`; the number of changes made."""
        before = self.changes
        for ref in relation_references(root, scope, prune=self.already_filtered, exclude=exclude):
            if ref.kind == "relation":
                self.relation(ref, root, stack, qualify)
            elif ref.kind == "table_argument":
                self.table_argument(ref, stack)
            else:
                self.table_function(ref.node.this, ref.scope, stack)
        return self.changes - before

    def relation(self, ref: Reference, root: exp.Expression, stack: tuple[TableName, ...], qualify: bool) -> None:
        node = ref.node
        assert isinstance(node, exp.Table)
        this = node.this
        if isinstance(this, exp.Func) and not is_identifier_clause(this):
            self.table_function(this, ref.scope, stack)
            return
        try:
            parts = written_parts(node, self.args)
        except Unresolvable as e:
            self.unanalysable(f"a relation name ({e})")
            return
        resolved = resolve(parts, ref.scope, self.temp_view_exists if ref.scope.namespace.temp_views else _never)
        if resolved.kind == "cte":
            if not resolved.cte_exact and self.guarded:
                other = resolve(parts, ref.scope, self.temp_view_exists if ref.scope.namespace.temp_views else _never, ctes=False)
                if other.kind == "catalog" and other.name is not None and self.reaches_protected(other.name, stack):
                    raise RewriteRefused.invalid(
                        f"the CTE reference {display(parts)} differs only in letter case from the CTE's name and "
                        f"also names a protected relation; spell it exactly like the CTE"
                    )
            return
        if resolved.kind in ("temp_view", "global_temp_view"):
            self.temp_views.add(resolved.view)
            return
        if resolved.kind == "unresolved" or resolved.name is None:
            self.unanalysable(f"the relation name {display(parts)} ({resolved.reason})")
            return
        name = resolved.name
        if self.guarded and "@" in parts[-1]:
            self.check_at_suffix(parts, ref.scope, stack)
        self.tables_read.add(name)
        policies = self.policies_for(name)
        if policies:
            info = self.lookup(name)
            if info is not None and info.kind == RelationKind.VIEW:
                raise RewriteRefused.invalid(f"row access policies on the view {name} are not supported")
            self.wrap(node, name, policies, parts, root)
            return
        info = self.lookup(name)
        if info is None:
            maybe = resolved.maybe_path
            if maybe is not None:
                # Spark reads files when the first part names any data source (a class name
                # too) and the catalog has no such table: always reported, the allow list judges.
                self.paths.append(PathRead(maybe[0].lower(), maybe[1], certain=maybe[0].lower() in FILE_FORMATS))
                return
        elif info.kind == RelationKind.VIEW and self.guarded:
            body = self.expanded_view(info, stack)
            if body is not None:
                alias = node.args.get("alias")
                columns = () if alias is not None else view_columns(info, body)
                default_alias = None if isinstance(node.this, exp.Identifier) else parts[-1]
                node.replace(derived_table(node, body, columns=columns, default_alias=default_alias))
                if alias is None:
                    unqualify_columns(root, parts)
                self.views_expanded.add(name)
                self.changes += 1
                return
        if qualify and (info is not None or len(parts) > 1):
            # A one-part name the catalog does not know stays as written: it may be a temp
            # view Spark made without a statement through the proxy (a memory sink, pyspark's
            # own `_pyspark_connect_temp_view_*`), and pinning would turn it into a missing
            # table. Nothing protected can hide there: policies need an existing table, the
            # session's state gate orders it after any USE, and the second opinion checks
            # what Spark resolved.
            qualified = quoted_table(name)
            for key in ("this", "db", "catalog"):
                node.set(key, qualified.args[key])

    def check_at_suffix(self, parts: tuple[str, ...], scope: Scope, stack: tuple[TableName, ...]) -> None:
        """`t@v12` is Delta's time travel by name; refuse it on protected relations."""
        base = parts[-1].split("@", 1)[0]
        if not base:
            return
        other = resolve((*parts[:-1], base), scope, self.temp_view_exists if scope.namespace.temp_views else _never)
        if other.kind == "catalog" and other.name is not None and self.reaches_protected(other.name, stack):
            raise RewriteRefused.denied(f"time travel by an @ suffix on protected table {other.name} is not supported")

    def reaches_protected(self, name: TableName, stack: tuple[TableName, ...]) -> bool:
        if self.policies_for(name):
            return True
        info = self.lookup(name)
        return info is not None and info.kind == RelationKind.VIEW and self.expanded_view(info, stack) is not None

    def wrap(self, node: exp.Table, name: TableName, policies: tuple, parts: tuple[str, ...], root: exp.Expression) -> None:
        check_modifiers(node, str(name))
        version = node.args.get("version")
        if version is not None and not decision.has_full_access(self.caller, policies):
            raise RewriteRefused.denied(f"time travel on protected table {name} requires a FILTER USING (TRUE) grant")
        if node.find_ancestor(exp.Lateral) is not None and needs_barrier(self.row_filter(name, policies)):
            # Spark refuses non-deterministic LATERAL subqueries, so the guard of a lookup
            # policy (wrap.evaluated_first) cannot be placed there, and without it Spark
            # would run the caller's predicates on hidden rows.
            raise RewriteRefused.invalid(
                f"{name} has a row access policy with a lookup subquery and cannot be read inside a "
                "LATERAL subquery; join it instead"
            )
        sample, limit = split_sample(node.args.get("sample"))
        inner, _ = self.inner_select(name, policies, version, sample, limit)
        info = self.lookup(name) if version is None and sample is None and limit is None else None
        moved = placeable(node, info.columns, info.column_types) if info is not None else []
        if moved and needs_barrier(self.row_filter(name, policies)):
            inner = inner.copy()  # caller predicates that cannot fail go below the guard (leakproof.py)
            self.placed.add((name, place_below(inner, moved)))
        had_alias = node.args.get("alias") is not None
        default_alias = None if isinstance(node.this, exp.Identifier) else parts[-1]
        node.replace(derived_table(node, inner.copy(), default_alias=default_alias))
        if not had_alias:
            unqualify_columns(root, parts)
        self.record_filter(name, policies)
        self.changes += 1

    def record_filter(self, name: TableName, policies: tuple) -> None:
        self.filtered = True
        self.tables_read.add(name)
        for policy in decision.applied_policies(self.caller, policies):
            self.policies.add(f"{name}:{policy}")

    def row_filter(self, name: TableName, policies: tuple) -> exp.Expression:
        """The caller's filter for `name`, lookup names qualified, identity bound (shared; copy it)."""
        return _bound_filter(self.caller, name, policies)

    def inner_select(
        self,
        name: TableName,
        policies: tuple,
        version: exp.Expression | None,
        sample: exp.Expression | None,
        limit: exp.Expression | None,
    ) -> tuple[exp.Select, str]:
        """The canonical filtering SELECT for `name` and its rendering (shared; copy it)."""
        if version is None and sample is None and limit is None:
            return _plain_inner(self.caller, name, policies)
        key = (name, *(render(x) if x is not None else "" for x in (version, sample, limit)))
        if key not in self._inner:
            select = inner_select(name, self.row_filter(name, policies), version=version, sample=sample, limit=limit)
            self._inner[key] = canonical(select)
        return self._inner[key]

    def already_filtered(self, sub: exp.Subquery, scope: Scope) -> bool:
        """A derived table that is exactly what `wrap` produces now for this caller."""
        table = marker_table(sub)
        if table is None:
            return False
        try:
            parts = written_parts(table)
        except Unresolvable:
            return False
        if len(parts) != 3:
            return False
        resolved = resolve(parts, scope, _never, ctes=False)
        if resolved.kind != "catalog" or resolved.name is None:
            return False
        policies = self.policies_for(resolved.name)
        if not policies:
            return False
        select = sub.this
        version, sample = table.args.get("version"), table.args.get("sample")
        _, expected = self.inner_select(resolved.name, policies, version, sample, select.args.get("limit"))
        if render(select) != expected:
            return False
        if version is not None and not decision.has_full_access(self.caller, policies):
            raise RewriteRefused.denied(f"time travel on protected table {resolved.name} requires a FILTER USING (TRUE) grant")
        self.record_filter(resolved.name, policies)
        return True

    def expanded_view(self, info: RelationInfo, stack: tuple[TableName, ...]) -> exp.Query | None:
        """The view's text rewritten for this caller, or None when it needs no expansion."""
        key = (info.name, len(stack))
        if key not in self._views:
            inner_stack = enter_view(stack, info.name)
            body = view_query(info)
            changed = bind_caller_identity(body, self.email)
            changed = self.rewrite_tree(body, view_scope(info), inner_stack, qualify=True) > 0 or changed
            # A stored text that is not the proxy's own rendering may read differently for
            # Spark (own_text.is_canonical_view_text): the proxy's reading is inlined instead.
            changed = changed or (self.guarded and not own_text.is_canonical_view_text(info.view_sql or ""))
            self._views[key] = body if changed else None
        cached = self._views[key]
        return cached.copy() if cached is not None else None

    def table_argument(self, ref: Reference, stack: tuple[TableName, ...]) -> None:
        """`TABLE(t)` passed to a table function reads `t` whole."""
        node = ref.node
        args = node.expressions if isinstance(node, exp.Anonymous) else []
        if len(args) == 1 and isinstance(args[0], exp.Query):
            return  # TABLE(SELECT ...): its relations are visited as reads
        parts = column_parts(args[0]) if len(args) == 1 and isinstance(args[0], exp.Column) else None
        if parts is None:
            self.unanalysable("a TABLE(...) argument")
            return
        resolved = resolve(parts, ref.scope, self.temp_view_exists if ref.scope.namespace.temp_views else _never)
        if resolved.kind == "catalog" and resolved.name is not None:
            self.tables_read.add(resolved.name)
            if self.reaches_protected(resolved.name, stack):
                raise RewriteRefused.invalid(
                    f"TABLE({display(parts)}) reads protected data unfiltered; pass TABLE(SELECT * FROM {display(parts)}) instead"
                )
            if self.guarded:
                args[0].replace(pinned_column(resolved.name))
        elif resolved.kind == "unresolved":
            self.unanalysable(f"the TABLE argument {display(parts)}")

    def table_function(self, func: exp.Expression, scope: Scope, stack: tuple[TableName, ...]) -> None:
        """Known generators are fine; others are reported, and refused over protected names."""
        name = (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()
        if name in SAFE_TABLE_FUNCTIONS:
            return
        if name in ("stream", "table") and self.guarded:
            raise RewriteRefused.invalid(f"{name.upper()}(...) in FROM is not analysable by the proxy")
        self.table_functions.append(name)
        if not self.guarded:
            return
        for literal in func.find_all(exp.Literal):
            if not literal.is_string:
                continue
            parts = parse_multipart(literal.this)
            if parts is None:
                continue
            resolved = resolve(parts, scope, self.temp_view_exists if scope.namespace.temp_views else _never, ctes=False)
            if resolved.kind == "catalog" and resolved.name is not None and self.reaches_protected(resolved.name, stack):
                raise RewriteRefused.invalid(
                    f"the table function {name}() over protected relation {resolved.name} is not supported"
                )
            if resolved.kind == "catalog" and resolved.name is not None and self.lookup(resolved.name) is not None:
                literal.replace(exp.Literal.string(multipart_text(resolved.name)))  # pinned


@lru_cache(maxsize=4096)
def _bound_filter(caller: Caller, name: TableName, policies: tuple) -> exp.Expression:
    # Keyed on the caller and the policy objects themselves: a changed policy is a new key.
    try:
        bound = decision.row_filter(caller, policies)
    except SqlglotError:
        raise RewriteRefused.invalid(f"the row access policies of {name} cannot be applied") from None
    if bound is None:  # not reachable: policies is non-empty
        bound = exp.false()
    bound = qualify_filter_tables(bound.copy(), name)
    bind_caller_identity(bound, caller.email)
    return bound


@lru_cache(maxsize=4096)
def _plain_inner(caller: Caller, name: TableName, policies: tuple) -> tuple[exp.Select, str]:
    return canonical(inner_select(name, _bound_filter(caller, name, policies)))


def _looks_like_path_read(fmt: str, path: str) -> bool:
    """`<format>.`<path>``: Spark reads files when the catalog has no such table."""
    return fmt.lower() in FILE_FORMATS or "/" in path or ":" in path


def _never(_name: str) -> bool:
    return False


def _number_positional(sql: str, holders: list[Token]) -> str:
    """Give every `?` a name recording its text position, so parsing cannot reorder them."""
    pieces, last = [], 0
    for i, token in enumerate(holders):
        pieces.append(sql[last : token.start])
        pieces.append(f":{POSITIONAL_PREFIX}{i}")
        last = token.end + 1
    pieces.append(sql[last:])
    return "".join(pieces)


def _short(error: SqlglotError) -> str:
    if isinstance(error, ParseError) and error.errors:
        first = error.errors[0]
        return f"{first.get('description')} at line {first.get('line')}, column {first.get('col')}"
    return str(error).splitlines()[0][:200]
