"""Which names are visible where: the one question this module answers.

Spark resolves a relation name against, in order, the CTEs visible at that point (one-part
names only), the session's temp views (one-part names, not inside a persistent view's
text), and the catalog, relative to a current catalog and database (for a view's text: the
ones the view was created in). `Scope` carries exactly that; `relation_references` walks a
statement and pairs every relation reference with the scope it is resolved in.

CTE visibility follows Spark: inside one `WITH`, a CTE body sees the CTEs defined before it
(and itself when the `WITH` is `RECURSIVE`); the statement under the `WITH` sees all of
them; an inner `WITH` shadows an outer one.

>>> import sqlglot
>>> tree = sqlglot.parse_one(
...     "WITH orders AS (SELECT * FROM orders) SELECT * FROM orders", read="spark")
>>> [(r.node.name, r.scope.cte_match(r.node.name)) for r in relation_references(tree, Scope.top("spark_catalog", "default"))]
[('orders', None), ('orders', 'exact')]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp


@dataclass(frozen=True)
class Namespace:
    """Where unqualified names land, and whether session temp views are visible."""

    catalog: str
    schema: str
    temp_views: bool = True
    # `system.session.<view>` names a session temp view (Spark 4.3; 4.0 reads it as a
    # two-part namespace of the session catalog and refuses it)
    temp_view_namespace: bool = True


@dataclass(frozen=True)
class Scope:
    namespace: Namespace
    ctes: tuple[str, ...] = ()  # CTE names visible here, as written, innermost last
    in_view: tuple[str, ...] = field(default=(), compare=False)  # view names being expanded (for messages)

    @classmethod
    def top(cls, catalog: str, schema: str, temp_view_namespace: bool = True) -> Scope:
        return cls(Namespace(catalog, schema, temp_views=True, temp_view_namespace=temp_view_namespace))

    @classmethod
    def view_body(cls, catalog: str, schema: str) -> Scope:
        """A persistent view's text: its own namespace, no temp views, no outer CTEs."""
        return cls(Namespace(catalog, schema, temp_views=False))

    def with_ctes(self, names: tuple[str, ...]) -> Scope:
        if not names:
            return self
        return Scope(self.namespace, self.ctes + names, self.in_view)

    def cte_match(self, name: str) -> Literal["exact", "casefold"] | None:
        """Whether a one-part name refers to a visible CTE.

        "casefold" means it matches only ignoring case: Spark's default resolver treats it
        as the CTE, but with `spark.sql.caseSensitive=true` it would be a table.
        """
        folded = name.casefold()
        found: Literal["exact", "casefold"] | None = None
        for cte in self.ctes:
            if cte == name:
                return "exact"
            if cte.casefold() == folded:
                found = "casefold"
        return found


ReferenceKind = Literal["relation", "table_argument", "lateral_function"]


@dataclass
class Reference:
    """One place a relation may be read: a table/view/TVF in FROM-like position, a
    `TABLE(x)` function argument, or a function in a LATERAL clause."""

    node: exp.Expr
    scope: Scope
    kind: ReferenceKind = "relation"


Prune = Callable[[exp.Subquery, Scope], bool]


def relation_references(
    root: exp.Expr,
    scope: Scope,
    *,
    prune: Prune | None = None,
    exclude: frozenset[int] = frozenset(),
) -> list[Reference]:
    """Every relation reference under `root`, in pre-order, with its scope.

    Hints are skipped (they name relations without reading them). `exclude` holds `id()`s
    of nodes that are not reads (write targets, DDL names); their subtrees are skipped too.
    `prune(subquery, scope)` returning True skips a derived table (already filtered text).
    """
    out: list[Reference] = []
    _visit(root, scope, out, prune, exclude)
    return out


def _visit(node: exp.Expr, scope: Scope, out: list[Reference], prune: Prune | None, exclude: frozenset[int]) -> None:
    if id(node) in exclude or isinstance(node, exp.Hint):
        return
    if prune is not None and isinstance(node, exp.Subquery) and prune(node, scope):
        return
    with_ = node.args.get("with_")
    if isinstance(with_, exp.With):
        scope = _visit_with(with_, scope, out, prune, exclude)
    if isinstance(node, exp.Table):
        out.append(Reference(node, scope, "relation"))
    elif isinstance(node, exp.Anonymous) and node.name.upper() == "TABLE":
        out.append(Reference(node, scope, "table_argument"))
    elif isinstance(node, exp.Lateral) and isinstance(node.this, exp.Func):
        out.append(Reference(node, scope, "lateral_function"))
    for key, value in node.args.items():
        if key == "with_" or value is None:
            continue
        if isinstance(value, list):
            for child in value:
                if isinstance(child, exp.Expression):
                    _visit(child, scope, out, prune, exclude)
        elif isinstance(value, exp.Expression):
            _visit(value, scope, out, prune, exclude)


def _visit_with(with_: exp.With, scope: Scope, out: list[Reference], prune: Prune | None, exclude: frozenset[int]) -> Scope:
    ctes = [c for c in with_.expressions if isinstance(c, exp.CTE)]
    names = tuple(c.alias_or_name for c in ctes)
    recursive = bool(with_.args.get("recursive"))
    for i, cte in enumerate(ctes):
        visible = names[: i + 1] if recursive else names[:i]
        _visit(cte.this, scope.with_ctes(visible), out, prune, exclude)
    return scope.with_ctes(names)
