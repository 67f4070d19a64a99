"""The reads walk: resolve names -> expand views -> wrap protected reads -> pin, per reference.

`rewrite_reads` visits every relation reference under a tree (scope.py lists them, in
pre-order, with the scope each is resolved in) and sends each through the relation passes:

1. resolve (resolve.py): what the reference reads, as a typed `Read`;
2. expand views (views.py): a persistent view whose text reaches a protected table, or uses
   a caller identity function, or is not the proxy's own rendering, is replaced by its text
   rewritten by this same walk (recursively, in the view's own namespace);
3. wrap (protect.py): a protected table becomes a filtering derived table;
4. pin (pin.py): any other catalog relation is rendered fully qualified when `qualify`, and
   a session temp view (or a one-part name nothing else explains) as `system.session.<view>`.

The passes run per reference rather than one whole-tree walk each because a view's text is
rewritten by the whole sequence before it is inlined, and derived tables that are already
filtered text are recognised (and skipped) while the references are listed. `TABLE(t)`
arguments and table functions (LATERAL or FROM) are checked here too: reading a protected
relation through them is refused. Facts (tables read, temp views, paths, views expanded,
table functions) are recorded on the `Run`.

>>> from types import SimpleNamespace
>>> import sqlglot
>>> from rowgate.identity.caller import Caller
>>> ctx = SimpleNamespace(caller=Caller("user:ann@example.com"), current_catalog="spark_catalog",
...     current_schema="default", temp_view_exists=lambda n: False,
...     lookup=lambda n: RelationInfo(n, RelationKind.TABLE), policies_for=lambda n: ())
>>> run = Run(ctx, None, guarded=True)
>>> tree = sqlglot.parse_one("SELECT * FROM db.t JOIN range(3) ON true", read="spark")
>>> rewrite_reads(run, tree, run.top_scope(), (), qualify=True), tree.sql("spark")
(0, 'SELECT * FROM `spark_catalog`.`db`.`t` JOIN RANGE(3) ON TRUE')
>>> sorted(str(n) for n in run.found.tables_read)
['spark_catalog.db.t']
"""

from __future__ import annotations

from sqlglot import exp

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.policy.model import TableName
from rowgate.rewrite.sql import canonical as own_text
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.identity import bind_caller_identity
from rowgate.rewrite.sql.names import column_parts, display, parse_multipart, resolve
from rowgate.rewrite.sql.pin import multipart_text, pin, pin_temp_view, pinned_column, temp_view_column
from rowgate.rewrite.sql.protect import already_filtered, wrap_protected
from rowgate.rewrite.sql.resolve import resolve_read
from rowgate.rewrite.sql.run import Run
from rowgate.rewrite.sql.scope import Reference, Scope, relation_references
from rowgate.rewrite.sql.views import enter_view, place_view, view_query, view_scope

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


def rewrite_reads(
    run: Run,
    root: exp.Expr,
    scope: Scope,
    stack: tuple[TableName, ...],
    *,
    qualify: bool,
    exclude: frozenset[int] = frozenset(),
) -> int:
    """Filter/expand/pin every read under `root`; the number of changes made.

    `stack` holds the views being expanded (cycles and depth are refused, views.py);
    `exclude` the `id()`s of nodes that are not reads (targets, stored bodies).
    """
    before = run.changes

    def prune(sub: exp.Subquery, sub_scope: Scope) -> bool:
        return already_filtered(run, sub, sub_scope)

    for ref in relation_references(root, scope, prune=prune, exclude=exclude):
        if ref.kind == "relation":
            _relation(run, ref, root, stack, qualify)
        elif ref.kind == "table_argument":
            _table_argument(run, ref, stack)
        else:
            _table_function(run, ref.node.this, ref.scope, stack)
    return run.changes - before


def reaches_protected(run: Run, name: TableName, stack: tuple[TableName, ...]) -> bool:
    """Whether reading `name` reads protected data: a protected table or a view over one."""
    if run.policies_for(name):
        return True
    info = run.lookup(name)
    return info is not None and info.kind == RelationKind.VIEW and expanded_view(run, info, stack) is not None


def expanded_view(run: Run, info: RelationInfo, stack: tuple[TableName, ...]) -> exp.Query | None:
    """The view's text rewritten for this caller, or None when it needs no expansion."""
    key = (info.name, len(stack))
    if key not in run.view_cache:
        inner_stack = enter_view(stack, info.name)
        body = view_query(info)
        changed = bind_caller_identity(body, run.email)
        changed = rewrite_reads(run, body, view_scope(info), inner_stack, qualify=True) > 0 or changed
        # A stored text that is not the proxy's own rendering may read differently for
        # Spark (own_text.is_canonical_view_text): the proxy's reading is inlined instead.
        changed = changed or (run.guarded and not own_text.is_canonical_view_text(info.view_sql or ""))
        run.view_cache[key] = body if changed else None
    cached = run.view_cache[key]
    return cached.copy() if cached is not None else None


