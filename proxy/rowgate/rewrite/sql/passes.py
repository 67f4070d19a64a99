"""The passes one parsed statement goes through, in order, as data: `PASSES`.

Like sqlglot's optimizer `RULES`, the order is a tuple and `run_passes` is the whole driver:
each pass reads and changes the `Statement` (the tree, what is known about it) and the
`Run` (caches, facts found), and may end the rewrite early by returning its result.

1. `normalize` (shape.py): forms sqlglot reads differently from Spark rebuilt in one shape,
   `INSERT INTO t TABLE s` as `... SELECT * FROM s`; the only pass before classification
   that edits the tree;
2. `classify` (classify.py, pure): kind, non-read names, stored bodies; unknown kinds refused;
3. `check_shape` (shape.py): known parser differentials refused while protection is in force;
4. `use`: USE rendered by the proxy with its session effects (ends the rewrite);
5. `reserved`: creating functions is for admins while protection is in force;
6. `bind_identity` (identity.py): current_user()/session_user()/user() -> the caller's email,
   outside stored bodies (a view must keep meaning "whoever reads this");
7. `statement_effects` (effects.py): targets resolved, writes to protected tables refused
   without a FILTER USING (TRUE) grant, what the statement changes collected;
8. `reads` (reads.py): resolve names -> expand views -> wrap protected reads -> pin, for
   every relation read;
9. `stored_bodies`: a persistent view or SQL function body is analysed, never rewritten; a
   function body that reaches protected data is refused;
10. `pin_names` (pin.py): write/DDL targets and names in stored bodies fully qualified;
11. `shared_views`: a global temp view over filtered or session data is refused;
12. `render`: the client's text with the proxy's edits spliced in (splice.py), or, when the
    splice is not sure, the proxy's own canonical rendering (wrap.py), positional parameters
    back in place; the client's bytes when nothing is protected and nothing changed.

>>> [name for name, _ in PASSES][5:9]
['bind_identity', 'statement_effects', 'reads', 'stored_bodies']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.tokens import Token

from rowgate.rewrite.facts import UserCode
from rowgate.rewrite.sql import canonical as own_text
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.classify import CREATE_GLOBAL_TEMP_VIEW, Classified, classify
from rowgate.rewrite.sql.code import code_in
from rowgate.rewrite.sql.effects import Enforced, enforce, use_effects
from rowgate.rewrite.sql.identity import bind_caller_identity
from rowgate.rewrite.sql.names import POSITIONAL_PREFIX, Unresolvable, written_parts
from rowgate.rewrite.sql.pin import pin_relations, pin_targets
from rowgate.rewrite.sql.reads import rewrite_reads
from rowgate.rewrite.sql.resolve import resolve_target
from rowgate.rewrite.sql.result import NO_EFFECTS, RewriteResult, SessionEffects
from rowgate.rewrite.sql.run import Run
from rowgate.rewrite.sql.shape import check_shape, normalize
from rowgate.rewrite.sql.splice import reads_as, splice
from rowgate.rewrite.sql.wrap import render


@dataclass
class Statement:
    """One parsed statement on its way through the passes."""

    sql: str  # the client's text
    tree: exp.Expr
    renamed: bool = False  # positional `?` parameters were numbered for parsing
    classified: Classified = Classified("unknown")
    enforced: Enforced | None = None
    pristine: exp.Expr | None = None  # the client's parse, before any pass (splice.py)
    tokens: list[Token] = field(default_factory=list)  # all tokens of `sql`


Pass = Callable[[Run, Statement], RewriteResult | None]


def passthrough(
    sql: str, kind: str, *, analysed: bool = False, effects: SessionEffects = NO_EFFECTS, source: str | None = None
) -> RewriteResult:
    """`sql` forwarded for a statement of `kind`; `source` is the client's text when `sql`
    is the proxy's own form of it."""
    changed = source is not None and sql != source
    return RewriteResult(sql=sql, statement_kind=kind, analysed=analysed, session_effects=effects, changed=changed)


def _normalize(run: Run, s: Statement) -> None:
    normalize(s.tree)


def _classify(run: Run, s: Statement) -> RewriteResult | None:
    s.classified = classify(s.tree)
    if s.classified.kind == "unknown":
        run.unanalysable(f"this {type(s.tree).__name__.upper()} statement")
        return passthrough(s.sql, "unknown")
    return None


def _check_shape(run: Run, s: Statement) -> None:
    if run.guarded:
        check_shape(s.tree)


def _use(run: Run, s: Statement) -> RewriteResult | None:
    """`USE [CATALOG|DATABASE|...] x`, rendered by the proxy (sqlglot writes `USE NAMESPACE AS x`)."""
    if s.classified.kind != "use":
        return None
    target = s.tree.this
    kind = s.tree.args.get("kind")
    kind_text = kind.name if isinstance(kind, exp.Expression) else str(kind or "")
    try:
        if not isinstance(target, exp.Table):
            raise Unresolvable("an unexpected USE target")
        parts = written_parts(target, run.args)
    except Unresolvable as e:
        run.unanalysable(f"the USE target ({e})")
        return passthrough(s.sql, "use")
    effects = use_effects(parts, kind_text, run.ctx.current_catalog)
    words = ("USE", *((kind_text.upper(),) if kind_text else ()), ".".join(own_text.identifier(p) for p in parts))
    out = " ".join(words) if run.guarded else s.sql
    return RewriteResult(sql=out, statement_kind="use", session_effects=effects, changed=out != s.sql)


def _reserved(run: Run, s: Statement) -> None:
    if s.classified.creates_function and run.guarded and not run.ctx.is_admin:
        raise refuse.denied(
            "create_function_admin_only",
            "creating functions is reserved to admins while row access policies are in force "
            "(a function can stand in for one a row filter calls)",
        )


def _bind_identity(run: Run, s: Statement) -> None:
    stored = frozenset(id(body) for _, body in s.classified.definer_bodies)
    text = None if s.renamed else s.sql  # the text the tree's source spans point into
    if bind_caller_identity(s.tree, run.email, skip=stored, name_columns=run.name_identity_columns, text=text):
        run.found.identity_bound = True
        run.changes += 1


def _statement_effects(run: Run, s: Statement) -> None:
    s.enforced = enforce(s.classified, lambda node: resolve_target(run, node), run.policies_for, run.caller)


def _reads(run: Run, s: Statement) -> None:
    rewrite_reads(run, s.tree, run.top_scope(), (), qualify=run.guarded, exclude=s.classified.excluded_ids())


def _stored_bodies(run: Run, s: Statement) -> None:
    """A stored body (persistent view or SQL function) is analysed but kept as written.

    A persistent view keeps its own text so that every later reader gets their own
    filters when the proxy expands it. A persistent SQL function's body cannot be
    expanded at call time, so one that reaches a protected table is refused.
    """
    for what, body in s.classified.definer_bodies:
        changed = rewrite_reads(run.scratch(), body.copy(), run.body_scope(), (), qualify=False)
        if changed and what == "function":
            raise refuse.invalid(
                "stored_function_reads_protected",
                "a persistent SQL function that reads a protected table cannot be enforced by the proxy; use a view",
            )


def _pin_names(run: Run, s: Statement) -> None:
    if not run.guarded:
        return
    pin_targets(s.classified.targets, lambda node: resolve_target(run, node))
    for _, body in s.classified.definer_bodies:
        pin_relations(body, run.body_scope(), run.args, run.temp_view_exists, run.lookup)


def _shared_views(run: Run, s: Statement) -> None:
    if any(t.role == CREATE_GLOBAL_TEMP_VIEW for t in s.classified.targets) and (
        run.found.filtered or (run.guarded and any(not v.startswith("global_temp.") for v in run.found.temp_views_read))
    ):
        # Global temp views are shared by every session: this caller's filtered rows (also
        # those held in its session temp views) would reach callers the policies exclude.
        raise refuse.denied(
            "global_temp_view_over_protected",
            "a global temporary view over protected or session data would show this caller's rows to every "
            "session; create a session temporary view instead",
        )


def _render(run: Run, s: Statement) -> RewriteResult:
    out = s.sql
    if run.changes or run.guarded:
        out = _forwarded(run, s)
    enforced = s.enforced or Enforced(set(), NO_EFFECTS)
    facts = {
        **run.found.values(),
        "tables_written": frozenset(enforced.tables_written),
        "user_code": tuple(UserCode(kind) for kind in code_in(s.tree)),
        "changed": out != s.sql,
    }
    return RewriteResult(out, s.classified.kind, session_effects=enforced.effects, **facts)


def _forwarded(run: Run, s: Statement) -> str:
    """The client's text with rowgate's edits spliced in (splice.py), else the canonical rendering."""
    spliced = splice(s.sql, s.tokens, s.pristine, s.tree) if s.pristine is not None else None
    if spliced == s.sql:
        return spliced  # no edit: the client's own text, which parsed into the pristine tree
    out = _rendered(run, s)
    if run.describe_column is not None:
        out += " " + ".".join(own_text.identifier(p) for p in run.describe_column)
    elif spliced is not None and reads_as(spliced, out):
        return spliced
    return out


def _rendered(run: Run, s: Statement) -> str:
    if s.renamed:
        holders = [p for p in s.tree.find_all(exp.Placeholder, bfs=False) if p.name.startswith(POSITIONAL_PREFIX)]
        order = [int(p.name[len(POSITIONAL_PREFIX) :]) for p in holders]
        if order != list(range(run.positional_count)):
            raise refuse.invalid(
                "positional_parameters_unkept",
                "positional (?) parameters cannot be kept in place in the rewritten statement (a ? inside "
                "IDENTIFIER() of a filtered relation, or FROM-first/pipe syntax); use named parameters",
            )
        for p in holders:
            p.replace(exp.Placeholder())
    return render(s.tree)


PASSES: tuple[tuple[str, Pass], ...] = (
    ("normalize", _normalize),
    ("classify", _classify),
    ("check_shape", _check_shape),
    ("use", _use),
    ("reserved", _reserved),
    ("bind_identity", _bind_identity),
    ("statement_effects", _statement_effects),
    ("reads", _reads),
    ("stored_bodies", _stored_bodies),
    ("pin_names", _pin_names),
    ("shared_views", _shared_views),
    ("render", _render),
)


def run_passes(run: Run, statement: Statement, passes: tuple[tuple[str, Pass], ...] = PASSES) -> RewriteResult:
    """Run `passes` in order; the first result a pass returns is the rewrite's result."""
    for _name, step in passes:
        result = step(run, statement)
        if result is not None:
            return result
    raise AssertionError("the last pass renders the statement")