def _relation(run: Run, ref: Reference, root: exp.Expr, stack: tuple[TableName, ...], qualify: bool) -> None:
    node = ref.node
    assert isinstance(node, exp.Table)
    read = resolve_read(run, ref, lambda name: reaches_protected(run, name, stack))
    if read.kind == "table_function":
        _table_function(run, node.this, ref.scope, stack)
        return
    if read.kind == "temp_view":
        run.found.add(temp_views_read=(read.temp_view,))
        if qualify and run.guarded and run.qualify_temp_views and not read.temp_view.startswith("global_temp."):
            pin_temp_view(node, read.parts[-1])  # names the temp view and nothing else
        return
    if read.kind in ("cte", "unanalysable") or read.name is None:
        return
    run.found.add(tables_read=(read.name,))
    if read.kind == "protected":
        wrap_protected(run, node, read.name, read.policies, read.parts, root)
        return
    if read.kind == "path":
        assert read.path is not None
        run.found.add(paths_read=(read.path,))
        return
    if read.kind == "view":
        assert read.info is not None
        body = expanded_view(run, read.info, stack)
        if body is not None:
            place_view(node, read.info, body, read.parts, root)
            run.found.add(views_expanded=(read.name,))
            run.changes += 1
            return
    if qualify and (read.info is not None or len(read.parts) > 1):
        pin(node, read.name)
    elif qualify and run.guarded and ref.scope.namespace.temp_views and run.qualify_unknown:
        # A one-part name neither the catalog nor the proxy's list of temp views knows: a
        # temp view Spark made without a statement through the proxy (a memory sink,
        # pyspark's own `_pyspark_connect_temp_view_*`), or nothing. Forwarded as a temp
        # view, it cannot become a table Spark finds later (a table created, renamed or
        # moved in between, a temp view dropped); rowgate refuses it unless Spark lists
        # such a temp view (pipeline/enforce/rules/unknown_relations.py). Not for admins: they may
        # turn on Spark's SQL path, through which such a name can be a table elsewhere.
        run.found.tables_read -= {read.name}
        run.found.add(unknown_relations=(read.parts[0],))
        pin_temp_view(node, read.parts[0])


def _table_argument(run: Run, ref: Reference, stack: tuple[TableName, ...]) -> None:
    """`TABLE(t)` passed to a table function reads `t` whole."""
    node = ref.node
    args = node.expressions if isinstance(node, exp.Anonymous) else []
    if len(args) == 1 and isinstance(args[0], exp.Query):
        return  # TABLE(SELECT ...): its relations are visited as reads
    parts = column_parts(args[0]) if len(args) == 1 and isinstance(args[0], exp.Column) else None
    if parts is None:
        run.unanalysable("a TABLE(...) argument")
        return
    resolved = resolve(parts, ref.scope, run.temp_views_in(ref.scope))
    if resolved.kind == "temp_view":
        run.found.add(temp_views_read=(resolved.view,))
        if run.guarded and run.qualify_temp_views:
            args[0].replace(temp_view_column(parts[-1]))
        return
    if (
        resolved.kind == "catalog"
        and resolved.name is not None
        and len(parts) == 1
        and run.guarded
        and run.qualify_unknown
        and ref.scope.namespace.temp_views
        and run.lookup(resolved.name) is None
    ):
        run.found.add(unknown_relations=(parts[0],))  # as in `_relation`: a temp view or nothing
        args[0].replace(temp_view_column(parts[0]))
        return
    if resolved.kind == "catalog" and resolved.name is not None:
        run.found.add(tables_read=(resolved.name,))
        if reaches_protected(run, resolved.name, stack):
            raise refuse.invalid(
                "unfiltered_table_argument",
                f"TABLE({display(parts)}) reads protected data unfiltered; pass TABLE(SELECT * FROM {display(parts)}) instead",
            )
        if run.guarded:
            args[0].replace(pinned_column(resolved.name))
    elif resolved.kind == "unresolved":
        run.unanalysable(f"the TABLE argument {display(parts)}")


def _table_function(run: Run, func: exp.Func, scope: Scope, stack: tuple[TableName, ...]) -> None:
    """Known generators are fine; others are reported, and refused over protected names."""
    name = (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()
    if name in SAFE_TABLE_FUNCTIONS:
        return
    if name in ("stream", "table") and run.guarded:
        raise refuse.invalid("unanalysable_table_function", f"{name.upper()}(...) in FROM is not analysable by the proxy")
    run.found.add(table_functions=(name,))
    if not run.guarded:
        return
    for literal in func.find_all(exp.Literal):
        if not literal.is_string:
            continue
        parts = parse_multipart(literal.this)
        if parts is None:
            continue
        resolved = resolve(parts, scope, run.temp_views_in(scope), ctes=False)
        if resolved.kind == "catalog" and resolved.name is not None and reaches_protected(run, resolved.name, stack):
            raise refuse.invalid(
                "table_function_over_protected",
                f"the table function {name}() over protected relation {resolved.name} is not supported",
            )
        if resolved.kind == "catalog" and resolved.name is not None and run.lookup(resolved.name) is not None:
            literal.replace(exp.Literal.string(multipart_text(resolved.name)))  # pinned
